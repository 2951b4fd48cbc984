"""A sweep's W&B runs as its W&B Report needs them: where each row's run lives (a warm start's
reused rows are runs of the sweep that trained them, in that sweep's folder), the project and
group the runs logged to (read from their own records), the sweep ids their configs carry and
the runs not uploaded yet."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

from sweeps.integrations.wandb_env import unsynced_runs
from sweeps.integrations.wandb_runs import read_records, run_is_empty, run_log
from sweeps.layout import RESULTS_CSV, wandb_command
from sweeps.report.columns import REUSED
from sweeps.spec.launch_record import sweep_id

#: how many warm starts back a reused row is followed to the sweep that trained it
MAX_CHAIN = 20


def reused_rows(results: Any) -> bool:
    """Whether results.csv holds trials a warm start reused from an earlier sweep."""
    return REUSED in results and results[REUSED].fillna("").astype(str).str.strip().ne("").any()


def reused_origins(results: Any) -> dict[Path, set[str]]:
    """Per sweep folder that trained some of the reused rows, their trial ids. A reused row names
    the folder it was reused from (results.csv's ``reused``); where that folder's row was itself
    reused, the folder it names in turn, up to the sweep that trained it (its W&B run, and the
    ``sweep_id`` in the run's config, are that sweep's)."""
    if not reused_rows(results):
        return {}
    found: dict[Path, set[str]] = {}
    for row in results.to_dict("records"):
        folder = str(row.get(REUSED) or "").strip()
        if folder and folder != "nan":
            found.setdefault(_origin(Path(folder), str(row["trial_id"])), set()).add(
                str(row["trial_id"])
            )
    return found


def _origin(folder: Path, trial_id: str) -> Path:
    """The sweep folder that trained ``trial_id``, from the one a row was reused from."""
    for _ in range(MAX_CHAIN):
        earlier = _reused_from(folder, trial_id)
        if not earlier or Path(earlier) == folder:
            break
        folder = Path(earlier)
    return folder


def _reused_from(folder: Path, trial_id: str) -> str:
    """The folder ``folder``'s own results.csv says ``trial_id`` was reused from, or ""."""
    try:
        with (folder / RESULTS_CSV).open(newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                if row.get("trial_id") == trial_id:
                    return (row.get(REUSED) or "").strip()
    except (OSError, UnicodeDecodeError, csv.Error):
        pass
    return ""


def sweep_ids(sweep_dir: Path, results: Any) -> tuple[list[str] | None, str]:
    """The ``sweep_id``s of the sweep's runs (launch.json's, and, after a warm start, that of each
    sweep that trained a reused row, in its launch.json), with ""; or None, with why, where one
    of them cannot be read (a sweep from a version that recorded none, an earlier folder moved
    away): the Report's panels then cover the whole group."""
    own = sweep_id(sweep_dir)
    if own is None:
        return None, f"{sweep_dir}/launch.json records no sweep_id"
    ids = [own]
    for folder in reused_origins(results):
        theirs = sweep_id(folder)
        if theirs is None:
            return None, (
                f"the sweep_id of the reused rows' sweep cannot be read ({folder}/launch.json)"
            )
        ids += [theirs] if theirs not in ids else []
    return ids, ""


def run_folders(folder: Path, trial_ids: set[str] | None = None) -> list[Path]:
    """The W&B run folders in ``folder/wandb`` (offline ``offline-run-*``, online ``run-*``)
    with something logged, of ``trial_ids`` only where given (a run's id is its trial's id)."""
    found = sorted((folder / "wandb").glob("*run-*-*"))
    return [
        r
        for r in found
        if r.is_dir()
        and (trial_ids is None or r.name.rsplit("-", 1)[-1] in trial_ids)
        and not run_is_empty(r)
    ]


class Target(NamedTuple):
    """Where a sweep's runs logged to, as their own records say, and how many runs said it."""

    project: str
    group: str
    entity: str  # "" for an offline run: the uploading key's entity
    runs: int


def run_target(run_dir: Path) -> Target | None:
    """The project, group and entity a run's record names; None where its log cannot be read."""
    try:
        records = read_records(run_log(run_dir))
    except (OSError, ValueError):  # RunLogError is a ValueError: a log cut short or garbled
        return None
    for record in records:
        if record.WhichOneof("record_type") == "run":
            run = record.run
            return Target(run.project, run.run_group, run.entity, 0)
    return None


def logged_to(sweep_dir: Path, results: Any) -> Target | None:
    """The project and group the sweep's runs logged to (those of its own folder and of its
    reused rows), the one most of them name; None where no run's record can be read."""
    folders = run_folders(sweep_dir) + [
        r for folder, ids in reused_origins(results).items() for r in run_folders(folder, ids)
    ]
    targets = {r.name.rsplit("-", 1)[-1]: t for r in folders if (t := run_target(r))}
    said = Counter(t for t in targets.values() if t.project)  # per run: its parts are one run
    if not said:
        return None
    target, count = said.most_common(1)[0]
    return Target(target.project, target.group, target.entity, count)


def unsynced_reused(results: Any) -> dict[Path, list[Path]]:
    """Per sweep folder holding reused rows' runs, those of its runs not uploaded yet (as the
    launch's ``wandb sync`` line for them names them)."""
    found: dict[Path, list[Path]] = {}
    for folder, ids in reused_origins(results).items():
        runs = [
            folder / "wandb" / name
            for name in unsynced_runs(folder)
            if name.rsplit("-", 1)[-1] in ids
        ]
        if runs:
            found[folder] = runs
    return found


def sync_line(runs: list[Path]) -> str:
    """The ``wandb sync`` command of some runs, one path each."""
    return f"{wandb_command()} sync " + " ".join(str(r) for r in runs)
