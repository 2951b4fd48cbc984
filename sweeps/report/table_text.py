"""Table cells and whole tables as report text, for every module that writes a section of
results.md or the W&B Report (:mod:`sweeps.report.markdown`, :mod:`sweeps.report.train_cost`,
:mod:`sweeps.report.heldout`): a mean with its spread over seeds, a table in Markdown."""

from __future__ import annotations

import pandas as pd


def mean_std(mean: float, std: float, digits: int) -> str:
    """``mean ± std`` to ``digits`` places; the mean alone when there is no spread (one seed),
    empty when there is no mean."""
    if pd.isna(mean):
        return ""
    return f"{mean:.{digits}f}" + ("" if pd.isna(std) else f" ± {std:.{digits}f}")


def to_markdown(table: pd.DataFrame) -> str:
    """A table of already formatted cells as Markdown (plain text where tabulate is missing)."""
    try:
        # the cells are already formatted (mean +- std, each metric's digits): no re-parsing
        return table.to_markdown(index=False, disable_numparse=True)
    except ImportError:
        return table.to_string(index=False)
