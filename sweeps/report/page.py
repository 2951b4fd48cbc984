"""results.md's text as (heading, Markdown) sections, one list for the page
(:func:`sweeps.report.local.build_local_report`) and the W&B Report
(:func:`sweeps.report.wandb_report.sweep_report`): the preamble (the summary rule, the trial
counts, the fused groups, what the launch's profile set), the notes on how the sweep ran, the
tables, the seed sections and the held-out ones. And what the sweep's launch.json says that they
use: its profile, its metric and the choice its launch made by it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pandas as pd

from sweeps.report.findings import seed_sections, smoke_caveat
from sweeps.report.heldout import heldout_sections
from sweeps.report.ledger import report_section
from sweeps.report.markdown import FAILED_TRIALS, results_sections
from sweeps.spec.launch_record import recorded


def page_sections(
    df: pd.DataFrame,
    confirm: pd.DataFrame | None,
    sweep_dir: Path,
    metric: str,
    mode: str,
    summary: pd.DataFrame | None = None,
) -> list[tuple[str, str]]:
    """results.md's (heading, Markdown) sections before its figures, the first ones with heading
    "" (the preamble, then the profile's note: :func:`run_notes`). ``df``: the selection's rows,
    ``confirm``: the confirm trials' (:func:`sweeps.report.heldout.split_confirm`); ``summary``:
    :func:`sweeps.report.summary.cell_summary` of ``df`` where the caller made it already."""
    sections: list[tuple[str, str]] = []
    for heading, text in results_sections(df, metric, mode, summary):
        sections.append((heading, text))
        if not heading:  # after the preamble: the budget, the trials that lost their node
            sections += run_notes(df, sweep_dir)
    sections = _with_failed_confirm(sections, confirm)
    smoke = launch_profile(sweep_dir) == "smoke"
    for heading, text in seed_sections(df, metric, mode, sweep_dir) + heldout_sections(
        df, metric, mode, confirm, launch_choice(sweep_dir)
    ):  # intervals, findings, paired bootstrap; test
        sections.append((heading, smoke_caveat(heading, text, smoke)))
    return sections


def _with_failed_confirm(
    sections: list[tuple[str, str]], confirm: pd.DataFrame | None
) -> list[tuple[str, str]]:
    """``sections`` with the confirm trials that failed added to its failed trials (a section
    made here when the selection's trials all finished): each with its error, as the launch's
    console line about failed trials promises."""
    if confirm is None or "status" not in confirm:
        return sections
    errors = confirm[confirm["status"] == "error"]
    if errors.empty:
        return sections
    said = errors["error"] if "error" in errors else pd.Series("", index=errors.index)
    lines = "\n".join(
        f"- {cell} seed={seed} (confirm): {error}"
        for cell, seed, error in zip(errors["cell"], errors["seed"], said, strict=True)
    )
    for i, (heading, text) in enumerate(sections):
        if heading == FAILED_TRIALS:
            return [*sections[:i], (heading, text + "\n" + lines), *sections[i + 1 :]]
    return [*sections, (FAILED_TRIALS, lines)]


def run_notes(df: pd.DataFrame, sweep_dir: Path) -> list[tuple[str, str]]:
    """results.md's notes on how the sweep ran, as sections: what the launch's profile set (no
    heading: a paragraph of the preamble), what it spent of its budget and whether the budget ran
    out (:func:`sweeps.report.ledger.report_section`), the finished trials a stop left untimed,
    and the trials that lost their node and continued on another (results.csv's ``moved``)."""
    statuses = df["status"].value_counts().to_dict() if "status" in df else {}
    note = profile_note(sweep_dir)
    sections = [("", note)] if note else []
    spent = report_section(sweep_dir, statuses)
    sections += [("Budget", spent)] if spent else []
    errors = df["timing_error"].fillna("").astype(str) if "timing_error" in df else None
    untimed = df[errors.str.startswith("not timed:")] if errors is not None else df.iloc[0:0]
    if not untimed.empty:  # a stop before the timing stage ended (sweeps.timing.stage.NOT_TIMED)
        sections.append(
            (
                "Not timed yet",
                f"The sweep stopped before {len(untimed)} finished trial(s) were timed: `--resume` "
                "times them (and only them).\n\n"
                + "\n".join(f"- {r.cell} seed={r.seed}" for r in untimed.itertuples()),
            )
        )
    moved = df[df["moved"].fillna(0) > 0] if "moved" in df else df.iloc[0:0]
    if not moved.empty:
        sections.append(
            (
                "Trials that lost their node",
                "Each continued from its last checkpoint on another node; a move is not a failure "
                "(not in `retries`, not charged against `failure.max_failures`).\n\n"
                + "\n".join(f"- {r.cell} seed={r.seed}: {r.moved_why}" for r in moved.itertuples()),
            )
        )
    return sections


def launch_profile(sweep_dir: Path) -> str | None:
    """The profile the sweep was launched with, as its launch.json records it."""
    return recorded(sweep_dir).get("profile")


def sweep_description(sweep_dir: Path) -> str:
    """The sweep file's ``description``, as its launch.json records it ("" without one)."""
    said = recorded(sweep_dir).get("description")
    return said.strip() if isinstance(said, str) else ""


def profile_note(sweep_dir: Path) -> str:
    """``This run's profile smoke sets: ...; then --set ...``, from launch.json: a profile's
    figures are its settings' (a smoke run's tiny model, validated on its first batches), and a
    ``--set``'s, not the sweep file's."""
    said = recorded(sweep_dir).get("profile_sets")
    return f"This run's {said}: its figures are of those settings." if said else ""


def recorded_metric(sweep_dir: Path) -> dict[str, Any]:
    """The sweep's metric as its launch.json records it (``{"name": ..., "goal": ...}``), or {}."""
    with contextlib.suppress(LookupError, TypeError, AttributeError, ValueError):
        return dict(recorded(sweep_dir)["planned"]["metric"])
    return {}


def launch_choice(sweep_dir: Path) -> tuple[str, str] | None:
    """The metric and mode the launch chose its trials by (results.csv's ``chosen``), as its
    launch.json records them; None without a record."""
    said = recorded_metric(sweep_dir)
    goal = {"maximize": "max", "minimize": "min"}.get(said.get("goal", ""))
    return (said["name"], goal) if said.get("name") and goal else None
