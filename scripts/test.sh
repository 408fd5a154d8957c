#!/usr/bin/env bash
# Sets up ./.venv (scripts/setup.sh) and runs the whole test suite, end-to-end demo test included. The docs extra is
# installed by setup, so the suite also builds the documentation site with warnings as errors (tests/test_docs.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ITERALAB_DOCS_BUILD=required exec .venv/bin/python -m pytest -q "$@"
