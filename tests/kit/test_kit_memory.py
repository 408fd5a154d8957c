"""The kit's memory script and notebook (M4): environment check first, then estimate vs observation."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2] / "src" / "iteralab" / "kit"
SCRIPT = KIT / "memoire.py"
NOTEBOOK = KIT / "memoire.ipynb"


@pytest.fixture
def kit_copy(tmp_path):
    """The two files alone in a folder, as the kit is handed out (no iteralab next to them)."""
    for item in (SCRIPT, NOTEBOOK):
        shutil.copy(item, tmp_path / item.name)
    return tmp_path


def _run(folder, *args, code=None):
    command = [sys.executable, "-c", code] if code else [sys.executable, str(folder / "memoire.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=folder, timeout=600)


def test_the_kit_does_not_import_iteralab():
    for path in (SCRIPT, NOTEBOOK):
        assert not re.search(r"^\s*(from|import)\s+iteralab", path.read_text(encoding="utf-8"), re.M), path


def test_script_refuses_cuda_without_a_gpu(kit_copy):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal cannot be observed")
    proc = _run(kit_copy, "--tiny", "--device", "cuda")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: cannot run: --device cuda asked, but this torch ")
    assert "sees no GPU" in lines[0] and "hint: " in lines[0]


def test_script_refuses_without_torch(kit_copy):
    code = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = ['memoire.py', '--tiny']; "
            f"runpy.run_path({str(kit_copy / 'memoire.py')!r}, run_name='__main__')")
    proc = _run(kit_copy, code=code)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot run: torch is not importable"), proc.stderr


def test_settings_refused_here_are_one_line_errors():
    from iteralab.kit import memoire

    with pytest.raises(memoire.EnvironmentRefused) as fp16:
        memoire.check_settings("fp16", "cpu", 8, 256)
    assert fp16.value.one_line() == ("--precision fp16 is refused on CPU (half-precision matmul is emulated there); "
                                     "hint: use bf16 or fp32 on CPU")
    with pytest.raises(memoire.EnvironmentRefused, match="int8-dynamic runs on CPU only"):
        memoire.check_settings("int8-dynamic", "cuda:0", 8, 256)
    with pytest.raises(memoire.MemoryKitError, match="--max-length"):
        memoire.check_settings("fp32", "cpu", 8, 1)


def test_script_runs_tiny_on_cpu(capsys):
    # In this process (torch is already imported here); the copied file runs standalone in the tests above and
    # the notebook below imports it from a folder of its own.
    from iteralab.kit import memoire

    assert memoire.main(["--tiny", "--batch-size", "2", "--max-length", "64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    env = data["environment"]
    assert env["device"] == "cpu" and env["python"] and env["torch"] and env["transformers"]
    terms = data["terms"]
    assert terms["total_bytes"] == (terms["weights_bytes"] + terms["activations_bytes"] + terms["margin_bytes"]
                                    + terms["runtime_overhead_bytes"])
    assert terms["runtime_overhead_bytes"] > 0
    assert "before loading any model" in data["estimate"]["runtime_overhead_label"]
    (row,) = data["comparison"]
    assert row["key"] == "cpu_peak_rss_bytes" and row["observed_bytes"] > 0 and "VmHWM" in row["scope"]
    assert row["difference_bytes"] == row["observed_bytes"] - row["estimate_bytes"]
    assert row["estimate_bytes"] == terms["total_bytes"]
    assert data["estimate"]["batch_size"] == 2 and data["estimate"]["seq_len"] == 64

    assert memoire.main(["--tiny", "--batch-size", "2", "--max-length", "64", "--warmup", "0"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("environment: Python ") and "estimate (written before running):" in text
    assert "process peak RSS: observed" in text and "difference (observed - estimated)" in text
    assert "scope: process peak RSS (VmHWM)" in text and "interconnect" in text


def test_notebook_is_committed_without_outputs():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)
    assert "MODEL_PATH = None" in code[0].source and "import memoire" in code[1].source


def _kernel_manager(folder: Path):
    """A kernel spec that starts this interpreter (the venv's python), whatever ``python`` is on PATH."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = folder / "kernels" / "iteralab-kit-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "iteralab kit test", "language": "python"}), encoding="utf-8")
    specs = KernelSpecManager(kernel_dirs=[str(folder / "kernels")])
    return KernelManager(kernel_name="iteralab-kit-test", kernel_spec_manager=specs)


def test_notebook_runs_top_to_bottom_on_cpu(kit_copy, tmp_path_factory, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    home = tmp_path_factory.mktemp("jupyter-home")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(home / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(home / "ipython"))

    nb = nbformat.read(kit_copy / "memoire.ipynb", as_version=4)
    km = _kernel_manager(tmp_path_factory.mktemp("jupyter"))
    client = NotebookClient(nb, km=km, timeout=600, resources={"metadata": {"path": str(kit_copy)}})
    try:
        client.execute()
    finally:  # nbclient shuts down only a kernel it started itself: this one outlived the test run
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    text = "\n".join(out.get("text", "") + json.dumps(out.get("data", {}))
                     for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)
    assert "error" not in {out.get("output_type") for cell in nb.cells if cell.cell_type == "code"
                           for out in cell.outputs}
    assert "process peak RSS: observed" in text and "difference" in text and "VmHWM" in text
    assert "before loading any model" in text
