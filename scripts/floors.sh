#!/usr/bin/env bash
# The declared floors, tested: a second environment holding the minimum that pyproject.toml declares for every
# direct dependency except torch, resolved by uv (`uv pip install --upgrade --resolution lowest-direct`: --upgrade, so
# that a package torch brought in is taken down to the floor too), then a smoke subset
# of the tests run there. Transitive dependencies resolve to what those floors accept (newest), as a user gets them.
#
# torch is installed as scripts/setup.sh does (never a floor: its other wheels are CUDA builds): a torch importable by
# the base Python is reused, else ITERALAB_TORCH (default "torch==2.13.0"; point it at a CPU wheel on a CPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${ITERALAB_FLOOR_VENV:-.venv-floor}"
SMOKE=(tests/models/test_workloads.py tests/campaign/engines/test_gpu_pass.py
       tests/campaign/engines/test_broken_device.py tests/plan/test_protocol.py tests/cli/test_cli_help.py
       tests/economics/test_window.py tests/house/test_device_check.py
       tests/campaign/test_runner.py::test_tiny_hf_model_campaign
       tests/campaign/test_runner.py::test_campaign_rows_verdicts_and_files)

rm -rf "$VENV"
if "$PY" -c "import torch" >/dev/null 2>&1; then
    "$PY" -m venv --system-site-packages "$VENV"
else
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q "${ITERALAB_TORCH:-torch==2.13.0}"
fi
"$VENV/bin/python" -m pip install -q uv
"$VENV/bin/uv" pip install --python "$VENV/bin/python" -q --upgrade --resolution lowest-direct -e . "pytest>=8" "hypothesis>=6"
echo "floors: $("$VENV/bin/python" -c 'import importlib.metadata as m; print(" ".join(f"{n}=={m.version(n)}" for n in (
    "typer", "rich", "pydantic", "tzdata", "numpy", "scikit-learn", "scipy", "matplotlib", "jinja2", "psutil", "safetensors",
    "transformers", "tokenizers", "pyarrow", "torch")))')"
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "${SMOKE[@]}"
