"""Walks through the tutorial pages: the shell blocks of a page, the script they make, and the commands the page shows
without running them."""

from __future__ import annotations

import re


NOT_RUN = "# not run by the page's test"


def page_blocks(text: str) -> list[str]:
    """Every ```bash block of the page, in order."""
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def walk_script(text: str) -> tuple[str, int]:
    """The page's runnable blocks as one script (each announced by a marker line), and how many there are."""
    runnable = [b for b in page_blocks(text) if not b.startswith(NOT_RUN)]
    parts = ["set -euo pipefail"]
    for i, block in enumerate(runnable):
        parts += [f"echo '@@block {i}'", block]
    return "\n".join(parts) + "\n", len(runnable)


def have_command(package: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(package)
    except PackageNotFoundError:
        return False
    return True
