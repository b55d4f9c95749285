#!/usr/bin/env bash
# Runs the Python client's end-to-end tests against a real keycap stack.
# Sets up clients/python/.venv from requirements.txt (pinned) on first use, runs
# mypy --strict over the hand-written code and the tests (pyproject.toml [tool.mypy]),
# then pytest; its exit code is this script's (5, "no tests collected", fails too).
# Needs the compiled repo (`make build`: dist/test/support/e2e-stack.js and
# dist/clients/ts) and node on PATH. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/clients/python/venv.sh"
cd "$ROOT/clients/python"
"$PY" -m mypy
exec "$PY" -m pytest "$@"
