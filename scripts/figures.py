#!/usr/bin/env python3
"""Turns memfine results into the paper's tables and figures and REPORT.md (paper_figures/): the
recipes of scripts/plots/recipes.py. Run through scripts/python (an interpreter with matplotlib):

    scripts/python scripts/figures.py --results results/cpu --out paper_figures \\
        --predictions results/model/paper_table4.jsonl

Figures of any results folder of your own: memfine plot DIR (scripts/plot.py).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plots.recipes import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
