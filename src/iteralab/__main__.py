"""``python -m iteralab``: the same command line as ``iteralab`` (for a Python whose scripts folder is not on PATH)."""

import sys

from iteralab.cli import main

if __name__ == "__main__":
    sys.exit(main())
