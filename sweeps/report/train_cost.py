"""The report's training-cost sections: what a training step of each model costs and
how much memory it and decoding take, from the timing stage (:mod:`sweeps.timing.train`,
:mod:`sweeps.timing.memory`), by the summary rule of every other table (:func:`cell_summary`:
the best trial per cell and seed, the mean ± std over seeds); and the Pareto front of quality
against the training step's seconds. Empty when the timing stage measured no training cost.
"""

from __future__ import annotations

import pandas as pd

from lightning_modules.metric_names import VAL_BLEU
from sweeps.report.results import natural_order
from sweeps.report.summary import (
    DAGGER,
    axis_of,
    contended_mask,
    contended_notes,
    front_groups,
    over_fewer_seeds,
    pareto_front,
    timed_split,
)
from sweeps.report.table_text import mean_std, to_markdown

STEP = "train_step_seconds"
COLUMNS = (  # (heading, summary column, digits)
    ("train step s", STEP, 4),
    ("train tokens/s", "train_tokens_per_second", 0),
    ("train peak MiB", "train_peak_mb", 1),
    ("decode peak MiB", "decode_peak_mb", 1),
)
TRAIN_TIME_NOTE = (
    "train_time_s in results.csv is each trial's wall time in the Tune run, shared with the trials "
    "beside it (two trials on two cores in the cpu profiles, fractional GPUs on a cluster): it says "
    "as much about the neighbours as about the model; the figures above are each model's alone."
)


def copied_to_seeds(df: pd.DataFrame) -> bool:
    """Whether results.csv's training steps (and peaks) are copies: every timed trial trained
    fused and each cell's seeds hold one figure, which the timing stage measured on one member
    of the cell's group and copied to the others (:mod:`sweeps.timing.fused`). False where a
    cell's seeds were timed apart (one seed a cell: each cell of a group its own measurement;
    a cell's seeds in different groups, or of different shapes), or no cell has two seeds."""
    if "train_step_seconds" not in df or "fused_with" not in df:
        return False
    timed = df.dropna(subset=["train_step_seconds"])
    if timed.empty or timed["fused_with"].isna().any():
        return False
    seeds = timed.groupby("cell", dropna=False)["seed"].nunique()
    several = set(seeds[seeds > 1].index)
    return bool(several) and several <= copied_cells(df)


def copied_cells(df: pd.DataFrame) -> set[str]:
    """The cells whose training steps (and peaks) are one measurement copied to their seeds: every
    timed seed trained fused, at least two of them, all holding one figure (a sweep with some
    cells fused and others not has such cells beside measured ones)."""
    if "train_step_seconds" not in df or "fused_with" not in df:
        return set()
    timed = df.dropna(subset=["train_step_seconds"])
    cells = timed.groupby("cell", dropna=False)
    copied = (
        (cells["fused_with"].count() == cells.size())
        & (cells["seed"].nunique() > 1)
        & (cells["train_step_seconds"].nunique() == 1)
    )
    return set(copied[copied].index)


def measured(summary: pd.DataFrame) -> bool:
    return any(c in summary and summary[c].notna().any() for _, c, _ in COLUMNS)


def cost_table(summary: pd.DataFrame, copied: set[str] | None = None) -> pd.DataFrame:
    """Rows (length, model), columns the training step's seconds and tokens/s and the two peaks;
    a contended training step marked †. ``copied``: the cells whose figures are one measurement
    copied to their seeds (:func:`copied_cells`): shown without a spread."""
    keys = [k for k in (axis_of(summary), "model") if k in summary and summary[k].notna().any()]
    if not keys or summary[keys].duplicated().any():
        keys = ["cell"]
    rows = summary.sort_values(keys, kind="stable", key=natural_order)
    table = rows[keys].copy()
    marked = contended_mask(rows, STEP)
    for name, column, digits in COLUMNS:
        if column not in rows:
            continue
        std = rows.get(f"{column}_std", pd.Series(float("nan"), index=rows.index))
        # one measurement a cell: a spread of 0 over its seeds would be no figure
        std = std.where(~rows["cell"].isin(copied or set()))
        # a contended training step marked; a mean over fewer seeds than the cell's says so, as
        # a decode time's does
        flags = marked if column == STEP else pd.Series(False, index=rows.index)
        counts = rows.get(f"{column}_seeds", rows["seeds"])
        table[name] = [
            mean_std(m, sd, digits)
            + (f" {DAGGER}" if flag and pd.notna(m) else "")
            + (over_fewer_seeds(n, seeds) if pd.notna(m) else "")
            for m, sd, flag, n, seeds in zip(rows[column], std, flags, counts, rows["seeds"])
        ]
    table["seeds"] = rows["seeds"]
    return table


def cost_points(summary: pd.DataFrame) -> pd.DataFrame:
    """The cells the training-cost front is chosen from: those with both BLEU and a training step."""
    if VAL_BLEU not in summary or STEP not in summary:
        return summary.iloc[0:0]
    return summary.dropna(subset=[VAL_BLEU, STEP])


def cost_front(summary: pd.DataFrame) -> str:
    """Per length (and context: :func:`~sweeps.report.summary.front_groups`), the models no other
    beats on both BLEU and training-step seconds (a contended
    training step marked †, as the decode front marks a contended decode time)."""
    points = cost_points(summary)
    if points.empty:
        return ""
    contended = contended_mask(points, STEP)
    axis = axis_of(points)
    lines = [
        f"| {axis} | model | BLEU | train step s | train peak MiB |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for _, g in front_groups(points):
        front = g[pareto_front(g, VAL_BLEU, STEP)].sort_values(STEP)
        for idx, r in front.iterrows():
            length = r.get(axis)
            peak = r.get("train_peak_mb")
            mark = (f" {DAGGER}" if contended[idx] else "") + over_fewer_seeds(
                r.get(f"{STEP}_seeds"), r.get("seeds")
            )
            peak_text = (
                ""
                if pd.isna(peak)
                else f"{peak:.1f}" + over_fewer_seeds(r.get("train_peak_mb_seeds"), r.get("seeds"))
            )
            lines.append(
                f"| {'' if length is None or pd.isna(length) else length} | {r['model']} | {r[VAL_BLEU]:.2f} | "
                f"{r[STEP]:.4f}{mark} | {peak_text} |"
            )
    return "\n".join(lines)


def how_text(df: pd.DataFrame) -> str:
    """What the training-cost table's figures are and how the timing stage measured them."""
    steps = df.get("train_step_repeats")
    repeats = "" if steps is None or steps.dropna().empty else f" over {int(steps.min())}+ repeats"
    return (
        "train step s: seconds per training step (forward, loss, backward, the optimiser's step) at the "
        "study's batch size on the first batches of its training data, the timing stage's median"
        f"{repeats}, each model alone as for decode time (a copy of the model: the checkpoint is "
        "untouched); tokens/s: target tokens per second. Peaks: the memory a pass of training "
        f"steps (activations, gradients, the optimiser's state) and decoding {timed_split(df)} add "
        "above what the process held before (CPU: resident set, in a fresh process per model; GPU: "
        "the allocator's peak). " + TRAIN_TIME_NOTE
    )


def train_cost_sections(df: pd.DataFrame, summary: pd.DataFrame) -> list[tuple[str, str]]:
    """(heading, Markdown) sections for results.md and the W&B Report ([] when not measured)."""
    if summary.empty or not measured(summary):
        return []
    copied = copied_cells(df)
    once = (
        "Each fused group's training step and peaks were measured once, on one member, and copied "
        "to its members (results.csv's fused_with): "
        + (
            "one measurement per cell, so no spread."
            if copied >= set(summary["cell"])
            else "such a cell's figures, shown without a spread, are one measurement."
        )
        if copied
        else ""
    )
    marked = int((summary.get("train_contended", pd.Series(dtype=int)).fillna(0) > 0).sum())
    shown = int(summary[STEP].notna().sum()) if STEP in summary else 0
    several = bool((summary["seeds"] > 1).any())
    contended = (
        f"{marked} of {shown} training step times {'is' if marked == 1 else 'are'} contended "
        f"({DAGGER}): measured while the machine was busy"
        + ("; a mean over seeds is marked when any seed's time is" if several else "")
        + "."
        if marked
        else ""
    )
    fewer = any(
        (summary[f"{c}_seeds"] < summary["seeds"]).any()
        for _, c, _ in COLUMNS
        if f"{c}_seeds" in summary
    )
    if fewer:
        contended += (" " if contended else "") + (
            "(n of N seeds) beside a figure: its mean and spread are over the n seeds whose "
            "training cost was measured."
        )
    out = [
        (
            f"Training cost by {axis_of(summary)} and model",
            "\n\n".join(
                p
                for p in (to_markdown(cost_table(summary, copied)), once, contended, how_text(df))
                if p
            ),
        )
    ]
    front = cost_front(summary)
    if front:
        what = (
            f"Per {'language pair' if axis_of(summary) == 'pair' else 'length'}, the models no "
            "other beats on both BLEU and the seconds of a training step; each with its training "
            "step's peak memory."
        )
        notes = contended_notes(cost_points(summary), STEP)  # as the decode front's
        out.append(
            ("Quality vs training cost: the Pareto front", "\n\n".join([front, what, *notes]))
        )
    return out
