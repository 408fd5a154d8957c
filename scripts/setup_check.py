"""Whether the environment running this script already holds what scripts/setup.sh installs; exit 0 if so, 1 if not.

scripts/setup.sh asks this before its `pip install` lines, which take about 12 s even when nothing changes (pip
resolves and builds the editable wheel every time). What is checked is what is installed, not a stamp of an earlier
run: every requirement of pyproject.toml's dependencies and of the extras named on the command line, followed
through the installed distributions' own requirements (markers and extras evaluated as pip does), at a version each
specifier accepts; this checkout installed editable under the version and console scripts pyproject.toml declares;
and the pinned extra packages given after `--pinned` (name==version). Anything missing, stale or unreadable answers 1,
so the caller runs pip. Standard library and `packaging` only (pip's vendored copy when packaging is not installed).

Usage: python scripts/setup_check.py EXTRA[,EXTRA...] [--pinned NAME==VERSION ...]
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _packaging():
    try:
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
    except ImportError:
        from pip._vendor.packaging.requirements import Requirement
        from pip._vendor.packaging.utils import canonicalize_name
    return Requirement, canonicalize_name


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10: tomli, when the environment has it
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _installed(canonicalize_name) -> dict:
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), dist)  # the first on sys.path wins, as for an import
    return found


def _this_checkout(dist, project: dict) -> str | None:
    """Why the installed iteralab is not this checkout's editable install of pyproject.toml, or None."""
    if dist is None:
        return "iteralab is not installed"
    if dist.version != project["version"]:
        return f"iteralab {dist.version} is installed, pyproject.toml says {project['version']}"
    direct = dist.read_text("direct_url.json")
    info = json.loads(direct) if direct else {}
    url = info.get("url", "")
    if not info.get("dir_info", {}).get("editable") or Path(url.removeprefix("file://")).resolve() != ROOT:
        return f"iteralab is not installed editable from {ROOT}"
    scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    if scripts != project.get("scripts", {}):
        return "iteralab's console scripts differ from pyproject.toml's"
    return None


def missing(extras: list[str], pinned: list[str]) -> list[str]:
    """What setup.sh's pip lines would change here (empty: nothing)."""
    Requirement, canonicalize_name = _packaging()
    project = _pyproject()["project"]
    installed = _installed(canonicalize_name)
    problems = []
    problem = _this_checkout(installed.get("iteralab"), project)
    if problem:
        problems.append(problem)
    wanted = [(text, "") for text in project.get("dependencies", [])]
    for extra in extras:
        if extra not in project.get("optional-dependencies", {}):
            return [f"pyproject.toml declares no extra {extra!r}"]
        wanted += [(text, extra) for text in project["optional-dependencies"][extra]]
    seen = set()
    while wanted:
        text, extra = wanted.pop()
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        key = (name, str(req.specifier), tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        dist = installed.get(name)
        if dist is None:
            problems.append(f"{req.name} is not installed ({text})")
            continue
        if not req.specifier.contains(dist.version, prereleases=True):
            problems.append(f"{req.name} {dist.version} does not satisfy {text}")
            continue
        for sub in dist.requires or []:
            for sub_extra in sorted(req.extras) or [""]:
                wanted.append((sub, sub_extra))
    for pin in pinned:
        req = Requirement(pin)
        dist = installed.get(canonicalize_name(req.name))
        if dist is None or not req.specifier.contains(dist.version, prereleases=True):
            problems.append(f"{pin} is not installed")
    return problems


def main(argv: list[str]) -> int:
    extras = argv[0].split(",") if argv and argv[0] != "--pinned" else []
    pinned = argv[argv.index("--pinned") + 1:] if "--pinned" in argv else []
    try:
        problems = missing(extras, pinned)
    except Exception as error:  # an unreadable environment is one to install into, never one to trust
        problems = [f"cannot check the environment: {type(error).__name__}: {error}"]
    for problem in problems:
        print(f"setup: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
