"""The stages of a launch up to its reports, each a function of the launch's state
(:class:`~sweeps.driver.launch_state.Launch`), in the order :mod:`sweeps.driver.pipeline` runs them:

1. :func:`check_output` -- what ``--resume`` continues, the output and storage, W&B's mode;
2. :func:`start_budget` -- the budget's meter, or a stop when a resumed sweep's budget is spent;
3. :func:`prepare_data` -- the tokenizer and token caches, once for all trials;
4. :func:`join_ray` -- join or start Ray, check what the cluster can hold, the trials' settings;
5. :func:`train` -- the one Tune experiment (or nothing, when a warm start reuses every trial);
6. :func:`time_models` -- each finished model timed alone (:mod:`sweeps.timing`);
7. :func:`reuse_warm` -- the rows and plans of the trials a warm start reuses;
8. :func:`confirm` -- the chosen configurations retrained on fresh seeds;
9. :func:`evaluate_heldout` -- the chosen trials once on the test split (:mod:`sweeps.heldout`);
10. :func:`publish` -- the confirm and per-configuration figures in W&B and Optuna.

The results stage (:mod:`sweeps.stages.results`) then writes results.csv and results.md from what is
done. A stage returns None, or the launcher's exit status when the launch ends there.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from sweeps.driver.budget import EXIT_BUDGET, budget_meter, trial_rates
from sweeps.driver.cluster import LaunchError, check_cluster, check_writable, init_ray
from sweeps.driver.experiment import (
    holds_sweep,
    make_settings,
    nothing_to_resume,
    only_launch_files,
    run_tune,
)
from sweeps.driver.launch_state import Launch
from sweeps.driver.preemption import StopRequested
from sweeps.driver.resume_check import check_before_resume
from sweeps.heldout.stage import evaluate_chosen_trials, publish_heldout, stopped_rows
from sweeps.integrations.wandb_env import resolve_wandb_mode
from sweeps.integrations.wandb_runs import add_run_summary
from sweeps.layout import OPTUNA_JOURNAL
from sweeps.plan.warm import PLAN_HASH, plan_fingerprint
from sweeps.report.results import TIMING_COLUMNS, result_rows
from sweeps.search.base import record_timings
from sweeps.search.configs import publish_configurations
from sweeps.spec import save_launch
from sweeps.stages.confirm import confirm_stage, publish_confirm
from sweeps.timing.stage import time_finished_trials
from sweeps.trial.build import prepare_data as prepare_task_data


def check_output(launch: Launch) -> None:
    """What ``--resume`` continues is there and whole (known before Ray starts), the output and
    storage folders are writable, W&B's mode is settled, and ``launch.json`` records the run's
    overrides."""
    sweep, args, paths, out_dir = launch.sweep, launch.args, launch.paths, launch.out_dir
    if args.resume and "://" not in paths.storage:
        experiment = paths.experiment(sweep.name)
        if not holds_sweep(experiment):
            raise LaunchError(nothing_to_resume(experiment))
        for repair in check_before_resume(out_dir, Path(experiment)):
            print(f"repaired: {repair}", flush=True)
    check_writable(paths.output, "--output")
    if launch.spec.storage.path:
        check_writable(launch.spec.storage.path, "storage.path")
    launch.mode = resolve_wandb_mode(launch.spec.wandb.mode)
    os.environ["WANDB_MODE"] = launch.mode
    os.environ.setdefault("WANDB_SILENT", "true")
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.resume or only_launch_files(out_dir):
        # a new sweep: what --resume will reuse; a resume: the first run's overrides, with the
        # budget this resume gave (if any)
        save_launch(out_dir, args.overrides, launch.profile)


def start_budget(launch: Launch) -> int | None:
    """The launch's budget meter; :data:`EXIT_BUDGET` when a resumed sweep's is spent."""
    launch.meter = budget_meter(launch.sweep, launch.out_dir, launch.args.resume, launch.launch_cmd)
    return EXIT_BUDGET if launch.meter is None else None


def prepare_data(launch: Launch) -> None:
    """Each task's data prepared once, in the driver, before any trial starts."""
    tasks = [p.task for p in launch.sweep.plans]
    if any(task["name"] != "copy" for task in tasks):
        print(
            "preparing the data (tokenizer and token caches, once for all trials) ...", flush=True
        )
    try:
        prepare_task_data(tasks)
    except (FileNotFoundError, ValueError, ImportError) as exc:
        raise LaunchError(f"preparing the data failed: {exc}") from None


def join_ray(launch: Launch) -> None:
    """Join or start Ray, check what the cluster can hold, and settle the trials' settings."""
    # Only non-secret settings travel to the workers; the API key stays in each node's environment.
    env = {"WANDB_MODE": launch.mode, "WANDB_SILENT": "true"}
    env["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
    args = launch.args
    try:
        conn = init_ray(
            args.address,
            {"env_vars": env},
            num_cpus=args.num_cpus,
            dashboard=launch.spec.resources.workers > 1,
        )
    except SystemExit as exc:  # ray.init's own SIGTERM handler, while it starts
        if exc.code != signal.SIGTERM:
            raise
        launch.stop.note("SIGTERM")
        raise StopRequested from None
    launch.stop.arm()  # ray.init took SIGTERM for itself
    launch.fit = check_cluster(launch.sweep, launch.paths, conn.address)
    launch.settings = make_settings(launch.plan, launch.mode, launch.fit)
    launch.meter.rates = trial_rates(launch.settings.resources)  # as placed: no GPU, none charged


def train(launch: Launch) -> None:
    """The sweep's Tune experiment, run or resumed; the rows and plans of its trials. Tune takes
    Ctrl-C (and the SIGINT a preemption or the budget sends) itself and returns normally: the
    unfinished or never-started trials are how the launch knows it was cut."""
    sweep, warm = launch.sweep, launch.warm
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
    except KeyboardInterrupt:
        launch.interrupted, grid = True, []
    launch.grid = grid
    launch.interrupted |= launch.guard.fault is not None  # the unfinished continue on --resume
    if grid:
        # warm_start: the trials an earlier sweep finished are reused, not trained again
        expected = sweep.num_trials - (warm.reused_count if warm else 0)
        launch.interrupted |= (
            len(grid) > grid.num_terminated + grid.num_errors or len(grid) < expected
        )
        launch.rows, launch.plans = result_rows(grid, launch.settings.plan, launch.spec.parameters)
        for row in launch.rows:  # what a later warm start compares its plans with
            row[PLAN_HASH] = plan_fingerprint(launch.plans[row["trial_id"]][0])


def time_models(launch: Launch) -> None:
    """Each finished trial's model timed alone, between measurements watching for a stop; the
    figures published beside the trial's own once every model is timed."""
    cut = time_finished_trials(
        launch.rows, launch.plans, launch.out_dir, launch.spec.timing, watch=launch
    )
    if cut:  # the models not timed are timed by --resume
        launch.interrupted = True
        return
    publish_timings(launch.rows, launch.settings, launch.journal)


def reuse_warm(launch: Launch) -> None:
    """warm_start: the earlier sweep's trials, as they were (and their plans, so the held-out
    stage can test them)."""
    if launch.warm is not None:
        launch.rows += launch.warm.rows()
        launch.plans.update(launch.warm.plans(launch.sweep, launch.out_dir))


def confirm(launch: Launch) -> None:
    """The chosen configurations retrained on the fresh ``confirm_seeds``."""
    more, plans, cut = confirm_stage(
        launch.sweep,
        launch.paths,
        launch.settings,
        launch.fit,
        launch.rows,
        launch.args.verbose,
        launch.guard,
        launch.meter,
    )
    launch.rows += more
    launch.plans.update(plans)
    launch.interrupted |= cut


def evaluate_heldout(launch: Launch) -> None:
    """The trials chosen on validation, evaluated once each on the test split (the GPU share the
    cluster check settled on: ``settings.spec``), watching for a stop between evaluations."""
    tested = evaluate_chosen_trials(
        launch.rows, launch.plans, launch.out_dir, launch.settings.spec, watch=launch
    )
    if stopped_rows(launch.rows):  # the evaluations left are made by --resume
        launch.interrupted = True
        return
    reused = launch.warm.reused_ids() if launch.warm else ()
    here = {t: v for t, v in tested.items() if t not in reused}
    publish_heldout(here, launch.settings, launch.journal)


def publish(launch: Launch) -> None:
    """The confirm figures, and each configuration's aggregate beside its seeds' runs."""
    if launch.spec.confirm_seeds and not launch.interrupted:
        journal = launch.out_dir / OPTUNA_JOURNAL
        publish_confirm(launch.rows, launch.settings, journal, launch.sweep)
    if launch.spec.per_configuration and launch.grid:
        publish_configurations(launch.rows, launch.settings, launch.spec)


def publish_timings(rows: list[dict], settings: Any, journal: Path | None) -> None:
    """The timing stage's figures beside what the trial recorded while it trained: in the summary
    of its W&B run (reopened by id online, written into its run log offline) and in its Optuna
    study (:func:`sweeps.search.base.record_timings`). A failure to reach one is said, not fatal."""
    timings = {}
    for row in rows:
        # plain values (attach_timing, attach_train_cost)
        values = {c: row[c] for c in TIMING_COLUMNS if row.get(c) is not None}
        if not values:
            continue
        timings[row["trial_id"]] = values
        if settings.wandb.mode == "disabled":
            continue
        try:
            add_run_summary(
                settings.wandb.mode,
                settings.wandb_dir,
                row["trial_id"],
                values,
                project=settings.wandb.project,
                entity=settings.wandb.entity,
            )
        except Exception as exc:  # noqa: BLE001 -- a W&B problem must not lose the results
            print(
                f"[timing] trial {row['trial_id']}: could not add the timing figures to its W&B "
                f"run: {exc}",
                file=sys.stderr,
            )
    if journal is not None and timings and journal.exists():
        record_timings(str(journal), timings)
