"""`python -m agent ...` is the `leasehold` console script."""

from __future__ import annotations

import sys

from agent.cli import main

if __name__ == "__main__":
    sys.exit(main())
