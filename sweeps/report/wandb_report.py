"""The sweep's W&B Report (``wandb_workspaces.reports.v2``, from the ``wandb-workspaces`` package):
results.md's text as Markdown and panels over the group's runs. ``python -m sweeps.report DIR
--wandb`` builds and saves it (needs an API key and network).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from lightning_modules.metric_names import TEST_BLEU, VAL_BLEU, VAL_LOSS
from sweeps.integrations.wandb_env import unsynced_runs, wandb_has_credentials, wandb_sync_hint
from sweeps.report.findings import seed_sections, smoke_caveat
from sweeps.report.heldout import heldout_sections
from sweeps.report.markdown import pareto_markdown, results_sections
from sweeps.report.results import DECODE_SECONDS
from sweeps.report.selection import CONFIRM, ROLE, SELECT
from sweeps.report.summary import DAGGER


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
    "where its launch recorded one) that took part in the selection "
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
    sweep_id: str | None = None,
    chosen_by: tuple[str, str] | None = None,
    smoke: bool = False,
) -> Any:
    """A ``wandb_workspaces.reports.v2.Report`` for one sweep group (not saved; call ``.save()``).
    ``sweep_id``: the sweep's id (launch.json's), whose runs alone the panels then plot: a smoke
    run or an earlier run of a sweep of the same name shares the group. ``chosen_by`` and
    ``smoke``: as results.md's (the launch's metric for the held-out rows, a smoke run's caveat
    on its findings: :func:`sweeps.report.local.build_local_report`).

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
        this_sweep = f" and Config('sweep_id') == '{sweep_id}'" if sweep_id else ""
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
        ),
    ]
    lengths = 0
    if results is not None:
        for heading, text in results_sections(results, metric, mode):
            blocks += ([wr.H2(text=heading)] if heading else []) + [wr.MarkdownBlock(text=text)]
        for heading, text in seed_sections(results, metric, mode) + heldout_sections(
            results, metric, mode, confirm, chosen_by
        ):  # intervals, findings, paired bootstrap; chosen on validation, reported on test
            text = smoke_caveat(heading, text, smoke)
            blocks += [wr.H2(text=heading), wr.MarkdownBlock(text=text)]
        if "length" in results:
            lengths = results["length"].dropna().nunique()
    elif points is not None and not points.empty:
        blocks += [
            wr.H2(text="Pareto front (BLEU vs decode seconds)"),
            wr.MarkdownBlock(text=pareto_markdown(points)),
        ]
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


def report_problem(sweep_dir: Path) -> str | None:
    """Why a W&B Report of the sweep cannot be built from here, with the fix; None when it can.
    The Report is built on W&B from the runs uploaded there."""
    if not wandb_has_credentials():
        return "no W&B credentials here: `wandb login` or `export WANDB_API_KEY=...`"
    offline = unsynced_runs(sweep_dir)
    if offline:
        hint = wandb_sync_hint(sweep_dir).command or f"wandb sync {sweep_dir / 'wandb'}"
        return (
            f"{len(offline)} of the sweep's W&B runs ran offline and are not uploaded, and a W&B "
            f"Report shows only uploaded runs: upload them first ({hint})"
        )
    return None
