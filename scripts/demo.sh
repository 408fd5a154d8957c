#!/usr/bin/env bash
# Sets up ./.venv (scripts/setup.sh) and runs the demo campaign on this machine (CPU is fine).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/iteralab demo --out "${1:-demo-out}"
