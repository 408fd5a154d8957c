"""The local engine: one pass on this machine, in the runner's own process (``inprocess`` isolation) or in a worker
process of its own (``process``), forked from a worker template (:mod:`iteralab.campaign.engines.prefork`) where
there is one, else a new interpreter (``python -m iteralab.campaign.engines.passes SPEC RESULT``).

Reads the pass spec; the worker writes the pass's prediction file. Returns the pass's result record.
:func:`local_engine` is the local engine of one run, by its isolation.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from iteralab.campaign.engines.passes import ended_without_result, execute_pass
from iteralab.campaign.engines.prefork import TemplateGone
from iteralab.campaign.manifest import environment_manifest, owns_device
from iteralab.campaign.records import PassResult, PassSpec, Startup, failure


def run_in_process(spec: PassSpec) -> dict[str, Any]:
    """One pass in the runner's own process, its environment recorded as the pass saw it. A pass that left its
    device unusable (``device_error``: a sticky CUDA error) has no environment read: every device call of this
    process would raise; the runner gives the next passes fresh processes (:class:`InProcessEngine`)."""

    result = execute_pass(spec)
    if spec.check_only:  # the runner's first-batch check records no environment
        return result
    if result.get("device_error"):
        result["environment"] = None
        result["notes"].append("environment: not read, the device is unusable in this process after the error")
        return result
    result["environment"] = environment_manifest(runtime=not owns_device(spec.model["kind"]), git=spec.record_git)
    return result


class InProcessEngine:
    """The local engine of in-process isolation, which survives a broken device: passes run in the runner's process
    until one leaves its device unusable (a sticky CUDA error poisons the whole process), then each later pass runs
    in a fresh interpreter (never forked from this process, whose CUDA state is broken), and says so. A device that stays
    broken then fails those passes as rows, one by one; the campaign goes on."""

    def __init__(self) -> None:
        self.broken_by: str | None = None

    def __call__(self, spec: PassSpec) -> PassResult:
        if self.broken_by is None:
            result = PassResult.from_json(run_in_process(spec))
            if result.extra.get("device_error"):
                self.broken_by = spec.pass_id
            return result
        result = PassResult.from_json(run_in_worker(spec, None))
        return result.with_changes(notes=(*result.notes, f"isolation: a fresh process, not the runner's: the device "
                                                         f"became unusable in the runner's process in {self.broken_by}"))


def local_engine(isolation: str, templates: Any = None) -> Callable[[PassSpec], PassResult]:
    """The local engine of a run: each pass in a worker process of its own (``process``: forked from ``templates``
    where there are some), or in the runner's own process (``inprocess``) until a pass breaks the device; the
    pass's result read from the record its worker wrote."""
    if isolation != "process":
        return InProcessEngine()
    return lambda spec: PassResult.from_json(run_in_worker(spec, templates))


def run_in_worker(spec: PassSpec, templates: Any = None) -> dict[str, Any]:
    """One pass in a fresh process: forked from a worker template (``templates``, :mod:`campaign.engines.prefork`)
    where there is one, else a new interpreter."""
    # The worker's spec and result live in the campaign's own scratch folder, never in the system temp
    # folder: a killed run leaves nothing outside the campaign, and the next run clears it.
    scratch = Path(spec.scratch_dir) if spec.scratch_dir else None
    if scratch is not None:
        scratch.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pass-", dir=scratch) as tmp:
        spec_path = Path(tmp) / "spec.json"
        result_path = Path(tmp) / "result.json"
        spawned_at = time.time()
        spec_path.write_text(json.dumps(spec.with_changes(spawned_at=spawned_at).to_json()), encoding="utf-8")
        t0 = time.perf_counter()
        extra: Startup = {}
        forked = templates is not None and templates.refused is None
        if forked:
            stderr_path = Path(tmp) / "stderr.txt"
            template = templates.for_kind(spec.model.get("kind"))
            try:
                returncode, extra = template.run(spec_path, result_path, stderr_path, spawned_at)
                stderr = stderr_path.read_text(encoding="utf-8", errors="replace") if stderr_path.exists() else ""
            except TemplateGone as gone:
                templates.forget()
                returncode, stderr = gone.outcome
                if not gone.started:  # it never forked: this pass and the later ones start fresh interpreters
                    templates.refused = f"exit {gone.outcome[0]}: {gone.outcome[1][:300]}"
                    forked = False
        if templates is not None and templates.refused is not None:
            extra = {"template_refused": templates.refused}
        if not forked:
            proc = subprocess.run([sys.executable, "-m", "iteralab.campaign.engines.passes", str(spec_path),
                                   str(result_path)], capture_output=True, text=True)
            returncode, stderr = proc.returncode, proc.stderr or ""
        worker_s = time.perf_counter() - t0
        if result_path.exists():
            result = json.loads(result_path.read_text(encoding="utf-8"))
            startup = result.get("startup")
            if isinstance(startup, dict):
                startup.update(extra)
                startup["worker_wall_s"] = worker_s
            return result

        return failure(spec.pass_id, ended_without_result(returncode, stderr), "crash", completed=None, retries=None,
                       notes=["completed: unknown, the worker died before reporting (e.g. killed by the kernel's "
                              "out-of-memory killer)"])
