#!/usr/bin/env bash
# CI for the Python client (clients/python), called by .ci/run: Python 3.9
# or later with venv and pip (from Debian's packages if the machine has
# none), an offline install of the package into a fresh virtual environment
# (no registry is reached: the package builds with its own in-tree backend),
# its types checked with mypy (Debian's), the package's tests against real
# agents from that install, and the example worker through handoff
# conformance (TCP and a Unix socket).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
pkg=clients/python

python_ok() {
  command -v python3 >/dev/null &&
    python3 -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, 9) else 1)' 2>/dev/null
}
if ! python_ok; then
  echo "python3 3.9 or later with venv is not installed: installing Debian's python3, python3-venv and python3-pip"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq python3 python3-venv python3-pip >/dev/null
fi
if ! python_ok; then
  echo "clients/python needs python3 3.9 or later with venv; this machine has $(python3 --version 2>&1 || echo none)" >&2
  exit 1
fi
echo "$(python3 --version)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "-- pip install ./clients/python into a fresh virtual environment, offline"
# A virtual environment of its own: Debian's Python is externally managed
# (PEP 668), and the install must not depend on anything installed before.
python3 -m venv "$work/venv"
py="$work/venv/bin/python"
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 "$py" -m pip install --quiet --no-index "$root/$pkg"
(
  cd "$work"
  "$py" -c '
import os, handoff_client
from handoff_client import Client, run, Runner, NotOwner, Resume, Unavailable, MEDIA_BINARY
assert MEDIA_BINARY == "application/vnd.handoff.binary", MEDIA_BINARY
here = os.path.dirname(handoff_client.__file__)
assert os.path.exists(os.path.join(here, "py.typed")), "the installed package has no py.typed"
assert "site-packages" in here, "imported from " + here + ", not from the install"
print("the installed package imports:", here)
'
)

echo "-- the package's types: mypy --strict, as Python 3.9 reads them"
if ! command -v mypy >/dev/null; then
  echo "mypy is not installed: installing Debian's mypy"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq mypy >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq mypy >/dev/null; }
fi
(cd "$pkg" && mypy --strict --python-version 3.9 --no-error-summary src/handoff_client build_backend/handoff_build.py)
(cd "$pkg/tests" && MYPYPATH=../src mypy --python-version 3.9 --check-untyped-defs --no-error-summary .)
MYPYPATH="$pkg/src" mypy --python-version 3.9 --check-untyped-defs --no-error-summary examples/python/worker.py
echo "mypy: no issues"

echo "-- the package's tests (unittest) against real agents, on the installed package"
go build -o "$work/bin/handoff" ./cmd/handoff
# Run from the tests' folder, so that the package comes from the install and
# not from the sources.
(cd "$pkg/tests" && HANDOFF_BIN="$work/bin/handoff" "$py" -m unittest discover -s . -t . -v)

echo "-- the example worker passes handoff conformance, over TCP and a Unix socket"
"$work/bin/handoff" conformance --quiet -- "$py" examples/python/worker.py
"$work/bin/handoff" conformance --quiet --unix -- "$py" examples/python/worker.py
