"""IteraGPU Lab: the least GPU rental money that buys the same, verified, ML result.

The public Python API (``iteralab.open_campaign``, ``iteralab.run_protocol`` …, listed in ``__all__``) lives in
``iteralab.api`` and is imported on first use, so that ``iteralab --help`` and a pass worker load nothing more
than the version.
"""

import importlib

__version__ = "0.1.0"

#: Each public name and the module of ``iteralab.api`` that defines it.
_API = {
    "open_campaign": "campaign", "Campaign": "campaign", "raw_table_schema": "campaign",
    "OutputFileError": "campaign",
    "StoredDecision": "stored", "MachineAnswer": "stored", "RentalAnswer": "stored",
    "ConfigurationFigures": "stored", "ProtocolIdentity": "stored", "read_decision": "stored",
    "lock_protocol": "actions", "run_protocol": "actions", "decide": "actions", "render_report": "actions",
    "Locked": "actions", "RunSummary": "actions", "ReportFiles": "actions",
    "export_mlflow": "export", "MlflowExport": "export",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> object:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'iteralab' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"iteralab.api.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
