#!/usr/bin/env bash
# bench-ab.sh compares two commits of handoff on the bench of processes:
# it builds each commit's handoff, counter and nats-server, then runs
# 'handoff-lab bench --processes' with each in turn, A B A B ..., so that both
# see the same machine load, and prints one line per run with the planned
# stateful pauses and the hand-off breakdown's steps (p50 / p99, ms after
# the release). Every run's results.json stays under $OUT.
#
#   scripts/bench-ab.sh HEAD~1 HEAD                 # scale-up 3→4, eager
#   ROUNDS=5 scripts/bench-ab.sh main HEAD --modes stable --scenario scale-down
#
# Arguments after the two commits go to every 'handoff-lab bench' (default:
# --modes eager). Needs git, go and jq.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 2 ]; then
  echo "usage: $0 COMMIT_A COMMIT_B [handoff bench flags...]" >&2
  exit 2
fi
a="$1" b="$2"
shift 2
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--modes eager)
ROUNDS="${ROUNDS:-3}"
out="${OUT:-bench-results/ab-$(date -u +%Y-%m-%d_%H%M%S)}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

build() { # build COMMIT DIR
  local src="$work/src-$2"
  mkdir -p "$src" "$work/$2"
  git archive "$1" | tar -x -C "$src"
  # The bench is in its own binary, handoff-lab, since the sidecar stopped
  # linking the lab; an older commit has it in handoff.
  local lab=
  [ -d "$src/cmd/handoff-lab" ] && lab=./cmd/handoff-lab
  (cd "$src" && go build -o "$work/$2/" ./cmd/handoff $lab ./examples/counter github.com/nats-io/nats-server/v2)
  if [ -z "$lab" ]; then ln -s handoff "$work/$2/handoff-lab"; fi
}
echo "bench-ab: building A = $a and B = $b" >&2
build "$a" A
build "$b" B

summary() { # summary RESULTS.JSON
  jq -r '.runs[] | select(.available) |
    "\(.mode): pause p50 \(.pauses.plannedStateful.p50Ms | .*10|round/10) p99 \(.pauses.plannedStateful.p99Ms | .*10|round/10) ms (\(.pauses.plannedStateful.count) moves)" +
    (if .breakdown then " | " + ([.breakdown.steps[] | select(.sinceRelease.count > 0) |
      "\(.step) \(.sinceRelease.p50Ms | .*10|round/10)/\(.sinceRelease.p99Ms | .*10|round/10)"] | join(", ")) else "" end) +
    " | load \(.loadAverage[0])"' "$1"
}

{
  echo "A: $a ($(git rev-parse --short "$a"))"
  echo "B: $b ($(git rev-parse --short "$b"))"
  echo "arguments: ${args[*]}"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
} | tee "$out/ab.txt"
for round in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    dir="$out/$round-$side"
    if "$work/$side/handoff-lab" bench --processes --bin "$work/$side" --out "$dir" "${args[@]}" >/dev/null 2>"$dir.log"; then
      summary "$dir/results.json" | sed "s/^/round $round $side: /" | tee -a "$out/ab.txt"
    else
      echo "round $round $side: failed (see $dir.log)" | tee -a "$out/ab.txt"
    fi
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)" | tee -a "$out/ab.txt"
echo "bench-ab: results in $out" >&2
