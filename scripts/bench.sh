#!/usr/bin/env bash
# bench.sh runs handoff's standard rebalance comparison and keeps every
# result under one folder, bench-results/<date>_<time>/ (or $OUT):
#
#   scale-up-3-4/     handoff-lab bench --scenario scale-up   --from 3 --to 4
#   scale-down-4-3/   handoff-lab bench --scenario scale-down --from 4 --to 3
#
# each in the modes eager, stable and cold, on the same pre-loaded state and
# input, with results.json, table.txt and timeline-<mode>.svg per scenario,
# plus summary.txt (both tables) and environment.txt (machine, load, commit).
# docs/bench.md explains the figures and the pictures.
#
# Members run as separate processes (handoff-lab bench --processes): a
# nats-server, and per member a 'handoff agent' and an examples/counter
# worker talking to it over HTTP. IN_PROCESS=1 runs the in-process lab
# instead (agents, workers and an embedded NATS in one process).
#
# Sizes come from the environment (defaults below); other arguments go to
# every 'handoff-lab bench', e.g. --keep or --agent-env NAME=VALUE:
#
#   KEYS=20000 RATE=2000 scripts/bench.sh --sample 20ms
set -euo pipefail
cd "$(dirname "$0")/.."

MODES="${MODES:-eager,stable,cold}"
TASKS="${TASKS:-32}"
STATELESS_SHARE="${STATELESS_SHARE:-0.25}"
KEYS="${KEYS:-25000}"
VALUE_SIZE="${VALUE_SIZE:-256}"
RATE="${RATE:-1000}"
STANDBYS="${STANDBYS:-0}"
IN_PROCESS="${IN_PROCESS:-}"

out="${OUT:-bench-results/$(date -u +%Y-%m-%d_%H%M%S)}"
mkdir -p "$out"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
echo "bench.sh: building handoff, handoff-lab, counter and nats-server" >&2
go build -o "$bin/" ./cmd/handoff ./cmd/handoff-lab ./examples/counter github.com/nats-io/nats-server/v2
layout=(--processes --bin "$bin")
layout_name="processes (nats-server; per member a handoff agent and a counter worker)"
if [ -n "$IN_PROCESS" ]; then
  layout=()
  layout_name="in one process"
fi

{
  echo "date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit:    $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "go:        $(go version)"
  echo "machine:   $(uname -srm), $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?') CPUs"
  echo "load:      $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown) (1, 5, 15 min, before the runs)"
  echo "sizes:     tasks $TASKS, stateless share $STATELESS_SHARE, keys $KEYS × $VALUE_SIZE B per task, rate $RATE msg/s, standbys $STANDBYS"
  echo "modes:     $MODES"
  echo "members:   $layout_name"
  echo "arguments: $*"
} > "$out/environment.txt"

sizes=(--tasks "$TASKS" --stateless-share "$STATELESS_SHARE" --keys "$KEYS" --value-size "$VALUE_SIZE"
       --rate "$RATE" --standbys "$STANDBYS" --modes "$MODES" "${layout[@]}")
status=0
for run in "scale-up 3 4" "scale-down 4 3"; do
  read -r scenario from to <<<"$run"
  dir="$out/$scenario-$from-$to"
  echo "bench.sh: $scenario $from→$to → $dir" >&2
  if ! "$bin/handoff-lab" bench --scenario "$scenario" --from "$from" --to "$to" "${sizes[@]}" --out "$dir" "$@" >/dev/null; then
    echo "bench.sh: $scenario $from→$to failed (see $dir/table.txt)" >&2
    status=1
  fi
done

{
  cat "$out/environment.txt"
  for f in "$out"/*/table.txt; do
    printf '\n\n'
    cat "$f"
  done
} > "$out/summary.txt"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)" >> "$out/environment.txt"
cat "$out/summary.txt"
echo "bench.sh: results in $out" >&2
exit "$status"
