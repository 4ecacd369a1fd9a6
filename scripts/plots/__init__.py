"""memfine's plotting library: records and how strategies are picked (records), how figures and
tables look (style), figures of any results folder (generic: `memfine plot`), and the paper's
figures and REPORT.md as recipes over the same library (paper, sweeps, field, quality, report,
recipes: `scripts/reproduce`)."""
