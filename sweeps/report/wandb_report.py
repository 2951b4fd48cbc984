"""The sweep's W&B Report (``wandb_workspaces.reports.v2``, from the ``wandb-workspaces`` package):
results.md's text as Markdown and panels over the group's runs. ``python -m sweeps.report DIR
--wandb`` and ``python -m sweeps.report.moo DIR --wandb`` build and save it
(:func:`publish_report`; needs an API key and network).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from lightning_modules.metric_names import TEST_BLEU, VAL_BLEU, VAL_LOSS
from sweeps.integrations.wandb_env import unsynced_runs, wandb_has_credentials, wandb_sync_hint
from sweeps.layout import RESULTS_CSV, wandb_command
from sweeps.report.findings import seed_sections, smoke_caveat
from sweeps.report.heldout import heldout_sections, split_confirm
from sweeps.report.markdown import pareto_markdown, results_sections
from sweeps.report.page import launch_choice, page_sections
from sweeps.report.results import DECODE_SECONDS, read_results
from sweeps.report.selection import CONFIRM, ROLE, SELECT
from sweeps.report.summary import DAGGER
from sweeps.report.sweep_runs import logged_to, sweep_ids, sync_line, unsynced_reused

#: the W&B project of a sweep whose runs' records cannot be read (the sweep files' default)
DEFAULT_PROJECT = "memory-attention"


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
    "The panels plot the runs' own W&B records: every run of the group (of this sweep, by its sweep_id, "
    "where its launch recorded one, and, after a warm start, of the sweeps its reused trials came "
    "from) that took part in the selection "
    "(each Optuna sample, each seed; the confirm runs of seeds.confirm are plotted apart, below). "
    "decode_seconds is the timing stage's figure, added to each run's summary after the Tune run; a panel "
    f"cannot mark a contended one (decode_contended in the summary): the tables above do ({DAGGER}). "
    "val/decode_seconds, logged during training beside other trials, is a training-time signal only."
)
CONFIRM_PANELS_NOTE = (
    "Only the confirm runs: each cell's chosen configuration retrained on seeds the search never saw "
    "(config role = confirm). They are kept out of the panels above (role = select), whose per-cell "
    "means are over the runs the selection saw."
)


def build_wandb_report(
    entity: str,
    project: str,
    group: str,
    title: str | None = None,
    points: pd.DataFrame | None = None,
    results: pd.DataFrame | None = None,
    metric: str = VAL_BLEU,
    mode: str = "max",
    confirm: pd.DataFrame | None = None,
    sweep_id: str | Sequence[str] | None = None,
    chosen_by: tuple[str, str] | None = None,
    smoke: bool = False,
    sections: Sequence[tuple[str, str]] | None = None,
    where: str = "",
) -> Any:
    """A ``wandb_workspaces.reports.v2.Report`` for one sweep group (not saved; call ``.save()``).
    ``sweep_id``: the sweep's id (launch.json's), or its ids (a warm start's reused trials are runs
    of the sweeps they came from: :func:`sweeps.report.sweep_runs.sweep_ids`), whose runs alone
    the panels then plot: a smoke run or an earlier run of a sweep of the same name shares the
    group. ``chosen_by`` and ``smoke``: as results.md's (the launch's metric for the held-out
    rows, a smoke run's caveat on its findings). ``sections``: results.md's text
    (:func:`sweeps.report.page.page_sections`, and any section after it), in place of the part
    of it built from ``results`` alone. ``where``: a sentence on where the group and project
    come from, after the opening line.

    Args:
        results: the sweep's results frame (``read_results(results.csv)``): the report then carries
            results.md's text (:func:`results_sections`: the paper's layout by model and length,
            the long table, the Pareto front, contended decode times marked †; with 2 or more
            seeds, the intervals, the paper's findings judged on them and the paired bootstrap:
            :func:`sweeps.report.findings.seed_sections`) as Markdown.
            Then, as results.md, the held-out section and (with ``confirm``: the confirm trials'
            rows, :func:`sweeps.report.heldout.split_confirm`) the confirm section
            (:func:`sweeps.report.heldout.heldout_sections`).
        points: without ``results``, :func:`model_points` for the Pareto table alone.

    Then a panel grid over the group's runs (:data:`PANELS_NOTE`): for a sweep with several
    lengths, BLEU and decode seconds against length (the paper table's columns); BLEU and decode
    seconds per cell (mean ± std over its runs); BLEU against decode seconds; BLEU and loss
    curves; the attention heatmap images.
    """
    wr = _reports_api()
    # the confirm runs (sweeps.stages.confirm: config role = confirm) are no part of the selection, so
    # no part of its per-cell means; in a sweep with confirm seeds every other run has role = select
    has_confirm = confirm is not None and not confirm.empty

    def runs(name: str, role: str | None) -> Any:
        """The group's runs, or those of one role."""
        role_filter = f" and Config('{ROLE}') == '{role}'" if role else ""
        this_sweep = sweep_filter(sweep_id)
        return wr.Runset(
            entity=entity,
            project=project,
            name=name,
            filters=f"Group == '{group}'{this_sweep}{role_filter}",
        )

    runset = runs(group, SELECT if has_confirm else None)
    blocks: list[Any] = [
        wr.H1(text=title or f"Sweep {group}"),
        wr.P(
            text=f"Runs of W&B group '{group}' in {entity}/{project}: quality against decode speed."
            + (f" {where}" if where else "")
        ),
    ]
    lengths = 0
    if sections is not None:  # results.md's own sections, its preamble and notes with them
        for heading, text in sections:
            blocks += ([wr.H2(text=heading)] if heading else []) + [wr.MarkdownBlock(text=text)]
    elif results is not None:
        for heading, text in results_sections(results, metric, mode):
            blocks += ([wr.H2(text=heading)] if heading else []) + [wr.MarkdownBlock(text=text)]
        for heading, text in seed_sections(results, metric, mode) + heldout_sections(
            results, metric, mode, confirm, chosen_by
        ):  # intervals, findings, paired bootstrap; chosen on validation, reported on test
            text = smoke_caveat(heading, text, smoke)
            blocks += [wr.H2(text=heading), wr.MarkdownBlock(text=text)]
    elif points is not None and not points.empty:
        blocks += [
            wr.H2(text="Pareto front (BLEU vs decode seconds)"),
            wr.MarkdownBlock(text=pareto_markdown(points)),
        ]
    if results is not None and "length" in results:
        lengths = results["length"].dropna().nunique()
    panels = []
    if lengths > 1:
        panels += [
            wr.ScatterPlot(
                title="BLEU vs sequence length", x=wr.Config("length"), y=wr.SummaryMetric(VAL_BLEU)
            ),
            wr.ScatterPlot(
                title="decode seconds vs sequence length",
                x=wr.Config("length"),
                y=wr.SummaryMetric(DECODE_SECONDS),
            ),
        ]
    per_cell = dict(groupby=wr.Config("cell"), groupby_aggfunc="mean", groupby_rangefunc="stddev")
    panels += [
        wr.BarPlot(
            title="BLEU per cell (mean ± std over its runs)", metrics=[VAL_BLEU], **per_cell
        ),
        wr.BarPlot(
            title="decode seconds per cell (mean ± std over its runs)",
            metrics=[DECODE_SECONDS],
            **per_cell,
        ),
        wr.ScatterPlot(
            title="BLEU vs decode time",
            x=wr.SummaryMetric(DECODE_SECONDS),
            y=wr.SummaryMetric(VAL_BLEU),
        ),
        wr.LinePlot(title="validation BLEU", x="Step", y=[VAL_BLEU]),
        wr.LinePlot(title="validation loss", x="Step", y=[VAL_LOSS]),
        wr.MediaBrowser(title="attention heatmaps", media_keys=["val/attention"]),
    ]
    blocks += [
        wr.H2(text="Panels over the group's runs"),
        wr.P(text=PANELS_NOTE),
        wr.PanelGrid(runsets=[runset], panels=panels),
    ]
    if has_confirm:
        confirm_runs = runs(f"{group} confirm", CONFIRM)
        blocks += [
            wr.H2(text="Panels over the confirm runs"),
            wr.P(text=CONFIRM_PANELS_NOTE),
            wr.PanelGrid(
                runsets=[confirm_runs],
                panels=[
                    wr.BarPlot(
                        title=f"{name} per cell on the confirm seeds (mean ± std)",
                        metrics=[name],
                        **per_cell,
                    )
                    for name in (VAL_BLEU, TEST_BLEU)
                ],
            ),
        ]
    return wr.Report(project=project, entity=entity, title=title or f"Sweep {group}", blocks=blocks)


def sweep_filter(ids: str | Sequence[str] | None) -> str:
    """The runset filter's part that keeps the runs of these sweep ids ("" for none)."""
    ids = [ids] if isinstance(ids, str) else list(ids or [])
    if not ids:
        return ""
    if len(ids) == 1:
        return f" and Config('sweep_id') == '{ids[0]}'"
    return " and Config('sweep_id') in [" + ", ".join(f"'{i}'" for i in ids) + "]"


class Built(NamedTuple):
    """A sweep's W&B Report, not saved, and what to say of how it was built."""

    report: Any
    notes: list[str]


def sweep_report(
    sweep_dir: Path,
    entity: str | None,
    project: str | None = None,
    group: str | None = None,
    title: str | None = None,
    metric: str | None = None,
    mode: str | None = None,
    extra: Sequence[tuple[str, str]] = (),
) -> Built:
    """The W&B Report of the sweep in ``sweep_dir`` (:func:`build_wandb_report`), not saved:
    results.md's sections (its preamble and notes with them: :func:`page_sections`), then
    ``extra`` (a multi-objective sweep's section); panels over the runs of this sweep and of the
    sweeps its reused trials came from (:func:`sweeps.report.sweep_runs.sweep_ids`). ``project``
    and ``group``: as given, else those the sweep's runs logged to (their own records:
    :func:`sweeps.report.sweep_runs.logged_to`), else the default project and the folder's name;
    ``entity``: as given, else the runs' (an online run's record names it), else the API key's
    (:func:`default_entity`). ``metric`` and ``mode``: as given, else the launch's choice."""
    sweep_dir = Path(sweep_dir)
    results, confirm = split_confirm(read_results(sweep_dir / RESULTS_CSV))
    if not (metric and mode):  # the launch's choice, as results.md's own rebuild takes it
        metric, mode = launch_choice(sweep_dir) or (VAL_BLEU, "max")
    target = logged_to(sweep_dir, results)
    group, group_how = _pick(
        group, target and target.group, target, sweep_dir.name, "folder's name"
    )
    project, project_how = _pick(
        project, target and target.project, target, DEFAULT_PROJECT, "default"
    )
    ids, why = sweep_ids(sweep_dir, results)
    same = group_how == project_how
    notes = [
        f"W&B group '{group}' and project '{project}': {group_how}"
        if same
        else f"W&B group '{group}' ({group_how}), project '{project}' ({project_how})"
    ]
    notes += [f"The panels cover the whole group: {why}"] if why else []
    report = build_wandb_report(
        entity or (target.entity if target else "") or default_entity(),
        project,
        group,
        title,
        results=results,
        metric=metric,
        mode=mode,
        confirm=confirm,
        sweep_id=ids,
        sections=page_sections(results, confirm, sweep_dir, metric, mode) + list(extra),
        where=(
            f"Group and project: {group_how}."
            if same
            else f"Group: {group_how}; project: {project_how}."
        )
        + (f" The panels cover the whole group: {why}." if why else ""),
    )
    return Built(report, notes)


def _pick(given: str | None, logged: Any, target: Any, fallback: str, what: str) -> tuple[str, str]:
    """A group or project for the Report, and how it was picked: ``given`` (the command's option),
    else ``logged`` (what the sweep's runs logged to: ``target``), else ``fallback`` (``what``)."""
    if given:
        return given, "as given"
    if logged:
        return logged, f"as the sweep's {target.runs} W&B run(s) logged to"
    why = "the runs name none" if target else "no record of the sweep's W&B runs here"
    return fallback, f"the {what}: {why}"


def default_entity() -> str:
    """The entity of the API key (W&B's default for it): asks W&B (the network)."""
    import wandb  # the W&B client, only for a Report to be saved (the page needs none of it)

    entity = wandb.Api().default_entity
    if not entity:
        raise ValueError("W&B names no default entity for this API key: give --entity")
    return entity


def publish_report(sweep_dir: Path, written: str, **how: Any) -> int:
    """Build (:func:`sweep_report`, with ``how``) and save the sweep's W&B Report, printing its
    address: 0. Where it cannot be (:func:`report_problem`) or W&B does not take it (a key
    refused, no network, no default entity), one line with the fix, after ``written`` (what the
    command wrote before): 2."""
    if problem := report_problem(sweep_dir):
        print(f"--wandb: {problem}; {written}", file=sys.stderr)
        return 2
    try:
        built = sweep_report(sweep_dir, **how)
        built.report.save()
    except Exception as exc:  # noqa: BLE001 -- W&B's own errors: a key refused, no network
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(
            f"--wandb: W&B did not take the report ({type(exc).__name__}: {why}); {written}. "
            "Check the API key (wandb login) and the network, then run the command again",
            file=sys.stderr,
        )
        return 2
    for note in built.notes:
        print(note)
    print(f"W&B report: {built.report.url}")
    return 0


def report_problem(sweep_dir: Path) -> str | None:
    """Why a W&B Report of the sweep cannot be built from here, with the fix; None when it can.
    The Report is built on W&B from the runs uploaded there: the sweep's own, and, after a warm
    start, its reused rows' runs, which are the earlier sweep's, in its folder."""
    if not wandb_has_credentials():
        return "no W&B credentials here: `wandb login` or `export WANDB_API_KEY=...`"
    if not (Path(sweep_dir) / RESULTS_CSV).is_file():
        return f"no {RESULTS_CSV} in {sweep_dir}: the Report is built from it"
    offline = unsynced_runs(sweep_dir)
    try:
        reused = unsynced_reused(read_results(Path(sweep_dir) / RESULTS_CSV))
    except (OSError, ValueError):  # a damaged results.csv: the Report's build says it
        reused = {}
    if not offline and not reused:
        return None
    commands = (
        [wandb_sync_hint(sweep_dir).command or f"{wandb_command()} sync {sweep_dir / 'wandb'}"]
        if offline
        else []
    ) + [sync_line(runs) for runs in reused.values()]
    theirs = sum(map(len, reused.values()))
    of_reused = (
        f" ({theirs} of them the reused rows' runs, the earlier sweep's, in "
        + ", ".join(str(folder / "wandb") for folder in reused)
        + ")"
        if theirs
        else ""
    )
    return (
        f"{len(offline) + theirs} of the sweep's W&B runs ran offline and are not "
        f"uploaded{of_reused}, and a W&B Report shows only uploaded runs: upload them first "
        f"({'; '.join(commands)})"
    )


def add_target_args(p: Any) -> None:
    """The report commands' ``--entity``, ``--project`` and ``--group`` (an argparse parser)."""
    p.add_argument(
        "--entity", help="W&B entity (default: the runs' where they name one, else the API key's)"
    )
    p.add_argument(
        "--project",
        help="W&B project (default: the one the sweep's runs logged to, read from their records; "
        "without any, memory-attention)",
    )
    p.add_argument(
        "--group",
        help="W&B group (default: the one the sweep's runs logged to; without any, the folder's "
        "name)",
    )
