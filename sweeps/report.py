"""The local report of a finished sweep, rebuilt from its results.csv, and optionally a W&B Report.

    python -m sweeps.report sweep-results/k_vs_length                # results.md + PNGs
    python -m sweeps.report sweep-results/k_vs_length --wandb --entity ME --project memory-attention

Local report (in the sweep folder): ``results.md``, led (for a study with a length axis) by the
paper's Table 1 layout (:func:`length_table`: one row per model, per length its BLEU and decode
time), then the long table (:func:`paper_table`: one row per length and model), the Pareto table
of BLEU vs decode time and the plots (:mod:`sweeps.plots`), among them ``pareto.png``: one point
per model (and length), BLEU against decode seconds, the Pareto front (no other point is both
faster and at least as good) drawn and its points labelled, e.g. "memory K=32", so the table
answers "which K buys how much BLEU for how much time".

A decode time the timing stage measured while the machine was busy (``decode_contended`` in
results.csv) is marked with a dagger (†) wherever it is shown, in tables and plots, and the page
says how many there are: it is not a speed figure.

``--wandb`` builds a W&B Report for the sweep's group (``wandb_workspaces.reports.v2``, from the
``wandb-workspaces`` package) with the same tables as Markdown and panels over the group's runs,
and saves it (needs an API key and network).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from lightning_modules.metric_names import VAL_BLEU as BLEU
from lightning_modules.metric_names import VAL_DECODE_SECONDS as TRAINING_SECONDS  # shown only when no timing ran
from lightning_modules.metric_names import VAL_LOSS

from .results import DECODE_SECONDS as SECONDS  # the isolated timing stage's median (sweeps.timing)
from .results import headline_columns, natural_order, read_results

# The timing stage's flag: too few clean passes, so the median includes disturbed ones.
CONTENDED = "decode_contended"
#: the mark beside a contended decode time, in every table and plot label
DAGGER = "†"

SUMMARY_RULE = (
    "One rule everywhere (table, Pareto front, plots): per cell, the best trial by the study's metric "
    "({metric}, {mode}) over its Optuna samples, for each seed; then the mean +- std over seeds."
)
CONTENDED_MEANING = (
    "measured while the machine was busy (the timing stage got too few passes on a quiet core of a machine at "
    "full speed, so the median includes disturbed ones)"
)
RETIME_HINT = "time the checkpoints again on a quiet machine (python -m sweeps.timing CKPT)"
PARETO_RULE = (
    f"Rule: contended decode times ({DAGGER}) are kept in the front's computation and marked, not dropped. "
    "A front among contended figures is not trustworthy: a model timed on a busy machine looks slower than "
    "it is and can drop off the front (on a loaded machine no attention once came out at 0.081 s, slower "
    "than memory attention's 0.045 s)."
)


def cell_summary(df: pd.DataFrame, metric: str = BLEU, mode: str = "max") -> pd.DataFrame:
    """The summary rule: per (cell, seed) the best finished trial by ``metric`` over its Optuna
    samples; per cell the mean and std over seeds of BLEU, decode seconds and loss.

    Returns one row per cell: ``cell``, ``length``, ``model``, ``attention``, the mechanisms'
    headline options (memory attention's ``K``: :func:`~sweeps.results.headline_columns`), the means under
    the metric names (``val/bleu``, ``decode_seconds``, ``val/loss``), ``<name>_std`` (NaN for one
    seed), ``seeds``, ``trials`` (finished trials the best were chosen from) and ``contended``
    (how many of the chosen trials' decode times the timing stage flagged as contended: the
    cell's mean is marked when any is).
    """
    done = df[df["status"].isin(["done", "stopped"])] if "status" in df else df
    if metric in done:
        done = done.dropna(subset=[metric])
    if done.empty:
        return pd.DataFrame()
    seconds = seconds_column(df)
    best = done.sort_values(metric, ascending=mode == "min", kind="stable").groupby(["cell", "seed"], dropna=False).head(1)
    timed = best[SECONDS].notna() if seconds == SECONDS else pd.Series(False, index=best.index)
    best = best.assign(_contended=contended_flags(best) & timed)
    values = [c for c in (BLEU, seconds, VAL_LOSS) if c in best]
    groups = best.groupby("cell", dropna=False, sort=False)
    summary = groups[values].mean()
    for c in values:
        summary[f"{c}_std"] = groups[c].std()
    summary["seeds"] = groups["seed"].nunique()
    summary["trials"] = done.groupby("cell", dropna=False)["seed"].size()
    summary["contended"] = groups["_contended"].sum().astype(int)
    labels = [c for c in ("length", "model", "attention", *headline_columns()) if c in best]
    summary = best.groupby("cell", dropna=False, sort=False)[labels].first().join(summary).reset_index()
    if seconds != SECONDS:
        summary = summary.rename(columns={seconds: SECONDS, f"{seconds}_std": f"{SECONDS}_std"})
    for c in ("length", *headline_columns()):
        if c in summary and summary[c].notna().any():
            summary[c] = summary[c].astype("Int64")
    sort = [c for c in ("length", "model") if c in summary]
    return summary.sort_values(sort, na_position="first", kind="stable", key=natural_order).reset_index(drop=True)


def seconds_column(df: pd.DataFrame) -> str:
    """``decode_seconds`` (the timing stage) when any trial has it, else the training-time signal."""
    return SECONDS if SECONDS in df and df[SECONDS].notna().any() else TRAINING_SECONDS


def contended_flags(df: pd.DataFrame) -> pd.Series:
    """Bool per row: the timing stage flagged its decode time as contended (``decode_contended``
    True as written, or as read back from a CSV: ``True``, ``"True"``, 1); False where missing."""
    if CONTENDED not in df:
        return pd.Series(False, index=df.index)
    return df[CONTENDED].astype(str).str.strip().str.lower().isin({"true", "1", "1.0", "yes"})


def contended_count(summary: pd.DataFrame) -> tuple[int, int]:
    """(decode times marked contended, decode times shown) over a :func:`cell_summary`'s cells."""
    if summary.empty or SECONDS not in summary:
        return 0, 0
    shown = summary[SECONDS].notna()
    marked = shown & (summary["contended"] > 0) if "contended" in summary else shown & False
    return int(marked.sum()), int(shown.sum())


def pareto_front(df: pd.DataFrame, quality: str = BLEU, cost: str = SECONDS) -> pd.Series:
    """Bool per row: True where no other row has ``cost`` <= and ``quality`` >= with one strict.

    Rows with a missing quality or cost are never on the front. Ties (equal cost and quality)
    are all on the front. Contended decode times take part like any other (:data:`PARETO_RULE`).
    """
    on_front = pd.Series(False, index=df.index)
    valid = df[[quality, cost]].dropna()
    q, c = valid[quality].to_numpy(), valid[cost].to_numpy()
    for i, idx in enumerate(valid.index):
        dominated = ((c <= c[i]) & (q >= q[i]) & ((c < c[i]) | (q > q[i]))).any()
        on_front[idx] = not dominated
    return on_front


def model_points(df: pd.DataFrame, metric: str = BLEU, mode: str = "max") -> pd.DataFrame:
    """One point per cell (:func:`cell_summary`: the summary rule, ``contended`` included), with
    its Pareto front (``pareto``) among the cells of the same length."""
    points = _front_points(cell_summary(df, metric, mode))
    return points if not points.empty else pd.DataFrame(columns=["length", "model", BLEU, SECONDS, "pareto"])


def _front_points(summary: pd.DataFrame) -> pd.DataFrame:
    """:func:`model_points` from a :func:`cell_summary` already made (empty when no cell has both)."""
    if summary.empty or BLEU not in summary or SECONDS not in summary:
        return pd.DataFrame()
    points = summary.dropna(subset=[BLEU, SECONDS]).reset_index(drop=True)
    if points.empty:
        return points
    by = ["length"] if "length" in points else []
    fronts = [pareto_front(g) for _, g in points.groupby(by, dropna=False)] if by else [pareto_front(points)]
    points["pareto"] = pd.concat(fronts).reindex(points.index).fillna(False).astype(bool)
    return points.sort_values(by + [SECONDS], na_position="first", kind="stable").reset_index(drop=True)


def pareto_figure(points: pd.DataFrame):
    """BLEU vs decode seconds, one colour per length, front as a step line, front points labelled.

    With several seeds each point carries error bars (std over seeds of decode seconds and BLEU);
    a contended decode time is drawn as an x and its label carries the dagger.
    """
    from .plots import contended_handle, colours, plt, seeds_handle

    fig, ax = plt.subplots(figsize=(6.8, 4.8))
    contended = _contended_mask(points)
    several_seeds = bool("seeds" in points and (points["seeds"] > 1).any())
    groups = points.groupby("length", dropna=False) if "length" in points else [(None, points)]
    for (length, g), colour in zip(groups, colours()):
        marked = contended[g.index]
        label = f"L={int(length)}" if pd.notna(length) else "all"
        ax.scatter(g.loc[~marked, SECONDS], g.loc[~marked, BLEU], s=22, alpha=0.7, color=colour, label=label)
        ax.scatter(g.loc[marked, SECONDS], g.loc[marked, BLEU], s=55, marker="x", color=colour, lw=1.6)
        if several_seeds:
            ax.errorbar(g[SECONDS].astype(float), g[BLEU].astype(float), xerr=_std(g, SECONDS), yerr=_std(g, BLEU),
                        fmt="none", ecolor=colour, elinewidth=0.8, capsize=2, alpha=0.6)
        front = g[g["pareto"]].sort_values(SECONDS)
        ax.step(front[SECONDS], front[BLEU], where="post", color=colour, lw=1.2)
        ax.scatter(front[SECONDS], front[BLEU], s=70, facecolors="none", edgecolors=colour, lw=1.5)
        for idx, row in g.iterrows():
            ax.annotate(
                str(row["model"]) + (f" {DAGGER}" if contended[idx] else ""),
                (row[SECONDS], row[BLEU]),
                fontsize=7 if row["pareto"] else 6,
                alpha=1.0 if row["pareto"] else 0.55,
                xytext=(3, 3),
                textcoords="offset points",
            )
    handles, labels = ax.get_legend_handles_labels()
    for extra, wanted in ((contended_handle("x"), contended.any()), (seeds_handle(), several_seeds)):
        if wanted:
            handles.append(extra)
            labels.append(extra.get_label())
    ax.set_xlabel("decode time over the validation set (s)")
    ax.set_ylabel("BLEU")
    title = "Quality vs speed (circled + line: Pareto front)"
    if len(points) and contended.all():
        title += "\nall decode times contended: not speed figures"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(handles, labels, fontsize=7)
    fig.tight_layout()
    return fig


def _contended_mask(frame: pd.DataFrame) -> pd.Series:
    if "contended" not in frame:
        return pd.Series(False, index=frame.index)
    return frame["contended"].fillna(0).astype(int) > 0


def _std(frame: pd.DataFrame, column: str):
    name = f"{column}_std"
    return frame[name].astype(float).fillna(0.0).to_numpy() if name in frame else None


def pareto_markdown(points: pd.DataFrame) -> str:
    """The front per length as a table: model, BLEU, seconds (contended ones marked †), BLEU
    gained and time paid vs the previous point."""
    lines = ["| length | model | BLEU | decode s | +BLEU | +seconds |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    contended = _contended_mask(points)
    for length, g in points[points["pareto"]].groupby("length", dropna=False):
        previous = None
        for idx, row in g.sort_values(SECONDS).iterrows():
            bleu, seconds = float(row[BLEU]), float(row[SECONDS])
            gain = "" if previous is None else f"{bleu - previous[0]:+.2f}"
            paid = "" if previous is None else f"{seconds - previous[1]:+.4f}"
            mark = f" {DAGGER}" if contended[idx] else ""
            lines.append(f"| {length} | {row['model']} | {bleu:.2f} | {seconds:.4f}{mark} | {gain} | {paid} |")
            previous = (bleu, seconds)
    return "\n".join(lines)


def pareto_notes(points: pd.DataFrame, timed: bool = True) -> list[str]:
    """What the front table means, the rule for contended times (when the timing stage ran) and
    the lengths whose front was computed among contended figures."""
    lines = ["Each step along the front: the BLEU a slower model buys and the seconds it costs."]
    if not timed:
        return lines + ["The front orders training-time decode signals (no timing stage ran): not speed figures."]
    lines.append(PARETO_RULE)
    contended = _contended_mask(points)
    if contended.any():
        shaky = []
        for length, g in points.groupby("length", dropna=False):
            k = int(contended[g.index].sum())
            if k:
                name = f"L={length}" if pd.notna(length) else "the study"
                shaky.append(f"{name} ({k} of {len(g)} decode times contended)")
        lines.append("Not trustworthy here, fronts among contended figures: " + ", ".join(shaky) + ".")
    return lines


def paper_table(df: pd.DataFrame, metric: str = BLEU, mode: str = "max") -> pd.DataFrame:
    """Rows (length, model), columns BLEU / decode seconds / loss / seeds: :func:`cell_summary`,
    with ``mean +- std`` where there are several seeds and a contended decode time marked †."""
    return _long_table(cell_summary(df, metric, mode))


def _long_table(summary: pd.DataFrame) -> pd.DataFrame:
    if summary.empty:
        return pd.DataFrame()
    keys = [k for k in ("length", "model") if k in summary and summary[k].notna().any()]
    if summary[keys].duplicated().any():  # cells differing in more than length and model
        keys = ["cell"]
    table = summary[keys].copy()
    for name, column, digits in (("BLEU", BLEU, 2), ("decode_s", SECONDS, 4), ("loss", VAL_LOSS, 3)):
        if column in summary:
            table[name] = [_mean_std(m, sd, digits) for m, sd in zip(summary[column], summary[f"{column}_std"])]
    if "decode_s" in table:
        table["decode_s"] = _seconds_text(summary)
    table["seeds"] = summary["seeds"]
    return table


def length_table(df: pd.DataFrame, metric: str = BLEU, mode: str = "max") -> pd.DataFrame:
    """The paper's Table 1 layout: one row per model (:func:`natural_order`), per length the
    columns ``L=<n> BLEU`` and ``L=<n> decode s`` (:func:`cell_summary`'s mean ± std over seeds,
    a contended decode time marked †, "–" where the model was not run at that length).

    Empty when the study has no length axis, or its cells differ in more than length and model
    (then the long table, by cell, is the table)."""
    return _length_table(cell_summary(df, metric, mode))


def _length_table(summary: pd.DataFrame) -> pd.DataFrame:
    if summary.empty or "model" not in summary or "length" not in summary or summary["length"].isna().all():
        return pd.DataFrame()
    cells = summary.dropna(subset=["length"])
    if cells[["length", "model"]].duplicated().any():
        return pd.DataFrame()
    with_seconds = SECONDS in cells and cells[SECONDS].notna().any()
    seconds = pd.Series(_seconds_text(cells), index=cells.index) if with_seconds else None
    models = pd.Series(cells["model"].unique()).sort_values(key=natural_order, kind="stable")
    rows = []
    for model in models:
        row: dict[str, str] = {"model": model}
        for length in sorted(cells["length"].unique()):
            match = cells[(cells["model"] == model) & (cells["length"] == length)]
            found = not match.empty
            r = match.iloc[0] if found else None
            row[f"L={length} BLEU"] = _mean_std(r[BLEU], r[f"{BLEU}_std"], 2) if found else "–"
            if with_seconds:
                row[f"L={length} decode s"] = seconds[match.index[0]] if found else "–"
        rows.append(row)
    return pd.DataFrame(rows)


def _seconds_text(summary: pd.DataFrame) -> list[str]:
    marked = _contended_mask(summary)
    return [
        _mean_std(m, sd, 4) + (f" {DAGGER}" if flag and pd.notna(m) else "")
        for m, sd, flag in zip(summary[SECONDS], summary[f"{SECONDS}_std"], marked)
    ]


def _mean_std(mean: float, std: float, digits: int) -> str:
    if pd.isna(mean):
        return ""
    return f"{mean:.{digits}f}" + ("" if pd.isna(std) else f" ± {std:.{digits}f}")


def seeds_line(df: pd.DataFrame, summary: pd.DataFrame) -> str:
    """How many seeds the study has, what a figure is over them, and the cells with fewer."""
    seeds = sorted(pd.unique(df["seed"].dropna())) if "seed" in df else []
    names = ", ".join(str(s) for s in seeds)
    if len(seeds) <= 1:
        return f"Seeds: 1 (seed {names}): each figure is one trial's, no spread." if seeds else "Seeds: none recorded."
    line = f"Seeds: {len(seeds)} ({names}): each figure is the mean ± std over seeds."
    fewer = summary[summary["seeds"] < len(seeds)] if "seeds" in summary else summary.iloc[0:0]
    if not fewer.empty:
        line += " Fewer finished in: " + ", ".join(f"{c} ({s})" for c, s in zip(fewer["cell"], fewer["seeds"])) + "."
    return line


def timing_warning(summary: pd.DataFrame, timed: bool) -> str:
    """The page's opening warning when none of its decode times is a speed figure ("" otherwise)."""
    if summary.empty or SECONDS not in summary or not summary[SECONDS].notna().any():
        return ""
    if not timed:
        return ("**The decode times here are not speed figures:** the timing stage did not run, so they are "
                "val/decode_seconds, measured during training beside other trials.")
    marked, shown = contended_count(summary)
    if marked and marked == shown:
        return (f"**The decode times in this study are not speed figures:** all {shown} are contended ({DAGGER}): "
                f"{CONTENDED_MEANING}; {RETIME_HINT}.")
    return ""


def contended_line(summary: pd.DataFrame) -> str:
    """"3 of 12 decode times are contended (†): ..." ("" when none is)."""
    marked, shown = contended_count(summary)
    if not marked:
        return ""
    several = "seeds" in summary and (summary["seeds"] > 1).any()
    return (f"{marked} of {shown} decode times {'is' if marked == 1 else 'are'} contended ({DAGGER}): {CONTENDED_MEANING}"
            + ("; a mean over seeds is marked when any seed's time is" if several else "")
            + f"; not speed figures: {RETIME_HINT}.")


def timing_text(df: pd.DataFrame) -> str:
    """What BLEU and the decode times are, and how the decode times were measured."""
    if seconds_column(df) == SECONDS:
        def spread(column: str) -> str:
            values = sorted({int(v) for v in df[column].dropna()}) if column in df else []
            return f"{values[0]}-{values[-1]}" if len(values) > 1 else (str(values[0]) if values else "")

        repeats, passes, processes = spread("decode_repeats"), spread("decode_passes_per_repeat"), spread("decode_processes")
        precision = df["decode_precision"].dropna() if "decode_precision" in df else pd.Series(dtype=float)
        how = (f" over {repeats} timed repeats" if repeats else "") + (f" of {passes} passes" if passes not in ("", "1") else "")
        how += f", median known to within {100 * precision.max():.1f}% (95%)" if not precision.empty else ""
        how += f", the fastest of {processes} fresh processes" if processes not in ("", "1") else ""
        timing = (f"decode s (decode_s): the seconds to decode the validation set, the decode-timing stage's median{how}; "
                  "each model alone on its node after the Tune run, on CPU in processes pinned to their core(s); "
                  "repeats that found their core shared or the machine running slow were run again (data loading "
                  "excluded; per trial in results.csv: decode_seconds_iqr/min/max, decode_repeats, "
                  "decode_precision, decode_interrupted, decode_contended; every repeat in timing.json). "
                  "val/decode_seconds in results.csv and W&B is measured during training beside other trials: "
                  "a training-time signal only.")
    else:
        timing = ("decode s (decode_s): val/decode_seconds, measured during training beside other trials (the timing "
                  "stage did not run): a training-time signal, not a speed measurement.")
    return "BLEU: sacrebleu corpus BLEU (tokenize=none) on the validation set; " + timing


def results_sections(df: pd.DataFrame, metric: str = BLEU, mode: str = "max") -> list[tuple[str, str]]:
    """The report's text, shared by results.md and the W&B Report: (heading, Markdown) pairs, the
    first with heading "" (the preamble: a warning when no decode time is a speed figure, the
    summary rule, seeds and trial counts). Then, for a study with a length axis, the paper's
    layout (:func:`length_table`); the long table (:func:`paper_table`); the Pareto front; the
    failed trials."""
    summary = cell_summary(df, metric, mode)
    timed = seconds_column(df) == SECONDS
    counts = df["status"].value_counts().to_dict() if "status" in df and not df.empty else {}
    preamble = [timing_warning(summary, timed), SUMMARY_RULE.format(metric=metric, mode=mode)]
    preamble += [seeds_line(df, summary) if not summary.empty else ""]
    preamble += ["Trials: " + (", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none")]
    sections = [("", _paragraphs(preamble))]
    errors = df[df["status"] == "error"] if "status" in df else df.iloc[0:0]
    failed = [("Failed trials", "\n".join(f"- {r.cell} seed={r.seed}: {r.error}" for r in errors.itertuples()))]
    if summary.empty:
        return sections + [("Results", "No finished trials yet.")] + (failed if not errors.empty else [])
    marks = contended_line(summary)
    wide = _length_table(summary)
    if not wide.empty:
        sections.append(("Results by model and length (the paper's Table 1 layout)", _paragraphs([_to_markdown(wide), marks])))
        marks = ""
    heading = "Results by length and model" if not wide.empty else "Results"
    sections.append((heading, _paragraphs([_to_markdown(_long_table(summary)), marks, timing_text(df)])))
    points = _front_points(summary)
    if not points.empty:
        sections.append(("Quality vs speed: the Pareto front", _paragraphs([pareto_markdown(points), *pareto_notes(points, timed)])))
    return sections + (failed if not errors.empty else [])


def _paragraphs(parts: Sequence[str]) -> str:
    return "\n\n".join(p for p in parts if p)


def build_local_report(sweep_dir: Path, metric: str = BLEU, mode: str = "max", title: Optional[str] = None) -> dict[str, Path]:
    """(Re)write results.md, the plots and pareto.png from ``sweep_dir/results.csv``."""
    from .plots import plot_results, save_figure

    df = read_results(sweep_dir / "results.csv")
    paths: dict[str, Path] = dict(plot_results(cell_summary(df, metric, mode), sweep_dir))
    points = model_points(df, metric, mode)
    if not points.empty:
        paths["pareto"] = save_figure(pareto_figure(points), sweep_dir / "pareto.png")
    lines = [f"# {title or sweep_dir.name}"]
    for heading, text in results_sections(df, metric, mode):
        lines += ([f"## {heading}"] if heading else []) + [text]
    if paths:
        lines.append("## Figures\n\n" + "\n".join(f"![{name}]({p.name})" for name, p in paths.items()))
    paths["md"] = sweep_dir / "results.md"
    paths["md"].write_text("\n\n".join(lines) + "\n")
    return paths


def _to_markdown(table: pd.DataFrame) -> str:
    try:
        # the cells are already formatted (mean +- std, each metric's digits): no re-parsing
        return table.to_markdown(index=False, disable_numparse=True)
    except ImportError:
        return table.to_string(index=False)


# ------------------------------------------------------------------------------------ W&B report
def _reports_api() -> Any:
    try:
        import wandb_workspaces.reports.v2 as wr
    except ImportError as err:
        raise SystemExit(
            "building a W&B Report needs the `wandb-workspaces` package (pip install wandb-workspaces, "
            "or the project's [sweep] extra)"
        ) from err
    return wr


PANELS_NOTE = (
    "The panels plot the runs' own W&B records: every run of the group (each Optuna sample, each seed). "
    "decode_seconds is the timing stage's figure, added to each run's summary after the Tune run; a panel "
    f"cannot mark a contended one (decode_contended in the summary): the tables above do ({DAGGER}). "
    "val/decode_seconds, logged during training beside other trials, is a training-time signal only."
)


def build_wandb_report(
    entity: str,
    project: str,
    group: str,
    title: Optional[str] = None,
    points: Optional[pd.DataFrame] = None,
    results: Optional[pd.DataFrame] = None,
    metric: str = BLEU,
    mode: str = "max",
) -> Any:
    """A ``wandb_workspaces.reports.v2.Report`` for one sweep group (not saved; call ``.save()``).

    Args:
        results: the sweep's results frame (``read_results(results.csv)``): the report then carries
            results.md's text (:func:`results_sections`: the paper's layout by model and length,
            the long table, the Pareto front, contended decode times marked †) as Markdown.
        points: without ``results``, :func:`model_points` for the Pareto table alone.

    Then a panel grid over the group's runs (:data:`PANELS_NOTE`): for a study with several
    lengths, BLEU and decode seconds against length (the paper table's columns); BLEU and decode
    seconds per cell (mean ± std over its runs); BLEU against decode seconds; BLEU and loss
    curves; the attention heatmap images.
    """
    wr = _reports_api()
    runset = wr.Runset(entity=entity, project=project, name=group, filters=f"Group == '{group}'")
    blocks: list[Any] = [
        wr.H1(text=title or f"Sweep {group}"),
        wr.P(text=f"Runs of W&B group '{group}' in {entity}/{project}: quality against decode speed."),
    ]
    lengths = 0
    if results is not None:
        for heading, text in results_sections(results, metric, mode):
            blocks += ([wr.H2(text=heading)] if heading else []) + [wr.MarkdownBlock(text=text)]
        if "length" in results:
            lengths = results["length"].dropna().nunique()
    elif points is not None and not points.empty:
        blocks += [wr.H2(text="Pareto front (BLEU vs decode seconds)"), wr.MarkdownBlock(text=pareto_markdown(points))]
    panels = []
    if lengths > 1:
        panels += [
            wr.ScatterPlot(title="BLEU vs sequence length", x=wr.Config("length"), y=wr.SummaryMetric(BLEU)),
            wr.ScatterPlot(title="decode seconds vs sequence length", x=wr.Config("length"), y=wr.SummaryMetric(SECONDS)),
        ]
    per_cell = dict(groupby=wr.Config("cell"), groupby_aggfunc="mean", groupby_rangefunc="stddev")
    panels += [
        wr.BarPlot(title="BLEU per cell (mean ± std over its runs)", metrics=[BLEU], **per_cell),
        wr.BarPlot(title="decode seconds per cell (mean ± std over its runs)", metrics=[SECONDS], **per_cell),
        wr.ScatterPlot(title="BLEU vs decode time", x=wr.SummaryMetric(SECONDS), y=wr.SummaryMetric(BLEU)),
        wr.LinePlot(title="validation BLEU", x="Step", y=[BLEU]),
        wr.LinePlot(title="validation loss", x="Step", y=[VAL_LOSS]),
        wr.MediaBrowser(title="attention heatmaps", media_keys=["val/attention"]),
    ]
    blocks += [wr.H2(text="Panels over the group's runs"), wr.P(text=PANELS_NOTE), wr.PanelGrid(runsets=[runset], panels=panels)]
    return wr.Report(project=project, entity=entity, title=title or f"Sweep {group}", blocks=blocks)


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Path]:
    p = argparse.ArgumentParser(description="Rebuild a sweep's local report (and optionally a W&B Report).")
    p.add_argument("sweep_dir", type=Path, help="<output>/<name>, the folder holding results.csv")
    p.add_argument("--metric", default=BLEU)
    p.add_argument("--mode", default="max", choices=["max", "min"])
    p.add_argument("--title")
    p.add_argument("--wandb", action="store_true", help="also build and save a W&B Report for the group")
    p.add_argument("--entity", help="W&B entity (default: the API key's)")
    p.add_argument("--project", default="memory-attention")
    p.add_argument("--group", help="W&B group (default: the folder's name)")
    args = p.parse_args(argv)
    paths = build_local_report(args.sweep_dir, args.metric, args.mode, args.title)
    for path in paths.values():
        print(path)
    if args.wandb:
        import wandb

        entity = args.entity or wandb.Api().default_entity
    
        results = read_results(args.sweep_dir / "results.csv")
        report = build_wandb_report(entity, args.project, args.group or args.sweep_dir.name, args.title,
                                    results=results, metric=args.metric, mode=args.mode)
        report.save()
        print(f"W&B report: {report.url}")
    return paths


if __name__ == "__main__":
    main()
