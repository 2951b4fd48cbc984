"""What the stages after the Tune run measured, put where each trial's own figures already are:
the summary of its W&B run (reopened by id online, written into its run log offline) and its Optuna
study's user attributes (a told trial is frozen, so figures go on the study, keyed by the trial's
number). One publisher (:func:`publish_figures`) for the timing stage's figures, the held-out
stage's test figures, a configuration's aggregate over its seeds and the confirm stage's; a failure
to reach W&B or Optuna is said, never fatal: the results are written all the same."""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from sweeps.heldout.evaluate import TEST_COLUMNS
from sweeps.integrations.wandb_runs import (
    add_run_summary,
    offline_run_dirs,
    open_failed_run,
    run_problem,
)
from sweeps.layout import OPTUNA_JOURNAL
from sweeps.report.columns import ESTIMATE_COLUMNS
from sweeps.report.results import TIMING_COLUMNS
from sweeps.report.selection import CONFIRM, FINISHED, ROLE, aggregate, is_confirm
from sweeps.stages.launch_state import Launch
from sweeps.trial.wandb_run import run_arguments


def publish_figures(
    figures: Mapping[str, Mapping[str, Any]],
    settings: Any,
    journal: Path | None,
    attr: str | None,
    what: str,
    more: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """``figures`` (by Ray trial id) into each trial's W&B run summary and, with ``attr``, onto
    its Optuna study as the user attribute ``attr`` (:func:`record_trial_attrs`). ``what`` names
    them in a line that says a trial's W&B run could not be reached. ``more``: values by trial id
    that go into the run's summary beside them, not into the study."""
    if settings.wandb.mode != "disabled":
        for tid, values in figures.items():
            try:
                add_run_summary(
                    settings.wandb.mode,
                    settings.wandb_dir,
                    tid,
                    {**values, **((more or {}).get(str(tid)) or {})},
                    project=settings.wandb.project,
                    entity=settings.wandb.entity,
                )
            except Exception as exc:  # noqa: BLE001 -- a W&B problem must not lose the results
                print(
                    f"[{what}] trial {tid}: could not add the {what} figures to its W&B run: {exc}",
                    file=sys.stderr,
                )
    if attr is not None and figures and journal is not None and journal.exists():
        record_trial_attrs(str(journal), attr, {k: dict(v) for k, v in figures.items()})


def publish_timings(rows: list[dict], settings: Any, journal: Path | None) -> set[str]:
    """The timing stage's figures (decode time, the training step, the peaks) of every timed row,
    as the study attribute ``decode_timing``, and with its results.csv status and step into its
    W&B run (one reopening of an online run for both); returns the trial ids published."""
    timings = {}
    for row in rows:
        values = {c: row[c] for c in TIMING_COLUMNS if row.get(c) is not None}
        if values:
            timings[row["trial_id"]] = values
    publish_figures(timings, settings, journal, "decode_timing", "timing", with_status(rows))
    return {str(t) for t in timings}


def with_status(rows: list[dict]) -> dict[str, dict[str, Any]]:
    """Each row's results.csv ``status`` and ``step``, by trial id, for its W&B run's summary
    (W&B's own state says "finished" of a cut run too)."""
    return {str(r["trial_id"]): status_of(r) for r in rows if r.get("trial_id")}


def status_of(row: dict) -> dict[str, Any]:
    """A row's ``status``, ``step`` and ``error``, as its W&B run's summary takes them (an error
    the run's first attempt was given, by :func:`publish_failed`, cleared where the trial's
    outcome has none)."""
    error = row.get("error")
    return {
        "status": str(row.get("status")),
        "step": _number(row.get("step")),
        "error": error if isinstance(error, str) and error else None,
    }


def stopped_figures(
    rows: list[dict],
    statuses: tuple[str, ...],
    metric: str,
    trained: Collection[str] = (),
) -> dict[str, dict[str, Any]]:
    """What results.csv says of each trial a stop left (its status in ``statuses``), by Ray trial
    id: its reported metrics (``val/...``, ``train/...``; the sweep's ``metric`` always), each None
    where it reported none; and of each trial that reported in this launch (``trained``) and of
    those, its ``status`` and ``step`` (W&B's own state says "finished" of a cut run too: a
    resume that continues the trial writes its status again when it ends) and the probe figures
    its Optuna trial was told (:func:`estimates_of`; the timing stage publishes them with its
    own, where it runs)."""
    figures: dict[str, dict[str, Any]] = {}
    for row in rows:
        tid = row.get("trial_id")
        if not tid or (row.get("status") not in statuses and str(tid) not in trained):
            continue
        values = {**status_of(row), **estimates_of(row)}
        if row.get("status") in statuses:
            keys = sorted({metric, *(k for k in row if k.startswith(("val/", "train/")))})
            values.update({key: _number(row.get(key)) for key in keys})
        figures[str(tid)] = values
    return figures


def estimates_of(row: dict) -> dict[str, float]:
    """A row's probe figures (``<figure>_estimate``: what a multi-objective sweep's Optuna trial
    was told), those it has."""
    return {c: v for c in ESTIMATE_COLUMNS if (v := _number(row.get(c))) is not None}


def _number(value: Any) -> float | None:
    """``value`` as a float, or None where it is missing or NaN."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number


def publish_stopped(
    rows: list[dict], settings: Any, statuses: tuple[str, ...], trained: Collection[str] = ()
) -> None:
    """Make the W&B summary of each trial a stop left, and of each trial this launch trained
    (``trained``), say what results.csv says of it (:func:`stopped_figures`): its status, and for
    one a stop left its figures: a stop can land after a trial logged a validation to W&B and
    before Tune took its report (the fit's last report waits for the W&B run to close), and
    results.csv, and a resume, go on from the report before. Trials that never started a run are
    passed over, and offline runs that would not upload whole (no log, or never closed): the
    upload hint names them."""
    figures = stopped_figures(rows, statuses, settings.spec.metric.name, trained)
    local = Path(settings.wandb_dir) / "wandb"  # online runs keep a local folder too
    for tid in list(figures):
        if settings.wandb.mode == "offline":
            folders = offline_run_dirs(local, tid)
            if not folders or run_problem(folders[-1]) is not None:
                figures.pop(tid)
        elif not any(local.glob(f"run-*-{tid}")):  # never started: no run to reopen
            figures.pop(tid)
    publish_figures(figures, settings, None, None, "stop")


def publish_failed(
    rows: list[dict], settings: Any, plans: Mapping[str, Any], names: Mapping[str, str]
) -> int:
    """A W&B run for each trial that failed before it opened its own (its data or model could not
    be built, a GPU its torch cannot use, its teacher failed): its config and name as the trial
    would have made them (``plans``: {trial id: (plan, folder)}; ``names``: Tune's trial names),
    results.csv's ``status`` and ``error`` in its summary, state failed. So W&B lists every trial
    results.csv does. A trial with a run already (a later failure, an earlier launch's) is left as
    it is. Returns how many runs were opened."""
    if settings.wandb.mode not in ("offline", "online"):
        return 0
    local = Path(settings.wandb_dir) / "wandb"  # online runs keep a local folder too
    opened = 0
    for row in rows:
        tid = str(row.get("trial_id") or "")
        if row.get("status") != "error" or tid not in plans:
            continue
        if offline_run_dirs(local, tid) or any(local.glob(f"run-*-{tid}")):
            continue
        plan = plans[tid][0]
        arguments = run_arguments(settings, plan, tid, names.get(tid, f"run_trial_{tid}"))
        try:
            open_failed_run(arguments, status_of(row))
        except Exception as exc:  # noqa: BLE001 -- a W&B problem must not lose the results
            print(f"[failed] trial {tid}: could not open its W&B run: {exc}", file=sys.stderr)
            continue
        opened += 1
    return opened


def publish_heldout(
    results: Mapping[str, Mapping[str, float]],
    settings: Any,
    journal: Path | None,
    dropped: Collection[str] = (),
) -> None:
    """The held-out stage's test figures (``test/bleu`` ...), as the study attribute ``heldout``.
    ``dropped``: trials an earlier launch evaluated whose figures results.csv no longer holds (a
    resume chose another trial): their W&B summaries' test figures become null and their entries
    leave the study attribute."""
    publish_figures(results, settings, journal, "heldout", "heldout")
    if not dropped:
        return
    cleared = {str(t): dict.fromkeys(TEST_COLUMNS) for t in dropped}
    publish_figures(cleared, settings, None, None, "heldout")
    if journal is not None and journal.exists():
        record_trial_attrs(str(journal), "heldout", {}, drop=set(cleared))


def publish_configurations(rows: list[dict], settings: Any, spec: Any) -> dict[str, dict[str, Any]]:
    """Each configuration's aggregate over its seeds (the figure Optuna was told, and the mean)
    into the W&B summary of every one of its seeds' runs: ``configuration/<metric>`` (the
    ``objective``), ``configuration/<metric>_mean``, ``configuration/seeds``. Returns the figures by
    Ray trial id."""
    metric, mode, objective = spec.metric.name, spec.metric.mode, spec.seeds.objective
    groups: dict[tuple, list[dict]] = {}
    for (
        row
    ) in rows:  # a confirm trial (sweeps.stages.confirm) is not one of the configuration's seeds
        if row.get("configuration") is not None and row.get("trial_id") and not is_confirm(row):
            groups.setdefault((row["cell"], row["configuration"]), []).append(row)
    out: dict[str, dict[str, Any]] = {}
    for members in groups.values():
        values = [
            float(r[metric])
            for r in members
            if r.get("status") in FINISHED and r.get(metric) is not None
        ]
        if not values:
            continue
        figures = {
            f"configuration/{metric}": aggregate(values, objective, mode),
            f"configuration/{metric}_mean": sum(values) / len(values),
            "configuration/seeds": len(values),
        }
        for r in members:
            out[r["trial_id"]] = figures
    publish_figures(out, settings, None, None, "configurations")
    return out


def record_trial_attrs(
    journal: str, attr: str, values: dict[str, dict[str, Any]], drop: Collection[str] = ()
) -> int:
    """Put figures measured after the Tune run (by Ray trial id) on each Optuna study as its user
    attribute ``attr``: ``{trial number: figures}`` (a configuration judged over seeds:
    ``{"<number>/seed=<s>": figures}``); the entries of the trials in ``drop`` are taken out.
    Returns how many trials they reached."""
    storage = JournalStorage(JournalFileBackend(journal))
    reached = 0
    values = {**values, **dict.fromkeys(drop)}
    for name in optuna.get_all_study_names(storage):
        study = optuna.load_study(study_name=name, storage=storage)
        found = {}
        trials = study.get_trials(deepcopy=False)
        # a failed trial a resume retried holds the same Ray trial ids as its retry: the retry's
        retried = {t.user_attrs.get("retry_of") for t in trials}
        for t in trials:
            if t.number in retried:
                continue
            # a configuration judged over seeds (sweeps.search.over_seeds) holds one Ray trial per seed
            ids = {"": t.user_attrs.get("ray_trial_id")} | {
                k: v.get("ray_trial_id")
                for k, v in t.user_attrs.items()
                if k.startswith("seed=") and isinstance(v, dict)
            }
            for seed, tid in ids.items():
                if tid in values:
                    found[str(t.number) + (f"/{seed}" if seed else "")] = values[tid]
        if found:
            kept = {**study.user_attrs.get(attr, {}), **found}
            study.set_user_attr(attr, {k: v for k, v in kept.items() if v is not None})
            reached += len(found)
    return reached


def publish_confirm(
    rows: list[dict[str, Any]], settings: Any, journal: Any, sweep: Any
) -> dict[str, dict[str, Any]]:
    """The confirm figures where the sweep's other figures are: in the W&B summary of each confirm
    run, its cell's mean over the confirm seeds (``confirm/<metric>``, ``confirm/test/bleu``,
    ``confirm/seeds``); on each cell's Optuna study (or, per (cell, seed), its seeds' studies) the
    user attribute ``confirm``: the configuration (its number where configurations are judged over
    seeds, and its sampled values), and per confirm seed its trial id, metric and test figures. Returns the cells' entries; a W&B or Optuna problem is said, not fatal."""
    metric = sweep.spec.metric.name
    per_cell: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get(ROLE) != CONFIRM or r.get("status") not in FINISHED:
            continue
        params = {key: r.get(f"param:{key}") for key in sweep.spec.parameters}
        entry = per_cell.setdefault(
            r["cell"], {"configuration": r.get("configuration"), "params": params, "seeds": {}}
        )
        entry["seeds"][str(r["seed"])] = {
            "trial_id": r["trial_id"],
            metric: r.get(metric),
            **{k: r[k] for k in TEST_COLUMNS if r.get(k) is not None},
        }
    for entry in per_cell.values():
        for key in (metric, *TEST_COLUMNS):
            values = [s[key] for s in entry["seeds"].values() if s.get(key) is not None]
            if values:
                entry[f"confirm/{key}"] = sum(values) / len(values)
        entry["confirm/seeds"] = len(entry["seeds"])
    by_trial = {
        seed["trial_id"]: {
            "role": CONFIRM,
            **{k: v for k, v in e.items() if k.startswith("confirm/")},
        }
        for e in per_cell.values()
        for seed in e["seeds"].values()
    }
    publish_figures(by_trial, settings, None, None, "confirm")
    if per_cell and sweep.has_search and journal is not None and journal.exists():
        _record_in_studies(per_cell, journal, sweep)
    return per_cell


def _record_in_studies(per_cell: dict[str, dict[str, Any]], journal: Any, sweep: Any) -> int:
    slugs = {c.name: c.slug for c in sweep.cells}
    storage = JournalStorage(JournalFileBackend(str(journal)))
    reached = 0
    for name in optuna.get_all_study_names(storage):
        suffix = name.split("/", 1)[-1]
        for cell, entry in per_cell.items():
            slug = slugs.get(cell)
            if slug and (suffix == slug or suffix.startswith(f"{slug}-seed")):
                optuna.load_study(study_name=name, storage=storage).set_user_attr("confirm", entry)
                reached += 1
    return reached


def publish(launch: Launch) -> None:
    """The confirm figures, and each configuration's aggregate beside its seeds' runs."""
    if launch.spec.confirm_seeds and not launch.interrupted:
        journal = launch.out_dir / OPTUNA_JOURNAL
        publish_confirm(launch.rows, launch.settings, journal, launch.sweep)
    if launch.spec.per_configuration and launch.grid:
        publish_configurations(launch.rows, launch.settings, launch.spec)
