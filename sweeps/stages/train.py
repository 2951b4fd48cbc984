"""The ONE Tune experiment of a study, with or without Optuna: the trainable (single-process or
DDP), the searcher that hands out every cell's trials (put together from the plan by
:mod:`sweeps.search.compose`), early stopping within a (cell, seed)
(:mod:`sweeps.schedulers.per_unit`), the console (:mod:`sweeps.driver.console`), and running or
resuming it under ``<storage>/<name>/``.

A trial's config holds only its own plan as flat, readable keys -- ``cell``, ``seed``, the grid
values (``attention``, ``K``, ``length``...) and Optuna's samples (``lr``...) -- so
``ExperimentAnalysis``, ``get_best_config()``, TensorBoard HParams and W&B show them as columns,
and a trial's stored config does not grow with the grid. The sweep's fixed settings reach the
trainables once, through ``tune.with_parameters`` (:class:`sweeps.trial.settings.TrialSettings`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ray import tune

from sweeps.driver.budget import charging
from sweeps.driver.budget_clock import BudgetClock
from sweeps.driver.cluster import ClusterFit, LaunchError
from sweeps.driver.console import SweepConsole, quiet_unreported, tune_reporter
from sweeps.driver.environ import environ_restored
from sweeps.driver.resume_check import restore_trial_files
from sweeps.driver.trial_logs import KeepTrialLogs, ProgressCSV
from sweeps.layout import RESULTS_CSV, already_holds, holds_local_sweep, nothing_to_resume
from sweeps.plan.arrangement import Arrangement
from sweeps.plan.sweep_plan import SweepPlan
from sweeps.plan.warm_start import fingerprint_rows, stop_rules
from sweeps.report.results import read_results, result_rows
from sweeps.schedulers.lost_nodes import failures_allowed
from sweeps.schedulers.per_unit import make_scheduler
from sweeps.search.base import OptunaLinks
from sweeps.search.compose import make_searcher
from sweeps.search.teachers import teacher_callbacks
from sweeps.spec.launch_record import code_versions, sweep_id
from sweeps.stages.launch_state import Launch
from sweeps.storage import StorageGuard
from sweeps.timing.probe import add_estimates
from sweeps.trial.fused.member import member_resources, run_member_trial
from sweeps.trial.fused.roster import RosterFeed, start_roster, stop_roster
from sweeps.trial.settings import TrialSettings
from sweeps.trial.trainable import run_trial


def trial_dirname(trial) -> str:
    label = re.sub(r"[^A-Za-z0-9_.=-]+", "_", str(trial.config.get("cell", "")))[:80]
    return f"{trial.trial_id}_{label}"


def make_settings(plan: SweepPlan, wandb_mode: str, fit: ClusterFit) -> TrialSettings:
    """The settings every trial of the launch shares: the sweep file with what the launch settled
    on written in (the cluster's GPU share, or where the plan arranges the GPUs
    (``resources.gpu: auto``) the arrangement's; W&B's mode), and the plan's fused groups' roster."""
    sweep, spec = plan.sweep, plan.spec
    resources = spec.resources.model_copy(update={"gpu": fit.gpu})
    cells = {p.cell.name: p for p in sweep.plans}
    arranged = arranged_gpus(plan, fit)
    if arranged is not None:
        resources = resources.model_copy(
            update={"gpu": arranged.group_gpu, "cpu": arranged.group_cpu}
            if arranged.groups
            else {"gpu": arranged.lone_gpu, "cpu": arranged.lone_cpu}
        )
        if arranged.graphs:  # the arrangement's graphed steps, in every trial's own plan
            cells = {
                name: dataclasses.replace(p, trainer={**p.trainer, "cuda_graphs": True})
                for name, p in cells.items()
            }
    return TrialSettings(
        spec=spec.model_copy(
            update={
                "resources": resources,
                "wandb": spec.wandb.model_copy(update={"mode": wandb_mode}),
            }
        ),
        wandb_dir=str(plan.out_dir),
        sweep_id=sweep_id(plan.out_dir),
        chaos_dir=str(plan.out_dir / "chaos"),
        # DDP trials: Ray Train run folders (train-<trial id>), where a retried trial finds its checkpoints
        train_storage=plan.paths.experiment(sweep.name) + "/ddp",
        has_search=sweep.has_search,
        cells=cells,
        grid_columns=sweep.grid_columns,
        param_columns=sweep.param_columns,
        # a sweep with fused trials: the name of its run's roster actor (sweeps.trial.fused.roster)
        fusion_roster=(
            f"fusion-roster-{sweep.name}-{uuid.uuid4().hex[:8]}" if plan.fusion.active else None
        ),
        lone=(
            {"cpu": arranged.lone_cpu, "gpu": arranged.lone_gpu}
            if arranged is not None and arranged.groups and arranged.lone
            else None
        ),
    )


def arranged_gpus(plan: SweepPlan, fit: ClusterFit) -> Arrangement | None:
    """The plan's GPU arrangement where it is the launch's: ``resources.gpu: auto`` and GPUs to
    train on (without them the trials train on the CPU, as the cluster check said)."""
    a = plan.arrangement
    return a if a is not None and a.chosen and fit.gpu else None


def trial_resources(settings: TrialSettings) -> dict[str, float]:
    """What Tune reserves per trial: ``cpu`` and a (fractional) ``gpu``. For DDP trials
    (``workers`` > 1) only the trial's driver, one CPU: Ray Train V2 reserves the workers in a
    placement group of its own (a bundle per worker, see :mod:`sweeps.trial.ddp`), so reserving them
    here as well would hold every worker's resources twice."""
    r = settings.resources
    if r.workers > 1:
        return {"cpu": 1}
    res = {"cpu": r.cpu}
    if r.gpu:
        res["gpu"] = r.gpu
    return res


def make_trainable(
    settings: TrialSettings, fn: Callable[[dict, TrialSettings], None] | None = None
):
    """The trainable this sweep's trials run: single-process or DDP (or ``fn``, e.g. the scale
    benchmark's stand-in), with its resources and the sweep-wide settings bound (stored once in
    Ray's object store, not in every trial's config)."""
    resources = trial_resources(settings)
    if fn is None and settings.fusion_roster is not None:  # fused trials (sweeps.trial.fused)
        fn, resources = run_member_trial, member_resources(resources, settings.lone)
    elif fn is None and settings.resources.workers > 1:
        # Ray Train and Lightning at import (seconds): a launch of DDP trials only
        from sweeps.trial.ddp import run_ddp_trial as fn
    elif fn is None:
        fn = run_trial
    return tune.with_resources(tune.with_parameters(fn, settings=settings), resources)


def new_tuner(
    trainable: Any,
    searcher: Any,
    settings: TrialSettings,
    *,
    name: str,
    storage_path: str,
    trials: int,
    concurrent: int | None,
    callbacks: list,
    verbose: int,
    scheduler: Any = None,
) -> tune.Tuner:
    """A Tune run of ``trials`` trials as this project runs them (the search, and the confirm
    stage's retraining): its searcher, trial folders named by cell, finished trials' processes
    reused, failures retried, checkpoints kept, the driver's callbacks, Tune's own reporter only
    at ``verbose`` 2."""
    spec = settings.spec
    return tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=trials,
            max_concurrent_trials=concurrent,
            trial_dirname_creator=trial_dirname,
            # a finished trial's process runs the next one: no new Ray worker importing torch,
            # Lightning and Ray again (~15 s a trial on the loaded 2-core VM, sweep_overhead.py).
            # Single-process trials only; each trial re-seeds and resets what it set (trial_kit)
            reuse_actors=settings.resources.workers == 1,
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=storage_path,
            failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=spec.storage.keep_checkpoints),
            callbacks=callbacks,
            verbose=1 if verbose >= 2 else 0,  # 0/1: our console (sweeps.driver.console) only
        ),
    )


def console(sweep: Any, trials: int) -> SweepConsole:
    """The driver's console for ``trials`` trials of ``sweep``: its grid and sampled columns."""
    return SweepConsole(
        trials,
        list(sweep.grid_columns) + list(sweep.param_columns),
        sweep.spec.metric.name,
        sweep.spec.metric.mode,
        max_steps={p.cell.name: p.trainer.get("max_steps") for p in sweep.plans},
    )


def run_tune(
    plan: SweepPlan,
    settings: TrialSettings,
    fit: ClusterFit,
    resume: bool,
    verbose: int = 1,
    trainable_fn: Callable[[dict, TrialSettings], None] | None = None,
    guard: StorageGuard | None = None,
    meter=None,
):
    """Run (or resume) the sweep's Tune experiment; returns its ``ResultGrid``, read back from
    storage. ``trainable_fn`` replaces the trainable (the scale benchmark's stand-in). ``guard``
    watches for a full or read-only storage (:mod:`sweeps.storage`): when it sees one, the
    experiment stops as on Ctrl-C, and the grid is whatever can still be read back (None if
    nothing can). ``meter`` charges the run's time to the sweep's budget (:mod:`.budget`)."""
    sweep, paths = plan.sweep, plan.paths
    path = paths.experiment(sweep.name)
    trainable = make_trainable(settings, trainable_fn)
    if resume and not tune.Tuner.can_restore(path) and not holds_sweep(path):
        raise LaunchError(nothing_to_resume(path))
    if resume and tune.Tuner.can_restore(path):
        with quiet_unreported():  # restoring reads the results: trials that never reported
            tuner = tune.Tuner.restore(
                path, trainable=trainable, resume_unfinished=True, resume_errored=True
            )
        ended = finished_before(tuner, plan.to_train)
        if ended is not None:  # Tune would run no step: its results are the saved ones
            print(
                f"nothing to resume in training: every trial ({len(ended)}) finished in an earlier "
                f"run of this sweep; their results are as they were",
                flush=True,
            )
            return ended
        print(
            f"resuming {path}: finished trials are kept, unfinished and errored ones continue from their checkpoints"
        )
    else:
        if not resume and holds_sweep(path):
            raise LaunchError(already_holds(path))
        searcher = make_searcher(plan, settings.wandb.mode)
        # warm_start: the trials an earlier sweep finished are reused, not trained again
        to_train = plan.to_train
        # a fused group holds one trial's resources: the cap counts groups' worth of member trials;
        # the searcher keeps it itself, not counting trials paused at a rung (sweeps.search.base)
        concurrent = min(fit.max_concurrent_trials * plan.trials_per_slot, max(1, to_train))
        callbacks: list = [OptunaLinks(searcher)] if sweep.has_search else []
        callbacks += teacher_callbacks(searcher)  # teachers' checkpoints for their students
        callbacks += [BudgetClock(), KeepTrialLogs(), ProgressCSV()]
        if settings.fusion_roster is not None:  # the members Tune ended, for their groups
            callbacks.append(RosterFeed())
        if verbose >= 1:
            callbacks.append(console(sweep, to_train))
        tuner = new_tuner(
            trainable,
            searcher,
            settings,
            name=sweep.name,
            storage_path=paths.storage,
            trials=to_train,
            concurrent=concurrent,
            callbacks=callbacks,
            verbose=verbose,
            scheduler=make_scheduler(sweep, searcher),
        )
    guard = guard or StorageGuard(paths.storage)
    if settings.fusion_roster is not None:
        start_roster(settings.fusion_roster)
    with (
        guard.watching(),
        failures_allowed(settings.spec.failure.max_failures),  # this run's, a resumed trial's too
        charging(meter),
        quiet_unreported(),
        one_pending(settings),
        tune_reporter(verbose),
    ):
        try:
            grid = tuner.fit()
        except Exception as exc:
            if not guard.note(exc) and not guard.fault:
                raise
            grid = guard.results_after_fault(path, tuner.get_results)
        finally:
            stop_roster()  # and every group it made
    if guard.fault:  # the state Tune saved on the failed storage is older than the one it holds
        return grid
    # Read the results back from storage: after a SIGINT Tune returns normally, and only the saved
    # state says which trials are unfinished (PENDING).
    return read_back(path, trainable)


def finished_before(tuner: tune.Tuner, trials: int) -> Any:
    """A restored experiment's ``ResultGrid`` where its saved state holds every trial the launch
    trains (``trials``), each finished (TERMINATED: not an errored one, which a resume runs
    again): Tune, handed every trial it may create and none to run, would end at once. None
    otherwise (or where the saved results cannot be read)."""
    try:
        grid = tuner.get_results()
    except Exception:  # noqa: BLE001 -- unreadable here: Tune's own run says what it finds
        return None
    return grid if len(grid) >= trials and grid.num_terminated == len(grid) else None


def read_back(path: str, trainable: Any) -> Any:
    """The experiment's ``ResultGrid`` as the state Tune saved at ``path`` has it."""
    with quiet_unreported():
        return tune.Tuner.restore(path, trainable=trainable).get_results()


#: Tune's setting of how many trials may wait for resources at once (read when its run starts)
PENDING_ENV = "TUNE_MAX_PENDING_TRIALS_PG"


@contextmanager
def one_pending(settings: TrialSettings) -> Iterator[None]:
    """For fused trials, one trial waiting for resources at a time. A group trains once all its
    members run, and each member holds 1/n of the group's resources: with several trials
    waiting, Tune gave freed resources (a finished trial's reused process, above all) to members
    of other groups, and on 2 CPUs four members of four groups of two held every CPU while their
    partners waited, for good. Handed out group by group (:mod:`sweeps.search.fused`) and placed
    one at a time, at most one group is partly placed, and the whole groups' ending frees what it
    needs."""
    if settings.fusion_roster is None:
        yield
        return
    with environ_restored([PENDING_ENV]):
        os.environ[PENDING_ENV] = "1"
        yield


def holds_sweep(path: str) -> bool:
    """Whether ``path`` (a sweep's experiment folder, local or in a bucket) holds a sweep's files."""
    if "://" in path:
        return tune.Tuner.can_restore(path)
    return holds_local_sweep(Path(path))


def saved_grid(launch: Launch) -> Any:
    """The trials as Tune's last saved state has them (their ids, last reports and checkpoints),
    where a second Ctrl-C stopped Tune before its final save (the trials' reports it had not
    copied to the storage yet are taken from its staging copy first); empty where nothing can be
    read."""
    path = launch.paths.experiment(launch.sweep.name)
    try:
        if "://" not in path:  # the reports Tune had not copied yet, from its staging copy
            restore_trial_files(Path(path))
        return read_back(path, make_trainable(launch.settings, None))
    except Exception:  # noqa: BLE001 -- no saved state yet: the plan's rows say what was planned
        return []


def train(launch: Launch) -> None:
    """The sweep's Tune experiment, run or resumed; the rows and plans of its trials. Tune takes
    Ctrl-C (and the SIGINT a preemption or the budget sends) itself and returns normally: the
    unfinished or never-started trials are how the launch knows it was cut."""
    sweep, warm = launch.sweep, launch.warm
    started = time.time()
    try:
        if warm is not None and warm.reused_count >= sweep.num_trials:
            print("every planned trial is reused from the warm start: nothing to train", flush=True)
            grid = []
        else:
            grid = run_tune(
                launch.plan,
                launch.settings,
                launch.fit,
                resume=launch.args.resume,
                verbose=launch.args.verbose,
                guard=launch.guard,
                meter=launch.meter,
            )
    except KeyboardInterrupt:  # Ctrl-C twice: Tune stopped at once, without its last save
        launch.interrupted, grid = True, saved_grid(launch)
    launch.grid = grid
    launch.interrupted |= launch.guard.fault is not None  # the unfinished continue on --resume
    if grid:
        # warm_start: the trials an earlier sweep finished are reused, not trained again
        expected = sweep.num_trials - (warm.reused_count if warm else 0)
        launch.interrupted |= (
            len(grid) > grid.num_terminated + grid.num_errors or len(grid) < expected
        )
        launch.rows, launch.plans = result_rows(grid, launch.settings.plan, launch.spec.parameters)
        add_estimates(launch.rows, launch.plans, launch.out_dir)  # what Optuna was told
        launch.trained = (
            reported_since(grid, started)
            if launch.args.resume
            else {str(r["trial_id"]) for r in launch.rows if r.get("trial_id")}
        )
        # what a later warm start compares its plans with (a student's names its teacher's)
        fingerprint_rows(
            launch.rows,
            launch.plans,
            warm.rows() if warm is not None else [],
            stop_rules(launch.spec),
            earlier_rows(launch.out_dir) if launch.args.resume else {},
            code_versions(launch.out_dir),
            reported_since(grid, started) if launch.args.resume else None,
        )


def reported_since(grid, started: float) -> set[str]:
    """The trials of a Tune ``ResultGrid`` whose last report came at or after ``started`` (this
    run's start): those this run trained (Tune stamps each report, whole seconds)."""
    return {
        str(r.metrics["trial_id"])
        for r in grid
        if r.metrics and r.metrics.get("trial_id") and r.metrics.get("timestamp", 0) >= int(started)
    }


def earlier_rows(out_dir: Path) -> dict[str, dict[str, Any]]:
    """The sweep's rows of its earlier runs (its results.csv, not yet rewritten), by trial id; {}
    where there is none or it cannot be read (the trials' fingerprints are then this code's)."""
    try:
        old = read_results(out_dir / RESULTS_CSV)
    except (OSError, ValueError):
        return {}
    if old.empty or "trial_id" not in old:
        return {}
    return {
        str(r["trial_id"]): {k: v for k, v in r.items() if not (isinstance(v, float) and v != v)}
        for r in old.to_dict("records")
        if isinstance(r.get("trial_id"), str)
    }


def reuse_warm(launch: Launch) -> None:
    """warm_start: the earlier sweep's trials, as they were (and their plans, so the held-out
    stage can test them)."""
    if launch.warm is not None:
        launch.rows += launch.warm.rows()
        launch.plans.update(launch.warm.plans(launch.sweep, launch.out_dir))
