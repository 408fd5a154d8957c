#!/usr/bin/env bash
# Sets up ./.venv (scripts/setup.sh) and runs the whole test suite, end-to-end demo test included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
