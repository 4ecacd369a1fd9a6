#!/usr/bin/env python3
"""`memfine plot DIR... [--out FOLDER]`: figures of any results folder (scripts/plots/generic.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plots import generic  # noqa: E402

if __name__ == "__main__":
    sys.exit(generic.main())
