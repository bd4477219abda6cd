# syntax=docker/dockerfile:1
#
# The handoff sidecar image: one static binary on a distroless base, run as a
# non-root user. See docs/operations.md for how to run it.
#
#   docker build -t handoff .
#   docker run --rm -v handoff-data:/var/lib/handoff handoff --group orders --tasks 'orders-0..7'
#
# cmd/handoff/docker_test.go checks this file (stages, user, entrypoint,
# volume, health check) and runs its go build line.

# The Go version of go.mod; the golang image of that minor version has a
# toolchain that satisfies it.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so that a change of the sources reuses this layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# CGO_ENABLED=0: pebble and nats-server need no cgo, and a static binary runs
# on an image with no libc.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/handoff ./cmd/handoff
# The data directory, empty: copied into the runtime image with the runtime
# user as its owner, so that a new volume mounted there is writable by it.
RUN mkdir -p /out/data

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/handoff /handoff
COPY --from=build --chown=65532:65532 /out/data /var/lib/handoff
# Local state (Pebble) and, without --nats, the embedded NATS server's
# JetStream store. Keep it on a volume: a member that restarts with its
# state gets its tasks back without replaying their changelogs.
ENV HANDOFF_DATA_DIR=/var/lib/handoff
VOLUME ["/var/lib/handoff"]
# Numeric, so that Kubernetes' runAsNonRoot can verify it: distroless's nonroot.
USER 65532:65532
# The worker API stays on 127.0.0.1:7070 (the default --listen): only
# processes in the same network namespace (the worker's container in the pod,
# or one started with --network container:<this one>) may call it. Hence no
# EXPOSE. The health check runs inside the container, so loopback reaches it;
# it probes $HANDOFF_LISTEN if that is set.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/handoff", "health"]
ENTRYPOINT ["/handoff", "agent"]
