"""Confirmation on fresh seeds (``seeds: {values: [...], confirm: [...]}``): after selection, each
cell's chosen configuration (:func:`sweeps.report.selection.chosen_configurations`) is trained again
once per ``confirm`` seed, seeds the search never saw, so the figure reported for it carries no
selection at all: neither the choice among Optuna's samples nor the luck of the selection seeds.

The confirm trials are a second, small Tune experiment, ``<storage>/<name>/confirm`` (no Optuna, no
early stopping: each trains its full length), run after the search and before the held-out stage,
which then evaluates them on the test split as it does the chosen trials. Their rows in results.csv
have ``role: confirm`` (the others ``role: select``) and are never chosen nor part of a selection
summary; results.md puts their validation and test figures beside the selection seeds'
(:mod:`sweeps.report.heldout`). ``--resume`` restores the confirm experiment: finished confirm
trials are not trained again, unfinished ones continue from their checkpoints. Where the choice
changed since the confirm trials started (a ``--resume`` whose errored trials finished and beat
the earlier choice), the confirm experiment of the new choice is ``confirm-<digest>`` beside it
(:func:`confirm_experiment`): the earlier folder is kept as it was, its trials no longer reported,
since they retrained a configuration that is no longer the chosen one.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from ray import tune

from sweeps.driver.budget import charging
from sweeps.driver.budget_clock import BudgetClock
from sweeps.driver.cluster import ClusterFit
from sweeps.driver.console import quiet_unreported, tune_reporter
from sweeps.driver.trial_logs import KeepTrialLogs, ProgressCSV
from sweeps.plan.sweep_plan import Paths
from sweeps.plan.units import Unit
from sweeps.plan.warm_start import fingerprint_rows
from sweeps.report.results import result_rows
from sweeps.report.selection import CONFIRM, ROLE, SELECT, chosen_configurations, mark_chosen
from sweeps.schedulers.lost_nodes import failures_allowed
from sweeps.schedulers.per_unit import SweepFIFO
from sweeps.search.compose import per_unit_searcher
from sweeps.spec import Sweep
from sweeps.spec.launch_record import code_versions
from sweeps.stages.launch_state import Launch
from sweeps.stages.train import (
    console,
    earlier_rows,
    make_trainable,
    new_tuner,
    read_back,
    reported_since,
)
from sweeps.storage import StorageGuard
from sweeps.trial.settings import TrialSettings

#: the confirm experiment's folder, inside the sweep's experiment folder
CONFIRM_EXPERIMENT = "confirm"


def confirm_configs(sweep: Sweep, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Tune configs of the confirm trials: per cell with a chosen configuration (in grid order)
    and per confirm seed, the cell's config with the chosen values, ``role: confirm`` and (over
    seeds) the configuration's number."""
    spec = sweep.spec
    chosen = chosen_configurations(
        rows, spec.metric.name, spec.metric.mode, spec.seed_objective, spec.parameters
    )
    flat = {key: name for name, key in sweep.param_columns.items()}
    base = {}
    for plan in sweep.plans:
        base.setdefault(plan.cell.name, plan)
    configs = []
    for cell in sweep.cells:
        choice = chosen.get(cell.name)
        if choice is None:
            continue
        for seed in spec.confirm_seeds:
            config = {**base[cell.name].trial_config(sweep.grid_columns), "seed": seed}
            config.update({flat[k]: v for k, v in choice["params"].items() if k in flat})
            config[ROLE] = CONFIRM
            if choice["configuration"] is not None:
                config["configuration"] = choice["configuration"]
            configs.append(config)
    return configs


def choice_keys(configs: list[dict[str, Any]], params: list[str]) -> set[tuple]:
    """What a confirm trial retrains, per config: its cell, its seed and the chosen values of the
    searched ``params`` (Tune's config names), numbers as floats (a value read back from Tune's
    state or from results.csv compares equal whatever its type)."""

    def value(v: Any) -> Any:
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else repr(v)

    return {
        (c.get("cell"), value(c.get("seed")), tuple((k, value(c.get(k))) for k in sorted(params)))
        for c in configs
    }


def confirm_experiment(
    parent: str, trainable: Any, configs: list[dict[str, Any]], params: list[str]
) -> tuple[str, set[str]]:
    """The folder of the confirm experiment that retrains ``configs``, and the trial ids of the
    confirm trials no longer reported: ``confirm`` (none) where it is new or its trials so far
    retrain these choices; where the choice changed since ``confirm`` started,
    ``confirm-<digest of the choices>`` (restored on a later ``--resume`` as ``confirm`` is), the
    ids of ``confirm``'s trials (which results.csv must not keep: :func:`keep_finished`), and a
    line that says so."""
    path = parent.rstrip("/") + "/" + CONFIRM_EXPERIMENT
    if not tune.Tuner.can_restore(path):
        return path, set()
    try:
        with quiet_unreported():
            grid = tune.Tuner.restore(path, trainable=trainable).get_results()
        started = [r.config or {} for r in grid]
        ids = {str(r.metrics["trial_id"]) for r in grid if (r.metrics or {}).get("trial_id")}
    except Exception:  # noqa: BLE001 -- unreadable here: restoring it to train says what it finds
        return path, set()
    wanted = choice_keys(configs, params)
    stale = choice_keys(started, params) - wanted  # (the searcher may not have made them all yet)
    if not stale:
        return path, set()
    digest = hashlib.sha256(json.dumps(sorted(wanted), default=str).encode()).hexdigest()[:8]
    name = f"{CONFIRM_EXPERIMENT}-{digest}"
    cells = sorted({k[0] for k in stale}, key=str)
    print(
        f"confirm: the chosen configuration of {', '.join(map(str, cells))} changed since the "
        f"confirm trials in {CONFIRM_EXPERIMENT}/ started (trials unfinished then have finished "
        f"since): the new choice's confirm trials train in {name}/; {CONFIRM_EXPERIMENT}/ is "
        "kept as it was, its trials no longer reported",
        flush=True,
    )
    return parent.rstrip("/") + "/" + name, ids


def run_confirm(
    sweep: Sweep,
    paths: Paths,
    settings: TrialSettings,
    fit: ClusterFit,
    configs: list[dict[str, Any]],
    verbose: int = 1,
    guard: Any = None,
    meter: Any = None,
):
    """Run (or, when its folder holds one, resume) the confirm experiment; returns its
    ``ResultGrid`` read back from storage, and the ids of an earlier choice's confirm trials no
    longer reported (:func:`confirm_experiment`)."""
    parent = paths.experiment(sweep.name)
    trainable = make_trainable(settings)
    path, superseded = confirm_experiment(parent, trainable, configs, list(sweep.param_columns))
    if tune.Tuner.can_restore(path):
        print(f"resuming the confirm trials in {path}: finished ones are kept", flush=True)
        with quiet_unreported():  # restoring reads the results: trials that never reported
            tuner = tune.Tuner.restore(
                path, trainable=trainable, resume_unfinished=True, resume_errored=True
            )
    else:
        index = {c.name: i for i, c in enumerate(sweep.cells)}
        steps = {p.cell.name: p.trainer.get("max_steps") for p in sweep.plans}
        units = [
            Unit(f"{sweep.name}/confirm-{i}", index[c["cell"]], c["seed"], c, steps[c["cell"]])
            for i, c in enumerate(configs)
        ]
        searcher = per_unit_searcher(units, 1, sweep.spec.metric.name, sweep.spec.metric.mode)
        callbacks: list = [BudgetClock(), KeepTrialLogs(), ProgressCSV()]
        if verbose >= 1:
            callbacks.append(console(sweep, len(configs)))
        tuner = new_tuner(
            trainable,
            searcher,
            settings,
            name=path.rstrip("/").rsplit("/", 1)[-1],  # confirm, or confirm-<digest>
            storage_path=parent,
            trials=len(configs),
            concurrent=min(fit.max_concurrent_trials, len(configs)),
            callbacks=callbacks,
            verbose=verbose,
            scheduler=SweepFIFO(),  # a confirm trial whose node is lost moves, as the search's do
        )
    guard = guard or StorageGuard(paths.storage)
    allowed = failures_allowed(settings.spec.failure.max_failures)  # a resumed trial's too
    with guard.watching(), allowed, charging(meter), quiet_unreported(), tune_reporter(verbose):
        tuner.fit()
    return read_back(path, trainable), superseded


def confirm_stage(
    sweep: Sweep,
    paths: Paths,
    settings: TrialSettings,
    fit: ClusterFit,
    rows: list[dict[str, Any]],
    verbose: int = 1,
    guard: Any = None,
    meter: Any = None,
    out_dir: Path | None = None,
    trained: set[str] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any], bool, set[str]]:
    """The launcher's confirm stage, after the search: marks ``rows`` ``role: select``, trains the
    confirm trials and returns their rows (``role: confirm``), their plans and folders by trial id
    (what the held-out stage needs), whether it was cut short (Ctrl-C, a full storage), and the
    ids of an earlier choice's confirm trials, no longer reported. Each
    row names the code that trained it, as the search's rows do (``out_dir``: the sweep's folder,
    whose results.csv and launch.json say which code trained a confirm trial an earlier run
    started); the ones that reported in this run join ``trained``."""

    for row in rows:
        if row.get("trial_id"):
            row.setdefault(ROLE, SELECT)
    spec = sweep.spec
    mark_chosen(
        rows, spec.metric.name, spec.metric.mode, spec.seed_objective
    )  # also without heldout
    configs = confirm_configs(sweep, rows)
    if not configs:
        print("confirm: no cell has a chosen configuration; nothing to retrain", flush=True)
        return [], {}, False, set()
    print(
        f"\nconfirm: retraining each cell's chosen configuration on the fresh seed(s) "
        f"{sweep.spec.confirm_seeds} ({len(configs)} trial(s))",
        flush=True,
    )
    started = time.time()
    grid, superseded = run_confirm(sweep, paths, settings, fit, configs, verbose, guard, meter)
    more, plans = result_rows(grid, settings.plan, sweep.spec.parameters)
    for row in more:
        row[ROLE] = CONFIRM
    earlier = out_dir is not None
    reported = reported_since(grid, started) if earlier else None
    fingerprint_rows(
        more,
        plans,
        [],
        before=earlier_rows(out_dir) if earlier else {},
        codes=code_versions(out_dir) if earlier else None,
        reported=reported,
    )
    if trained is not None:  # their W&B runs get results.csv's status (sweeps.stages.results)
        trained |= reported if reported is not None else {str(r["trial_id"]) for r in more}
    cut = len(grid) > grid.num_terminated + grid.num_errors or (guard is not None and guard.fault)
    return more, plans, bool(cut), superseded


def confirm(launch: Launch) -> None:
    """The chosen configurations retrained on the fresh ``confirm_seeds``."""
    more, plans, cut, superseded = confirm_stage(
        launch.sweep,
        launch.paths,
        launch.settings,
        launch.fit,
        launch.rows,
        launch.args.verbose,
        launch.guard,
        launch.meter,
        launch.out_dir,
        launch.trained,
    )
    launch.rows += more
    launch.superseded |= superseded
    launch.plans.update(plans)
    launch.interrupted |= cut
