"""The local report of a finished sweep, rebuilt from its results.csv, and optionally a W&B Report.

    python -m sweeps.report sweep-results/k_vs_length                # results.md + PNGs
    python -m sweeps.report sweep-results/k_vs_length --wandb --entity ME --project memory-attention

Local report (in the sweep folder): ``results.md`` (the paper-style table from
:func:`paper_table`, a Pareto table of BLEU vs decode time, the plots) and
``pareto.png``: one point per model (and length), BLEU against decode seconds, the Pareto front
(no other point is both faster and at least as good) drawn and its points labelled, e.g.
"memory K=32", so the table answers "which K buys how much BLEU for how much time".

``--wandb`` builds a W&B Report for the sweep's group (``wandb_workspaces.reports.v2``, from the
``wandb-workspaces`` package) with the results table, BLEU-vs-decode-time scatter and per-metric
line plots, and saves it (needs an API key and network).
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

BLEU = "val/bleu"
# The isolated timing stage's median (sweeps.timing): what tables, plots and the front show.
SECONDS = "decode_seconds"
# Measured during training, beside other trials: a progress signal, shown only when no timing ran.
TRAINING_SECONDS = "val/decode_seconds"

SUMMARY_RULE = (
    "One rule everywhere (table, Pareto front, plots): per cell, the best trial by the study's metric "
    "({metric}, {mode}) over its Optuna samples, for each seed; then the mean +- std over seeds."
)


def cell_summary(df: pd.DataFrame, metric: str = BLEU, mode: str = "max") -> pd.DataFrame:
    """The summary rule: per (cell, seed) the best finished trial by ``metric`` over its Optuna
    samples; per cell the mean and std over seeds of BLEU, decode seconds and loss.

    Returns one row per cell: ``cell``, ``length``, ``model``, ``attention``, ``K``, the means under
    the metric names (``val/bleu``, ``decode_seconds``, ``val/loss``), ``<name>_std`` (NaN for one
    seed), ``seeds`` and ``trials`` (finished trials the best were chosen from).
    """
    done = df[df["status"].isin(["done", "stopped"])] if "status" in df else df
    if metric in done:
        done = done.dropna(subset=[metric])
    if done.empty:
        return pd.DataFrame()
    seconds = seconds_column(df)
    best = done.sort_values(metric, ascending=mode == "min", kind="stable").groupby(["cell", "seed"], dropna=False).head(1)
    values = [c for c in (BLEU, seconds, "val/loss") if c in best]
    groups = best.groupby("cell", dropna=False, sort=False)
    summary = groups[values].mean()
    for c in values:
        summary[f"{c}_std"] = groups[c].std()
    summary["seeds"] = groups["seed"].nunique()
    summary["trials"] = done.groupby("cell", dropna=False)["seed"].size()
    labels = [c for c in ("length", "model", "attention", "K") if c in best]
    summary = best.groupby("cell", dropna=False, sort=False)[labels].first().join(summary).reset_index()
    if seconds != SECONDS:
        summary = summary.rename(columns={seconds: SECONDS, f"{seconds}_std": f"{SECONDS}_std"})
    for c in ("length", "K"):
        if c in summary and summary[c].notna().any():
            summary[c] = summary[c].astype("Int64")
    sort = [c for c in ("length", "model") if c in summary]
    return summary.sort_values(sort, na_position="first", kind="stable", key=natural_order).reset_index(drop=True)


def natural_order(column: pd.Series) -> pd.Series:
    """Sort key: text columns compare their numbers as numbers (``memory K=4`` before ``memory
    K=16``); numeric columns as they are."""
    if pd.api.types.is_numeric_dtype(column):
        return column
    return column.map(lambda v: re.sub(r"\d+", lambda m: m.group().zfill(12), v) if isinstance(v, str) else v)


def seconds_column(df: pd.DataFrame) -> str:
    """``decode_seconds`` (the timing stage) when any trial has it, else the training-time signal."""
    return SECONDS if SECONDS in df and df[SECONDS].notna().any() else TRAINING_SECONDS


def pareto_front(df: pd.DataFrame, quality: str = BLEU, cost: str = SECONDS) -> pd.Series:
    """Bool per row: True where no other row has ``cost`` <= and ``quality`` >= with one strict.

    Rows with a missing quality or cost are never on the front. Ties (equal cost and quality)
    are all on the front.
    """
    on_front = pd.Series(False, index=df.index)
    valid = df[[quality, cost]].dropna()
    q, c = valid[quality].to_numpy(), valid[cost].to_numpy()
    for i, idx in enumerate(valid.index):
        dominated = ((c <= c[i]) & (q >= q[i]) & ((c < c[i]) | (q > q[i]))).any()
        on_front[idx] = not dominated
    return on_front


def model_points(df: pd.DataFrame, metric: str = BLEU, mode: str = "max") -> pd.DataFrame:
    """One point per cell (:func:`cell_summary`: the summary rule), with its Pareto front
    (``pareto``) among the cells of the same length."""
    points = cell_summary(df, metric, mode)
    if points.empty:
        return pd.DataFrame(columns=["length", "model", BLEU, SECONDS, "pareto"])
    points = points.dropna(subset=[BLEU, SECONDS]).reset_index(drop=True)
    if points.empty:
        return pd.DataFrame(columns=["length", "model", BLEU, SECONDS, "pareto"])
    fronts = [pareto_front(g) for _, g in points.groupby("length", dropna=False)]
    points["pareto"] = pd.concat(fronts).reindex(points.index).fillna(False).astype(bool)
    return points.sort_values(["length", SECONDS], na_position="first", kind="stable").reset_index(drop=True)


def pareto_figure(points: pd.DataFrame):
    """BLEU vs decode seconds, one colour per length, front as a step line, front points labelled."""
    from .plots import plt

    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for length, g in points.groupby("length", dropna=False):
        label = f"L={int(length)}" if pd.notna(length) else "all"
        dots = ax.scatter(g[SECONDS], g[BLEU], s=22, alpha=0.6, label=label)
        front = g[g["pareto"]].sort_values(SECONDS)
        colour = dots.get_facecolor()[0]
        ax.step(front[SECONDS], front[BLEU], where="post", color=colour, lw=1.2)
        ax.scatter(front[SECONDS], front[BLEU], s=60, facecolors="none", edgecolors=colour, lw=1.5)
        for _, row in g.iterrows():
            ax.annotate(
                str(row["model"]),
                (row[SECONDS], row[BLEU]),
                fontsize=7 if row["pareto"] else 6,
                alpha=1.0 if row["pareto"] else 0.55,
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.set_xlabel("decode time over the validation set (s)")
    ax.set_ylabel("BLEU")
    ax.set_title("Quality vs speed (circled + line: Pareto front)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def pareto_markdown(points: pd.DataFrame) -> str:
    """The front per length as a table: model, BLEU, seconds, BLEU gained and time paid vs the previous point."""
    lines = ["| length | model | BLEU | decode s | +BLEU | +seconds |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for length, g in points[points["pareto"]].groupby("length", dropna=False):
        previous = None
        for _, row in g.sort_values(SECONDS).iterrows():
            bleu, seconds = float(row[BLEU]), float(row[SECONDS])
            gain = "" if previous is None else f"{bleu - previous[0]:+.2f}"
            paid = "" if previous is None else f"{seconds - previous[1]:+.4f}"
            lines.append(f"| {length} | {row['model']} | {bleu:.2f} | {seconds:.4f} | {gain} | {paid} |")
            previous = (bleu, seconds)
    return "\n".join(lines)


def paper_table(df: pd.DataFrame, metric: str = BLEU, mode: str = "max") -> pd.DataFrame:
    """Rows (length, model), columns BLEU / decode seconds / loss / seeds: :func:`cell_summary`,
    with ``mean +- std`` where there are several seeds."""
    summary = cell_summary(df, metric, mode)
    if summary.empty:
        return pd.DataFrame()
    keys = [k for k in ("length", "model") if k in summary and summary[k].notna().any()]
    if summary[keys].duplicated().any():  # cells differing in more than length and model
        keys = ["cell"]
    table = summary[keys].copy()
    for name, column, digits in (("BLEU", BLEU, 2), ("decode_s", SECONDS, 4), ("loss", "val/loss", 3)):
        if column in summary:
            table[name] = [_mean_std(m, sd, digits) for m, sd in zip(summary[column], summary[f"{column}_std"])]
    table["seeds"] = summary["seeds"]
    return table


def _mean_std(mean: float, std: float, digits: int) -> str:
    if pd.isna(mean):
        return ""
    return f"{mean:.{digits}f}" + ("" if pd.isna(std) else f" ± {std:.{digits}f}")


def build_local_report(sweep_dir: Path, metric: str = BLEU, mode: str = "max", title: Optional[str] = None) -> dict[str, Path]:
    """(Re)write results.md, the plots and pareto.png from ``sweep_dir/results.csv``."""
    from .plots import plot_results, save_figure
    from .results import read_results

    df = read_results(sweep_dir / "results.csv")
    summary = cell_summary(df, metric, mode)
    paths: dict[str, Path] = dict(plot_results(summary, sweep_dir))
    points = model_points(df, metric, mode)
    title = title or sweep_dir.name
    counts = df["status"].value_counts().to_dict() if "status" in df and not df.empty else {}
    lines = [f"# {title}", "", SUMMARY_RULE.format(metric=metric, mode=mode), ""]
    lines += ["Trials: " + (", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none"), ""]
    table = paper_table(df, metric, mode)
    if table.empty:
        lines.append("No finished trials yet.")
    else:
        lines += ["## Results", "", _to_markdown(table), ""]
        if seconds_column(df) == SECONDS:
            repeats = sorted({int(r) for r in df["decode_repeats"].dropna()}) if "decode_repeats" in df else []
            passes = f" over {'/'.join(map(str, repeats))} timed passes" if repeats else ""
            timing = (f"decode_s: the decode-timing stage's median{passes} of the seconds to decode the validation set, each "
                      "model alone on its node after the Tune run, on CPU in a process pinned to its core(s), "
                      "passes that found their core shared or the machine running slow run again (data "
                      "loading excluded; spread per trial "
                      "in results.csv: decode_seconds_iqr/min/max, decode_interrupted, decode_contended). "
                      "val/decode_seconds in results.csv and W&B is "
                      "measured during training beside other trials: a training-time signal only.")
        else:
            timing = ("decode_s: val/decode_seconds, measured during training beside other trials (the timing "
                      "stage did not run): a training-time signal, not a speed measurement.")
        lines.append("BLEU: sacrebleu corpus BLEU (tokenize=none) on the validation set; " + timing)
    if not points.empty:
        paths["pareto"] = save_figure(pareto_figure(points), sweep_dir / "pareto.png")
        lines += ["", "## Quality vs speed: the Pareto front", "", pareto_markdown(points), ""]
        lines.append("Each step along the front: the BLEU a slower model buys and the seconds it costs.")
    errors = df[df["status"] == "error"] if "status" in df else df.iloc[0:0]
    if not errors.empty:
        lines += ["", "## Failed trials", ""]
        lines += [f"- {r.cell} seed={r.seed}: {r.error}" for r in errors.itertuples()]
    if paths:
        lines += ["", "## Figures", ""] + [f"![{name}]({p.name})" for name, p in paths.items()]
    paths["md"] = sweep_dir / "results.md"
    paths["md"].write_text("\n".join(lines) + "\n")
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


def build_wandb_report(entity: str, project: str, group: str, title: Optional[str] = None, points: Optional[pd.DataFrame] = None) -> Any:
    """A ``wandb_workspaces.reports.v2.Report`` for one sweep group (not saved; call ``.save()``).

    Blocks: a title and intro, the Pareto table as Markdown (when ``points`` is given), and a
    panel grid over the group's runs with a BLEU-vs-decode-time scatter, BLEU and loss curves,
    decode time by run and the attention heatmap images.
    """
    wr = _reports_api()
    runset = wr.Runset(entity=entity, project=project, name=group, filters=f"Group == '{group}'")
    panels = [
        wr.ScatterPlot(title="BLEU vs decode time", x=SECONDS, y=BLEU),
        wr.LinePlot(title="validation BLEU", x="Step", y=[BLEU]),
        wr.LinePlot(title="validation loss", x="Step", y=["val/loss"]),
        wr.BarPlot(title="decode seconds", metrics=[SECONDS]),
        wr.MediaBrowser(title="attention heatmaps", media_keys=["val/attention"]),
    ]
    blocks: list[Any] = [
        wr.H1(text=title or f"Sweep {group}"),
        wr.P(text=f"Runs of W&B group '{group}' in {entity}/{project}: quality against decode speed."),
    ]
    if points is not None and not points.empty:
        blocks += [wr.H2(text="Pareto front (BLEU vs decode seconds)"), wr.MarkdownBlock(text=pareto_markdown(points))]
    blocks.append(wr.PanelGrid(runsets=[runset], panels=panels))
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
        from .results import read_results

        points = model_points(read_results(args.sweep_dir / "results.csv"), args.metric, args.mode)
        report = build_wandb_report(entity, args.project, args.group or args.sweep_dir.name, args.title, points)
        report.save()
        print(f"W&B report: {report.url}")
    return paths


if __name__ == "__main__":
    main()
