"""A sealed campaign folder exported to an MLflow tracking store (``iteralab export mlflow``): one parent run for the
campaign, one child run per variant.

Every figure is read from the sealed folder's files (raw_table.csv through the statistics, decision.json), never
from a run in memory, and only after the folder matches its seal (``SHA256SUMS``): an unsealed or tampered folder
is refused. The parent run carries the protocol's name, version and sha256, the decision and its two halves as tags,
and decision.md, report.html, raw_table.csv and manifest.json as artifacts; each child run its variant's factors as
params and its figures as metrics, every counted pass a step of ``pass_s``. Runs are found again by the seal's
digest (tag ``iteralab.campaign_digest``): exporting the same sealed folder twice adds nothing.

The default store is MLflow's own SQLite store beside the campaign (``<folder>.mlflow/mlflow.db``, artifacts in
``<folder>.mlflow/artifacts``): no server. ``mlflow`` is an optional extra, imported here only.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iteralab.api.campaign import Campaign, open_campaign
from iteralab.api.stored import StoredDecision
from iteralab.campaign.folder import MANIFEST, TABLE, RawRow
from iteralab.errors import IteraError, VerificationError

__all__ = ["ARTIFACTS", "FACTORS", "MlflowExport", "MlflowMissing", "TrackingStoreError", "default_tracking_uri",
           "export_mlflow", "variant_figures"]

INSTALL_LINE = "the MLflow export needs the mlflow package: pip install 'iteralab[mlflow]'"
#: The files of the folder logged as the parent run's artifacts.
ARTIFACTS = ("decision.md", "report.html", TABLE, MANIFEST)
#: The raw table's columns that set a variant apart, logged as its child run's params (an empty cell is left out).
FACTORS = ("batch_size", "precision", "quantization", "bucketing", "padding", "resume", "compile", "device",
           "data_parallel", "engine")
DIGEST_TAG = "iteralab.campaign_digest"
ROLE_TAG = "iteralab.role"
DONE_TAG = "iteralab.export_complete"
PARENT_TAG = "mlflow.parentRunId"


class MlflowMissing(IteraError):
    """The ``mlflow`` package (the ``iteralab[mlflow]`` extra) is not installed."""


@dataclass(frozen=True)
class MlflowExport:
    """Where a campaign went: the store, the experiment, the parent run and each variant's child run."""

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    #: variant name → its child run's id
    child_run_ids: dict[str, str]
    #: False when the same sealed folder had been exported before (nothing was added)
    created: bool


@dataclass(frozen=True)
class VariantFigures:
    """One variant's figures as the export logs them, read from the sealed folder."""

    variant: str
    params: dict[str, str]
    metrics: dict[str, float]
    #: the counted passes' times, seconds, in the order they ran (the steps of ``pass_s``)
    pass_times: tuple[float, ...]


def default_tracking_uri(folder: str | Path) -> str:
    """MLflow's local SQLite store beside the campaign folder: ``sqlite:///<folder>.mlflow/mlflow.db``."""
    return f"sqlite:///{_store_dir(folder) / 'mlflow.db'}"


def _store_dir(folder: str | Path) -> Path:
    path = Path(folder).resolve()
    return path.with_name(path.name + ".mlflow")


def sealed_campaign(folder: str | Path) -> Campaign:
    """The campaign, once its files match its seal; an unsealed or tampered folder refused in one line."""
    camp = open_campaign(folder)
    check = camp.seal()
    if check.digest is None:
        raise VerificationError(f"{camp.path}: not exported: the folder is not sealed (no SHA256SUMS); seal it "
                                f"first: iteralab bundle seal {camp.path}")
    if not check.ok:
        more = f" (and {len(check.problems) - 1} more)" if len(check.problems) > 1 else ""
        raise VerificationError(f"{camp.path}: not exported: it differs from its seal: {check.problems[0]}{more}; "
                                f"iteralab verify {camp.path} names every difference")
    missing = [name for name in ARTIFACTS if not (camp.path / name).is_file()]
    if missing:
        raise IteraError(f"{camp.path}: not exported: no {', '.join(missing)}; write the report in a copy of the "
                         f"folder (iteralab report), seal it, and export that")
    return camp


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def variant_figures(camp: Campaign, decision: StoredDecision) -> list[VariantFigures]:
    """Each variant's params and metrics, from the raw table (through the statistics' counted passes) and the
    stored decision: ``median_pass_s``, ``docs_per_s`` (the corpus over the median pass), the quality metric and
    its difference to the reference (medians over the counted passes), the peak memory (largest over them) and
    ``cost_per_verified_corpus``."""
    rows = camp.raw_rows()
    metric_name = next((r.metric_name for r in rows if r.metric_name), "metric")
    out = []
    for times in camp.stats().variants:
        counted = {p.pass_id for p in times.passes if p.counted}
        own = [r for r in rows if r.variant == times.variant]
        used = [r for r in own if r.pass_id in counted]
        metrics: dict[str, float | None] = {"median_pass_s": times.median}
        try:
            figures = decision.figures(times.variant)
        except KeyError:
            figures = None
        if figures is not None and figures.median_pass_s is not None:
            metrics["median_pass_s"] = figures.median_pass_s
        median = metrics["median_pass_s"]
        metrics["docs_per_s"] = decision.corpus_size / median if median else None
        metrics[metric_name] = _median([r.metric for r in used if r.metric is not None])
        metrics[f"{metric_name}_vs_reference"] = _median([r.metric_delta for r in used if r.metric_delta is not None])
        metrics.update(_memory(used))
        cost = figures.cost_per_verified_corpus if figures is not None else None
        metrics["cost_per_verified_corpus"] = None if cost is None else float(cost)
        out.append(VariantFigures(times.variant, _params(own[0]) if own else {},
                                  {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(v)},
                                  tuple(p.pass_s for p in times.passes if p.counted)))  # type: ignore[misc]
    return out


def _memory(rows: list[RawRow]) -> dict[str, float | None]:
    peaks = {"peak_cpu_rss_bytes": [r.cpu_peak_rss_bytes for r in rows],
             "peak_cuda_allocated_bytes": [r.cuda_max_allocated_bytes for r in rows],
             "peak_cuda_reserved_bytes": [r.cuda_max_reserved_bytes for r in rows]}
    return {k: float(max(v for v in values if v is not None)) for k, values in peaks.items()
            if any(v is not None for v in values)}


def _params(row: RawRow) -> dict[str, str]:
    return {name: row.cell(name) for name in FACTORS if row.cell(name) != ""}


class TrackingStoreError(IteraError):
    """The MLflow tracking store refused the export (an unusable URI, a store MLflow will not open)."""


def _mlflow_error() -> type[Exception]:
    try:
        from mlflow.exceptions import MlflowException
    except ImportError:
        raise MlflowMissing(INSTALL_LINE) from None
    return MlflowException


def _client(tracking_uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def _experiment(client: Any, name: str, artifacts: Path | None) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    return client.create_experiment(name, artifact_location=None if artifacts is None else artifacts.as_uri())


def _earlier(client: Any, experiment_id: str, digest: str) -> Any | None:
    """The complete parent run of an earlier export of this sealed folder; incomplete ones (an export that was
    stopped) are deleted with their children, so that they are made again whole."""
    parents = client.search_runs([experiment_id], filter_string=f"tags.`{DIGEST_TAG}` = '{digest}' and "
                                                                f"tags.`{ROLE_TAG}` = 'campaign'")
    done = next((r for r in parents if r.data.tags.get(DONE_TAG) == "true"), None)
    for run in parents:
        if run is not done:
            for child in client.search_runs([experiment_id], filter_string=f"tags.`{PARENT_TAG}` = "
                                                                           f"'{run.info.run_id}'"):
                client.delete_run(child.info.run_id)
            client.delete_run(run.info.run_id)
    return done


def _children(client: Any, experiment_id: str, parent_id: str) -> dict[str, str]:
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}'")
    return {r.data.tags.get("iteralab.variant", r.info.run_name): r.info.run_id for r in runs}


def export_mlflow(folder: str | Path, *, tracking_uri: str | None = None,
                  experiment: str | None = None) -> MlflowExport:
    """Export a sealed campaign folder to MLflow (see the module's text). ``tracking_uri``: any MLflow store
    (default :func:`default_tracking_uri`); ``experiment``: its name (default: the protocol's name)."""
    camp = sealed_campaign(folder)
    digest = camp.seal().digest
    decision = camp.decision()
    uri = tracking_uri or default_tracking_uri(camp.path)
    refused = _mlflow_error()
    if tracking_uri is None:
        _store_dir(camp.path).mkdir(exist_ok=True)
    try:
        return _export(camp, decision, digest, uri, experiment, default_store=tracking_uri is None)
    except refused as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TrackingStoreError(f"{uri}: MLflow refused the export: {first}") from None


def _export(camp: Campaign, decision: StoredDecision, digest: str, uri: str, experiment: str | None, *,
            default_store: bool) -> MlflowExport:
    client = _client(uri)
    experiment_id = _experiment(client, experiment or decision.protocol.name,
                                _store_dir(camp.path) / "artifacts" if default_store else None)
    earlier = _earlier(client, experiment_id, digest)
    if earlier is not None:
        return MlflowExport(uri, experiment_id, earlier.info.run_id,
                            _children(client, experiment_id, earlier.info.run_id), created=False)
    parent = _parent_run(client, experiment_id, camp, decision, digest)
    children = {f.variant: _child_run(client, experiment_id, parent, f, digest)
                for f in variant_figures(camp, decision)}
    client.set_tag(parent, DONE_TAG, "true")
    client.set_terminated(parent)
    return MlflowExport(uri, experiment_id, parent, children, created=True)


def _parent_run(client: Any, experiment_id: str, camp: Campaign, decision: StoredDecision, digest: str) -> str:
    protocol = decision.protocol
    tags = {ROLE_TAG: "campaign", DIGEST_TAG: digest, "iteralab.protocol.name": protocol.name,
            "iteralab.protocol.version": str(protocol.version), "iteralab.protocol.sha256": protocol.sha256,
            "iteralab.corpus_fingerprint": decision.corpus_fingerprint,
            "iteralab.decision": decision.line, "iteralab.decision.configuration": decision.configuration_line,
            "iteralab.decision.rental": decision.rental.answer, "iteralab.chosen": decision.chosen or "",
            "iteralab.kind": camp.record.kind}
    run = client.create_run(experiment_id, run_name=camp.path.name, tags=tags)
    for name in ARTIFACTS:
        client.log_artifact(run.info.run_id, os.fspath(camp.path / name))
    return run.info.run_id


def _child_run(client: Any, experiment_id: str, parent: str, figures: VariantFigures, digest: str) -> str:
    from mlflow.entities import Metric, Param

    run = client.create_run(experiment_id, run_name=figures.variant,
                            tags={PARENT_TAG: parent, ROLE_TAG: "variant", DIGEST_TAG: digest,
                                  "iteralab.variant": figures.variant})
    now = int(time.time() * 1000)
    metrics = [Metric(k, v, now, 0) for k, v in figures.metrics.items()]
    metrics += [Metric("pass_s", t, now, step) for step, t in enumerate(figures.pass_times)]
    client.log_batch(run.info.run_id, metrics=metrics,
                     params=[Param(k, v) for k, v in figures.params.items()])
    client.set_terminated(run.info.run_id)
    return run.info.run_id
