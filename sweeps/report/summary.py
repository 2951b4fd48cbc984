"""The summary rule every table, front and plot of a sweep's report uses, and the Pareto front.

From a results.csv's frame (:func:`sweeps.report.results.read_results`): per cell, the best trial by the
study's metric over its Optuna samples for each seed, then the mean ± std over seeds
(:func:`cell_summary`); one point per cell and its Pareto front of BLEU against decode seconds
(:func:`model_points`). A decode time the timing stage flagged as contended (``decode_contended``)
is counted and marked (:data:`DAGGER`), never dropped.
"""

from __future__ import annotations

import pandas as pd

from lightning_modules.metric_names import VAL_BLEU, VAL_DECODE_SECONDS, VAL_LOSS, VAL_SACREBLEU
from sweeps.report.results import (
    DECODE_SECONDS,
    TRAIN_STEP_SECONDS,
    headline_columns,
    natural_order,
)
from sweeps.report.selection import seed_objective
from sweeps.report.stats import CONTEXT, axis_of, best_of_cells, summary_trials

# The timing stage's flag: too few clean passes, so the median includes disturbed ones.
CONTENDED = "decode_contended"
TRAIN_CONTENDED = "train_step_contended"
# the timing stage's training cost, summarised like decode time (mean +- std over seeds)
TRAIN_FIGURES = ("train_step_seconds", "train_tokens_per_second", "train_peak_mb", "decode_peak_mb")
#: the mark beside a contended decode time (or training step), in every table and plot label
DAGGER = "†"
#: the figures the timing stage flags as contended, each with the :func:`cell_summary` column
#: counting its contended trials and what the page calls it
CONTENDED_FIGURES = {
    DECODE_SECONDS: ("contended", "decode time"),
    TRAIN_STEP_SECONDS: ("train_contended", "training step time"),
}

SUMMARY_RULE = (
    "One rule everywhere (table, Pareto front, plots): per cell, the best trial by the sweep's metric "
    "({metric}, {mode}) over its Optuna samples, for each seed; then the mean +- std over seeds."
)
#: the rule when configurations are judged over seeds (results.csv's ``configuration`` column)
CONFIGURATION_RULE = (
    "Configurations judged over seeds: per cell, the configuration (one Optuna sample, trained on every "
    "seed) with the best {aggregate} of the sweep's metric ({metric}, {mode}) over its seeds, among those "
    "whose seeds all ran to the end (one stopped at a rung comes after them); then the mean +- std over "
    "those seeds."
)
#: what a configuration is judged on over its seeds, by results.csv's ``seed_objective``
AGGREGATES = {
    "mean": "mean",
    "lcb": "lower end of its 95% t-interval (seeds.objective: lcb; the upper end for a metric to "
    "minimize)",
}


def summary_rule(df: pd.DataFrame, metric: str, mode: str) -> str:
    """The rule :func:`cell_summary` applied to ``df``, in words."""
    judged = "configuration" in df and df["configuration"].notna().any()
    objective = seed_objective(df)
    aggregate = AGGREGATES.get(objective, objective)
    rule = CONFIGURATION_RULE if judged else SUMMARY_RULE
    return rule.format(metric=metric, mode=mode, aggregate=aggregate)


def cell_summary(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> pd.DataFrame:
    """The summary rule: per (cell, seed) the best finished trial by ``metric`` over its Optuna
    samples; per cell the mean and std over seeds of BLEU, decode seconds and loss.

    Returns one row per cell: ``cell``, ``length``, ``model``, ``attention``, the mechanisms'
    headline options (memory attention's ``K``: :func:`~sweeps.report.results.headline_columns`), the
    means under the metric names (``val/bleu``, ``decode_seconds``, ``val/loss``), ``<name>_std`` (NaN for one
    seed), ``seeds``, ``trials`` (finished trials the best were chosen from) and ``contended``
    (how many of the chosen trials' decode times the timing stage flagged as contended: the
    cell's mean is marked when any is); the training cost (:data:`TRAIN_FIGURES`) likewise when
    the timing stage measured it, ``train_contended`` counting its contended training steps.
    """
    # configurations judged over seeds: each cell's chosen one, all its seeds; the same trials as
    # the seed sections' (sweeps.report.stats.per_seed)
    done = summary_trials(df, metric, mode)
    if done.empty:
        return pd.DataFrame()
    seconds = seconds_column(df)
    best = best_of_cells(done, metric, mode)
    timed = (
        best[DECODE_SECONDS].notna()
        if seconds == DECODE_SECONDS
        else pd.Series(False, index=best.index)
    )
    best = best.assign(
        _contended=contended_flags(best) & timed,
        _train_contended=contended_flags(best, TRAIN_CONTENDED),
    )
    values = [c for c in (VAL_BLEU, VAL_SACREBLEU, seconds, VAL_LOSS, *TRAIN_FIGURES) if c in best]
    groups = best.groupby("cell", dropna=False, sort=False)
    summary = groups[values].mean()
    for c in values:
        summary[f"{c}_std"] = groups[c].std()
    summary["seeds"] = groups["seed"].nunique()
    if (
        seconds in best
    ):  # a seed whose timing failed has no decode time: its cell's mean is of fewer
        summary["timed_seeds"] = groups[seconds].count()
    for c in TRAIN_FIGURES:  # likewise a seed whose training cost was not measured
        if c in best:
            summary[f"{c}_seeds"] = groups[c].count()
    summary["trials"] = done.groupby("cell", dropna=False)["seed"].size()
    summary["contended"] = groups["_contended"].sum().astype(int)
    summary["train_contended"] = groups["_train_contended"].sum().astype(int)
    labels = [
        c
        for c in ("length", "pair", CONTEXT, "model", "attention", *headline_columns())
        if c in best
    ]
    summary = (
        best.groupby("cell", dropna=False, sort=False)[labels]
        .first()
        .join(summary)
        .join(chosen_options(done, best))
        .reset_index()
    )
    if seconds != DECODE_SECONDS:
        summary = summary.rename(
            columns={seconds: DECODE_SECONDS, f"{seconds}_std": f"{DECODE_SECONDS}_std"}
        )
    for c in (
        "length",
        *headline_columns(),
    ):  # K=16, not 16.0; a real-valued option (a temperature) stays as it is
        values = summary[c].dropna() if c in summary else None
        if values is not None and not values.empty and (values == values.round()).all():
            summary[c] = summary[c].astype("Int64")
    sort = [c for c in (axis_of(summary), "model") if c in summary]
    return summary.sort_values(
        sort, na_position="first", kind="stable", key=natural_order
    ).reset_index(drop=True)


#: the suffix of :func:`chosen_options`' columns
CHOSEN = "_chosen"


def chosen_options(done: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """Per cell, ``<option>_chosen``: the headline option's value of each seed's chosen trial
    (``"3"``, ``"3/5"`` where the seeds' differ), for the cells whose finished trials took more
    than one value of it (searched, so the model's name does not say it; NaN elsewhere)."""
    out = pd.DataFrame(index=pd.Index(best["cell"].unique(), name="cell"))
    for option in (c for c in headline_columns() if c in done):
        searched = done.groupby("cell", dropna=False)[option].nunique() > 1
        if not searched.any():
            continue
        chosen = best.groupby("cell", dropna=False, sort=False)[option].agg(
            lambda v: "/".join(f"{x:g}" for x in sorted(v.dropna().unique()))
        )
        keep = searched.reindex(chosen.index, fill_value=False) & (chosen != "")
        out[f"{option}{CHOSEN}"] = chosen.where(keep)
    return out


def chosen_columns(frame: pd.DataFrame | pd.Series) -> dict[str, str]:
    """``{"K_chosen": "K"}``: the :func:`chosen_options` columns of a summary (or its row) that
    hold a value, by the option each names."""
    index = frame.index if isinstance(frame, pd.Series) else frame.columns
    held = frame.notna() if isinstance(frame, pd.Series) else frame.notna().any()
    return {c: c.removesuffix(CHOSEN) for c in index if c.endswith(CHOSEN) and held[c]}


def chosen_text(row: pd.Series) -> str:
    """``K=3``: the searched headline options' values the cell's chosen trials have (empty for a
    cell whose model's name says them)."""
    return ", ".join(f"{option}={row[c]}" for c, option in chosen_columns(row).items())


def seconds_column(df: pd.DataFrame) -> str:
    """``decode_seconds`` (the timing stage) when any trial has it, else the training-time signal."""
    return (
        DECODE_SECONDS
        if DECODE_SECONDS in df and df[DECODE_SECONDS].notna().any()
        else VAL_DECODE_SECONDS
    )


def contended_flags(df: pd.DataFrame, column: str = CONTENDED) -> pd.Series:
    """Bool per row: the timing stage flagged its decode time (or ``column``: the training step's,
    ``train_step_contended``) as contended (True as written, or as read back from a CSV: ``True``,
    ``"True"``, 1); False where missing."""
    if column not in df:
        return pd.Series(False, index=df.index)
    return df[column].astype(str).str.strip().str.lower().isin({"true", "1", "1.0", "yes"})


def contended_count(summary: pd.DataFrame) -> tuple[int, int]:
    """(decode times marked contended, decode times shown) over a :func:`cell_summary`'s cells."""
    if summary.empty or DECODE_SECONDS not in summary:
        return 0, 0
    shown = summary[DECODE_SECONDS].notna()
    marked = shown & (summary["contended"] > 0) if "contended" in summary else shown & False
    return int(marked.sum()), int(shown.sum())


def pareto_front(
    df: pd.DataFrame, quality: str = VAL_BLEU, cost: str = DECODE_SECONDS
) -> pd.Series:
    """Bool per row: True where no other row has ``cost`` <= and ``quality`` >= with one strict.

    Rows with a missing quality or cost are never on the front. Ties (equal cost and quality)
    are all on the front. Contended decode times take part like any other (:func:`pareto_rule`).
    """
    on_front = pd.Series(False, index=df.index)
    valid = df[[quality, cost]].dropna()
    q, c = valid[quality].to_numpy(), valid[cost].to_numpy()
    for i, idx in enumerate(valid.index):
        dominated = ((c <= c[i]) & (q >= q[i]) & ((c < c[i]) | (q > q[i]))).any()
        on_front[idx] = not dominated
    return on_front


def model_points(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> pd.DataFrame:
    """One point per cell (:func:`cell_summary`: the summary rule, ``contended`` included), with
    its Pareto front (``pareto``) among the cells of the same length (pair: :func:`axis_of`)."""
    points = front_points(cell_summary(df, metric, mode))
    return (
        points
        if not points.empty
        else pd.DataFrame(columns=["length", "model", VAL_BLEU, DECODE_SECONDS, "pareto"])
    )


def front_points(summary: pd.DataFrame) -> pd.DataFrame:
    """:func:`model_points` from a :func:`cell_summary` already made (empty when no cell has both)."""
    if summary.empty or VAL_BLEU not in summary or DECODE_SECONDS not in summary:
        return pd.DataFrame()
    points = summary.dropna(subset=[VAL_BLEU, DECODE_SECONDS]).reset_index(drop=True)
    if points.empty:
        return points
    fronts = [pareto_front(g) for _, g in front_groups(points)]
    points["pareto"] = pd.concat(fronts).reindex(points.index).fillna(False).astype(bool)
    return points.sort_values(
        front_keys(points) + [DECODE_SECONDS], na_position="first", kind="stable"
    ).reset_index(drop=True)


def front_keys(points: pd.DataFrame) -> list[str]:
    """The columns a Pareto front is drawn within: the length (pair: :func:`axis_of`), and the
    cell's grid values outside the model (:data:`~sweeps.report.stats.CONTEXT`, ``train_size=1000``)
    where cells differ in them: a front compares models under one setting, as the findings do."""
    axis = axis_of(points)
    keys = [axis] if axis in points else []
    if CONTEXT in points and points[CONTEXT].fillna("").astype(str).nunique() > 1:
        keys.append(CONTEXT)
    return keys


def front_groups(points: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(name, rows) per Pareto front of ``points`` (:func:`front_keys`), in the report's order:
    ``L=20``, ``en-de``, ``L=20 train_size=1000``; ``the sweep`` where no row has a length."""
    keys = front_keys(points)
    if not keys:
        return [("the sweep", points)]
    axis = axis_of(points)
    out = []
    for key, rows in points.groupby(keys, dropna=False, sort=False):
        values = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        at = values.get(axis)
        parts = (
            [str(at) if axis == "pair" else f"L={int(at)}"]
            if at is not None and pd.notna(at)
            else []
        )
        context = values.get(CONTEXT)
        if context is not None and pd.notna(context) and str(context):
            parts.append(str(context))
        out.append((" ".join(parts) or "the sweep", rows))
    order = sorted(range(len(out)), key=lambda i: _group_order(out[i][1], keys))
    return [out[i] for i in order]


def _group_order(rows: pd.DataFrame, keys: list[str]) -> tuple:
    """A front group's place: by length (pair), then context, as the tables order them."""
    first = rows.iloc[0]
    return tuple(
        (pd.isna(first[k]), natural_order(pd.Series([str(first[k])])).iloc[0]) for k in keys
    )


def over_fewer_seeds(n: float | None, seeds: float | None) -> str:
    """`` (2 of 3 seeds)``: a :func:`cell_summary` mean over ``n`` of its cell's ``seeds`` seeds
    (``timed_seeds``, ``train_step_seconds_seeds``: the seeds that have the figure); "" where it
    is over all of them, or either count is unknown."""
    if n is None or seeds is None or pd.isna(n) or pd.isna(seeds) or n >= seeds:
        return ""
    return f" ({int(n)} of {int(seeds)} seeds)"


def contended_mask(frame: pd.DataFrame, figure: str = DECODE_SECONDS) -> pd.Series:
    """Bool per row of a :func:`cell_summary` (or its points): any of its decode times (or of the
    ``figure`` of :data:`CONTENDED_FIGURES`: the training step's) is contended; all False for a
    figure the timing stage never flags (a peak of memory)."""
    column = CONTENDED_FIGURES.get(figure, ("",))[0]
    if column not in frame:
        return pd.Series(False, index=frame.index)
    return frame[column].fillna(0).astype(int) > 0


def pareto_rule(figure: str = DECODE_SECONDS) -> str:
    """The rule a Pareto front of quality against ``figure`` follows for contended figures."""
    example = (
        " (on a loaded machine no attention once came out at 0.081 s, slower than memory "
        "attention's 0.045 s)"
        if figure == DECODE_SECONDS
        else ""
    )
    return (
        f"Rule: contended {CONTENDED_FIGURES[figure][1]}s ({DAGGER}) are kept in the front's "
        "computation and marked, not dropped. A front among contended figures is not trustworthy: "
        f"a model timed on a busy machine looks slower than it is and can drop off the front{example}."
    )


def contended_notes(points: pd.DataFrame, figure: str = DECODE_SECONDS) -> list[str]:
    """A Pareto front's caveat for contended figures (``figure``: :data:`CONTENDED_FIGURES`) over
    ``points`` (every cell the front was chosen from): :func:`pareto_rule`, then the lengths (pairs)
    whose front was computed among contended figures."""
    lines = [pareto_rule(figure)]
    contended = contended_mask(points, figure)
    if contended.any():
        shaky = []
        for name, g in front_groups(points):
            k = int(contended[g.index].sum())
            if k:
                shaky.append(f"{name} ({k} of {len(g)} {CONTENDED_FIGURES[figure][1]}s contended)")
        lines.append(
            "Not trustworthy here, fronts among contended figures: " + ", ".join(shaky) + "."
        )
    return lines


#: what the timing stage's split (results.csv's ``timing_split``) decodes, in words
SPLIT_WORDS = {"valid": "the validation set", "test": "the test set"}


def timed_split(df: pd.DataFrame) -> str:
    """The data the timing stage decoded (``the validation set``; rows from before the column
    was written: the stage's default, the validation set), for the page's text and the decode
    figures' axis labels."""
    column = "timing_split"
    splits = (
        sorted(set(df[column].dropna()), key=lambda s: (s != "valid", str(s)))
        if column in df
        else []
    )
    words = [SPLIT_WORDS.get(str(s), f"the {s} split") for s in splits]
    return " or ".join(words) if words else SPLIT_WORDS["valid"]
