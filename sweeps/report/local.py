"""The local report of a finished sweep, rebuilt from its results.csv, and optionally a W&B Report.

    python -m sweeps.report sweep-results/k_vs_length                # results.md + PNGs
    python -m sweeps.report sweep-results/k_vs_length --wandb --entity ME --project memory-attention

Local report (in the sweep folder): ``results.md``, led (for a sweep with a length axis) by the
paper's Table 1 layout (:func:`~sweeps.report.markdown.length_table`: one row per model, per length its
BLEU and decode time), then the long table (:func:`~sweeps.report.markdown.paper_table`: one row per
length and model), the Pareto table of BLEU vs decode time and the plots (:mod:`sweeps.report.plots`), and
``pareto.png`` (:mod:`sweeps.report.figures`): one point
per model (and length), BLEU against decode seconds, the Pareto front (no other point is both
faster and at least as good) drawn and its points labelled, e.g. "memory K=32", so the table
answers "which K buys how much BLEU for how much time".

A decode time the timing stage measured while the machine was busy (``decode_contended`` in
results.csv; a training step's: ``train_step_contended``) is marked with a dagger (†) wherever it
is shown, in tables, Pareto fronts and plots, and the page says how many there are: it is not a
speed figure.

``--wandb`` builds a W&B Report for the sweep's group (:mod:`sweeps.report.wandb_report`) with the same
tables as Markdown and panels over the group's runs, and saves it (needs an API key and network).

Where things are: the summary rule and the Pareto front (:mod:`sweeps.report.summary`), the tables and
the page's text (:mod:`sweeps.report.markdown`), the figures (:mod:`sweeps.report.plots`, :mod:`sweeps.report.figures`), the W&B Report
(:mod:`sweeps.report.wandb_report`); this module writes the page and is the command.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from csv import reader
from pathlib import Path
from typing import Any

from lightning_modules.metric_names import DECODE_SECONDS, VAL_BLEU
from sweeps.layout import (
    HELDOUT_FILE,
    RESULTS_CSV,
    RESULTS_MD,
    TIMING_FILE,
)
from sweeps.report.distill import distill_plots
from sweeps.report.figures import pareto_figure, save_figure
from sweeps.report.heldout import split_confirm
from sweeps.report.inputs import UNWRITABLE, input_problem
from sweeps.report.moo import report_sections, section_with_plots, with_section
from sweeps.report.page import page_sections, recorded_metric, sweep_description
from sweeps.report.plots import UNTIMED_NOTE, plot_results
from sweeps.report.results import read_results
from sweeps.report.summary import (
    SPLIT_WORDS,
    cell_summary,
    front_points,
    seconds_column,
    timed_split,
)
from sweeps.report.train_cost import copied_cells
from sweeps.report.wandb_report import add_target_args, publish_report
from sweeps.spec.search_schema import NATURAL_GOALS


def build_local_report(
    sweep_dir: Path, metric: str = VAL_BLEU, mode: str = "max", title: str | None = None
) -> dict[str, Path]:
    """(Re)write results.md, the plots and pareto.png from ``sweep_dir/results.csv`` (and, for a
    multi-objective study, its section from ``optuna.journal``: :func:`sweeps.report.moo.write_section`)."""

    # the confirm trials (seeds.confirm) are no part of any selection summary: only of the held-out one
    df, confirm = split_confirm(read_results(sweep_dir / RESULTS_CSV))
    # the fused cells whose training step and peaks were measured once and copied to their
    # seeds: no spread (a sweep can hold such cells beside cells measured on each seed)
    copied = copied_cells(df)
    summary = cell_summary(df, metric, mode)  # the summary rule, once for every table and plot
    decode_timed = seconds_column(df) == DECODE_SECONDS  # else val/decode_seconds: not speed
    # the data the decode times are of: the timing stage's split, else training's validation
    split = timed_split(df) if decode_timed else SPLIT_WORDS["valid"]
    paths: dict[str, Path] = dict(plot_results(summary, sweep_dir, copied, decode_timed, split))
    paths.update(distill_plots(df, sweep_dir, metric, mode))  # BLEU vs lambda, per K
    points = front_points(summary)
    if not points.empty:
        untimed = "" if decode_timed else UNTIMED_NOTE
        figure = pareto_figure(points, untimed, split)
        paths["pareto"] = save_figure(figure, sweep_dir / "pareto.png")
    lines = [f"# {title or 'Sweep ' + sweep_dir.name}"]
    if description := sweep_description(sweep_dir):  # the sweep file's own words
        lines.append(description)
    for heading, text in page_sections(df, confirm, sweep_dir, metric, mode, summary):
        lines += ([f"## {heading}"] if heading else []) + [text]
    if paths:
        lines.append(
            "## Figures\n\n" + "\n".join(f"![{name}]({p.name})" for name, p in paths.items())
        )
    # a multi-objective study's section (fronts, hypervolume, answer lines), read from its Optuna
    # journal: the launcher's page and a rebuilt one are the same

    moo_text, moo_paths = section_with_plots(sweep_dir)
    paths.update(moo_paths)
    page = "\n\n".join(lines) + "\n"
    paths["md"] = sweep_dir / RESULTS_MD
    earlier = linked_figures(paths["md"])
    paths["md"].write_text(with_section(page, moo_text) if moo_text else page)
    for name in earlier - {p.name for p in paths.values()}:  # a figure of fewer results
        (sweep_dir / name).unlink(missing_ok=True)
    return paths


def linked_figures(page: Path) -> set[str]:
    """The PNG files beside ``page`` (an earlier results.md) that it shows: the figures an earlier
    report of the sweep drew. One this report does not draw (a stopped run's per-model bars, where
    the finished sweep draws lines over lengths) is removed, not left to be opened as current."""
    try:
        text = page.read_text()
    except OSError:
        return set()
    names = re.findall(r"!\[[^\]]*\]\(([^)/\\]+\.png)\)", text)
    return {n for n in names if (page.parent / n).is_file()}


def main(argv: Sequence[str] | None = None) -> dict[str, Path]:
    p = argparse.ArgumentParser(
        prog="python -m sweeps.report",
        description="Rebuild a sweep's local report (and optionally a W&B Report).",
    )
    p.add_argument("sweep_dir", type=Path, help="<output>/<name>, the folder holding results.csv")
    p.add_argument(
        "--metric",
        help="the results.csv column each cell's best trial is chosen by (default: the sweep's "
        f"metric, as its launch.json records it; without one, {VAL_BLEU})",
    )
    p.add_argument(
        "--mode",
        choices=["max", "min"],
        help="max or min of --metric (default: the sweep's goal for its own metric, else the "
        "metric's direction: min for a loss or a time, max for BLEU or accuracy)",
    )
    p.add_argument("--title", help="results.md's heading (default: Sweep <folder name>)")
    p.add_argument(
        "--wandb", action="store_true", help="also build and save a W&B Report for the group"
    )
    add_target_args(p)
    args = p.parse_args(argv)
    recorded = recorded_metric(args.sweep_dir)
    given = args.metric is not None
    args.metric = args.metric or recorded.get("name") or VAL_BLEU
    problem = input_problem(args.sweep_dir, args.metric)
    if problem and not given and problem.startswith(f"--metric {args.metric}:"):
        # not passed: say where the metric came from, and the option that chooses another
        source = "the sweep's metric (its launch.json)" if recorded.get("name") else "the default"
        problem = (
            f"{args.metric}, {source}, chooses each cell's best trial, but: "
            + problem.removeprefix(f"--metric {args.metric}: ")
            + "; --metric names another"
        )
    chosen = problem or chosen_mode(args.metric, args.mode, recorded)
    if isinstance(chosen, str):
        p.error(chosen)
    args.mode = chosen[1]
    for note in lost_columns(args.sweep_dir):
        print(f"note: {note}", file=sys.stderr)
    try:
        paths = build_local_report(args.sweep_dir, args.metric, args.mode, args.title)
    except OSError as exc:
        # another user's sweep folder, a read-only or full disk, a folder where a figure goes:
        # one line, and the files not yet rewritten stay as they were
        if exc.errno not in UNWRITABLE:
            raise
        print(
            f"error: cannot write {exc.filename or args.sweep_dir} ({exc.strerror}): the report is "
            "written beside results.csv; run it where that folder can be written (as its owner, "
            "with space free), or on a copy of the sweep's folder",
            file=sys.stderr,
        )
        raise SystemExit(1) from None
    for path in paths.values():
        print(path)
    if args.wandb and (code := _publish_wandb_report(args)):
        raise SystemExit(code)
    return paths


def chosen_mode(metric: str, mode: str | None, recorded: dict[str, Any]) -> tuple[str, str] | str:
    """``metric`` and the mode the best trials are chosen by: ``mode`` as given, else the sweep's
    goal for its own metric (``recorded``), else the metric's direction. A message instead where
    the choice would pick the worst trials (a mode against the metric's direction), would choose
    on the test split, or has no known direction and no ``--mode``."""
    if metric.startswith("test/"):
        return (
            f"--metric {metric}: the test split is measured once, on the trials already chosen "
            "on validation; choosing by it would report the test split's best as if it were held "
            f"out. Choose by a validation metric (e.g. {VAL_BLEU})"
        )
    natural = {"maximize": "max", "minimize": "min"}.get(NATURAL_GOALS.get(metric, ""))
    if mode is not None:
        if natural is not None and mode != natural:
            better = "higher" if natural == "max" else "lower"
            return (
                f"--mode {mode} for {metric} would pick the worst trials (a {better} {metric} is "
                f"better): give --mode {natural}, or leave --mode out"
            )
        return metric, mode
    if metric == recorded.get("name") and recorded.get("goal") in ("maximize", "minimize"):
        return metric, "max" if recorded["goal"] == "maximize" else "min"
    if natural is None:
        return f"--metric {metric}: no known direction; give --mode max or --mode min"
    return metric, natural


def _publish_wandb_report(args: Any) -> int:
    """Build and save the W&B Report of ``args.sweep_dir`` (``--wandb``): 0, or 2 with the fix
    (:func:`sweeps.report.wandb_report.publish_report`). A multi-objective sweep's section comes
    after results.md's others, as on the page."""
    return publish_report(
        args.sweep_dir,
        "the local report above is written",
        entity=args.entity,
        project=args.project,
        group=args.group,
        title=args.title,
        metric=args.metric,
        mode=args.mode,
        extra=report_sections(args.sweep_dir),
    )


#: the records a stage after training leaves in a trial's folder (or, with a bucket as storage,
#: under the sweep's ``timing/`` and ``heldout/``), and the results.csv columns its section needs
STAGE_RECORDS = (
    (TIMING_FILE, ("decode_seconds",), "timing"),
    (HELDOUT_FILE, ("test/bleu", "chosen"), "held-out"),  # chosen: the trials it tested
)


def lost_columns(sweep_dir: Path) -> list[str]:
    """What a results.csv edited by hand (or by a script) lost that the sweep's own records
    hold: a stage's column gone while trial folders keep its records, whose section the rebuilt
    page then leaves out (or reads as a stage that never ran)."""
    try:
        with (sweep_dir / RESULTS_CSV).open(newline="", encoding="utf-8") as f:
            columns = next(reader(f), [])
    except (OSError, UnicodeDecodeError):
        return []
    notes = []
    for record, needed, stage in STAGE_RECORDS:
        lost = [column for column in needed if column not in columns]
        if not lost:
            continue
        found = len(list(sweep_dir.glob(f"*/{record}"))) + len(
            list(sweep_dir.glob(f"*/*/{record}"))
        )
        if found:
            notes.append(
                f"{sweep_dir / RESULTS_CSV} has no {' or '.join(lost)} column, but {found} trial "
                f"folder(s) hold the {stage} stage's {record}: the page is built without them "
                f"(edited by hand, or written by a launch with the {stage} stage off?); a "
                f"launch's --resume with the stage on writes results.csv again from the sweep's "
                "records"
            )
    return notes


if __name__ == "__main__":
    main()
