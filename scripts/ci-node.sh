#!/usr/bin/env bash
# CI for the TypeScript client (clients/typescript), called by .ci/run:
# Node.js 20 or later (from Debian's packages if the machine has none), the
# committed compiled output up to date with the sources, the package's tests
# against real agents, an offline install of the folder into a fresh project,
# and the example worker through handoff conformance (TCP and a Unix socket).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
pkg=clients/typescript

node_ok() {
  command -v node >/dev/null && command -v npm >/dev/null &&
    node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'
}
if ! node_ok; then
  echo "node 20 or later and npm are not installed: installing Debian's nodejs and npm"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
if ! node_ok; then
  echo "clients/typescript needs node 20 or later; this machine has $(node --version 2>/dev/null || echo none)" >&2
  exit 1
fi
echo "node $(node --version), npm $(npm --version)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "-- npm ci, and the committed dist/ and examples/dist/ are what the sources compile to"
(cd "$pkg" && npm ci --no-audit --no-fund --loglevel=error)
(cd "$pkg" && npx tsc -p tsconfig.json --outDir "$work/dist" && npx tsc -p examples/tsconfig.json --outDir "$work/examples-dist")
if ! diff -r "$pkg/dist" "$work/dist" || ! diff -r "$pkg/examples/dist" "$work/examples-dist"; then
  echo "clients/typescript: the committed compiled output is not what the sources compile to: run 'npm run build' there and commit it" >&2
  exit 1
fi

echo "-- the package's tests (node --test) against real agents"
go build -o "$work/bin/handoff" ./cmd/handoff
(cd "$pkg" && HANDOFF_BIN="$work/bin/handoff" npm test)

echo "-- npm install ./clients/typescript into a fresh project, offline, with an empty cache"
mkdir "$work/fresh"
(
  cd "$work/fresh"
  npm init -y >/dev/null
  npm_config_cache="$work/npm-cache" npm install --offline --no-audit --no-fund --loglevel=error "$root/$pkg"
  node --input-type=module -e '
    import { Client, run, NotOwner, Resume, Unavailable, MediaBinary } from "@handoffhq/client";
    for (const [name, v] of Object.entries({ Client, run, NotOwner, Resume, Unavailable }))
      if (typeof v !== "function") throw new Error(name + " is not exported");
    if (MediaBinary !== "application/vnd.handoff.binary") throw new Error("MediaBinary: " + MediaBinary);
    console.log("the installed package imports");
  '
)

echo "-- the example worker passes handoff conformance, over TCP and a Unix socket"
"$work/bin/handoff" conformance --quiet -- node "$pkg/examples/dist/counter.js"
"$work/bin/handoff" conformance --quiet --unix -- node "$pkg/examples/dist/counter.js"
