"""The stages of a launch, after the command line is read (:mod:`sweeps.launch`): check the
output and storage, prepare the data once, join or start Ray, run the one Tune experiment, time
the finished models alone (:mod:`sweeps.timing`), then write results.csv, results.md and the
plots, and say how to continue. Returns the launcher's exit status (see :mod:`sweeps.launch`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from sweeps.layout import LAUNCH_FILE, OPTUNA_JOURNAL, RESULTS_CSV
from sweeps.run.budget import EXIT_BUDGET, budget_meter, trial_rates
from sweeps.run.mps import mps_for_sweep
from sweeps.run.preemption import EXIT_PREEMPTED, Preemption
from sweeps.spec import Sweep, save_launch


def trial_table(sweep: Sweep) -> str:
    r = sweep.spec.resources
    res = (
        f"cpu={r.cpu:g}"
        + (f" gpu={r.gpu:g}" if r.gpu else "")
        + (f" workers={r.workers}" if r.workers > 1 else "")
    )
    samples = sweep.spec.num_samples if sweep.has_search else 1
    rows = [("#", "cell", "seed", "samples", "resources")]
    rows += [
        (str(i + 1), p.cell.name, str(p.seed), str(samples), res) for i, p in enumerate(sweep.plans)
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    search = ""
    if sweep.has_search:
        keys = ", ".join(sweep.spec.parameters)
        search = f"; Optuna {sweep.spec.search.sampler.upper()} over {keys}, {samples} samples per cell and seed"
        if sweep.spec.per_configuration:
            search = (
                f"; configurations judged over seeds: one Optuna {sweep.spec.search.sampler.upper()} study per "
                f"cell over {keys}, {samples} configurations per cell, each trained on every seed and "
                f"told the {sweep.spec.seeds.objective} over its seeds"
            )
        else:
            search += " (per-unit mode: each (cell, seed) its own Optuna study)"
    from sweeps.run.confirm import confirm_summary
    from sweeps.run.warm import plan_warm_start

    warm = plan_warm_start(sweep)
    if warm is not None:
        lines.append(warm.summary())
    lines.append(
        f"{len(sweep.cells)} cells x {len(sweep.spec.seed_values)} seed(s) = {len(sweep.plans)} grid points, "
        f"{sweep.num_trials} trials{search}"
    )
    if confirm := confirm_summary(sweep):
        lines.append(confirm)
    return "\n".join(lines)


def run_sweep(sweep: Sweep, args: argparse.Namespace, profile: str | None) -> int:
    """Run a loaded sweep to its results; ``args`` is the launcher's command line. SIGTERM and
    SIGUSR1 stop it as Ctrl-C does, its unfinished trials ``preempted`` (:mod:`.preemption`)."""
    with Preemption() as preemption, mps_for_sweep(sweep, args.address):  # MPS: sweeps.run.mps
        return _run_sweep(sweep, args, profile, preemption)


def _run_sweep(
    sweep: Sweep, args: argparse.Namespace, profile: str | None, preemption: Preemption
) -> int:

    from sweeps.integrations.wandb_env import resolve_wandb_mode, wandb_sync_hint
    from sweeps.report.local import build_local_report
    from sweeps.report.results import (
        failure_summary,
        keep_finished,
        missing_rows,
        print_table,
        result_rows,
        results_frame,
        write_results_csv,
    )
    from sweeps.run.cluster import LaunchError, Paths, check_cluster, check_writable, init_ray
    from sweeps.run.experiment import make_settings, run_tune
    from sweeps.run.lost_nodes import moved_summary
    from sweeps.run.warm import PLAN_HASH, plan_fingerprint, plan_warm_start
    from sweeps.storage import StorageGuard, find_storage_fault

    spec = sweep.spec
    warm = plan_warm_start(sweep)
    output = Path(args.output).resolve()
    out_dir = output / sweep.name
    paths = Paths(output=output, storage=spec.storage.path or str(output))
    try:
        if args.resume and "://" not in paths.storage:  # known before Ray starts
            from sweeps.run.experiment import holds_sweep, nothing_to_resume

            if not holds_sweep(paths.experiment(sweep.name)):
                raise LaunchError(nothing_to_resume(paths.experiment(sweep.name)))
            from sweeps.run.resume_check import check_before_resume

            for repair in check_before_resume(out_dir, Path(paths.experiment(sweep.name))):
                print(f"repaired: {repair}", flush=True)
        check_writable(output, "--output")
        if spec.storage.path:
            check_writable(spec.storage.path, "storage.path")
        mode = resolve_wandb_mode(spec.wandb.mode)
        os.environ["WANDB_MODE"] = mode
        os.environ.setdefault("WANDB_SILENT", "true")
        out_dir.mkdir(parents=True, exist_ok=True)
        if not args.resume and not any(p.name != LAUNCH_FILE for p in out_dir.iterdir()):
            save_launch(out_dir, args.overrides, profile)  # a new sweep: what --resume will reuse
        elif args.resume:  # the first run's overrides, with the budget this resume gave (if any)
            save_launch(out_dir, args.overrides, profile)
        meter = budget_meter(
            sweep,
            out_dir,
            args.resume,
            f"python sweeps/launch.py {args.spec} --output {args.output}",
        )
        if meter is None:  # spent: nothing may start
            return EXIT_BUDGET
        # Only non-secret settings travel to the workers; the API key stays in each node's environment.
        runtime_env = {
            "env_vars": {
                "WANDB_MODE": mode,
                "WANDB_SILENT": "true",
                "PYTHONWARNINGS": "ignore::DeprecationWarning",
            }
        }
        try:
            from sweeps.trial.build import prepare_data

            if any(p.task["name"] != "copy" for p in sweep.plans):
                print(
                    "preparing the data (tokenizer and token caches, once for all trials) ...",
                    flush=True,
                )
            prepare_data([p.task for p in sweep.plans])
        except (FileNotFoundError, ValueError, ImportError) as exc:
            raise LaunchError(f"preparing the data failed: {exc}") from None
        conn = init_ray(
            args.address, runtime_env, num_cpus=args.num_cpus, dashboard=spec.resources.workers > 1
        )
        preemption.arm()  # ray.init took SIGTERM for itself
        fit = check_cluster(sweep, paths, conn.address)
        settings = make_settings(sweep, paths, mode, fit)
        meter.rates = trial_rates(settings.resources)  # as placed: no GPU here, none charged
        interrupted, guard = False, StorageGuard(paths.storage)
        try:
            if warm is not None and warm.reused_count >= sweep.num_trials:
                print(
                    "every planned trial is reused from the warm start: nothing to train",
                    flush=True,
                )
                grid = []
            else:
                grid = run_tune(
                    sweep,
                    paths,
                    settings,
                    fit,
                    resume=args.resume,
                    verbose=args.verbose,
                    guard=guard,
                    meter=meter,
                )
        except KeyboardInterrupt:
            interrupted, grid = True, []
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    rows, plans = [], {}
    interrupted |= (
        guard.fault is not None
    )  # stopped as on Ctrl-C: the unfinished trials continue on --resume
    if grid:
        # Tune catches SIGINT itself and returns normally: unfinished or never-started trials are how we know
        # warm_start: the trials an earlier sweep finished are reused, not trained again
        expected = sweep.num_trials - (warm.reused_count if warm else 0)
        interrupted |= len(grid) > grid.num_terminated + grid.num_errors or len(grid) < expected
        rows, plans = result_rows(grid, settings.plan, spec.parameters)
        for row in rows:  # what a later warm start compares its plans with (sweeps.run.warm)
            row[PLAN_HASH] = plan_fingerprint(plans[row["trial_id"]][0])
    interrupted |= preemption.signal is not None
    if spec.timing.enabled and not interrupted:
        from sweeps.timing.stage import time_finished_trials

        try:
            time_finished_trials(rows, plans, out_dir, spec.timing)
            publish_timings(rows, settings, out_dir / OPTUNA_JOURNAL if sweep.has_search else None)
        except KeyboardInterrupt:  # stopped while timing: --resume times them again
            interrupted = True
    rows += warm.rows() if warm else []  # warm_start: the earlier trials reused, as they were
    plans.update(warm.plans(sweep, out_dir) if warm else {})  # so the held-out stage can test them
    if spec.confirm_seeds and not interrupted:  # the chosen configurations on fresh seeds
        from sweeps.run.confirm import confirm_stage

        try:
            more, more_plans, cut = confirm_stage(
                sweep, paths, settings, fit, rows, args.verbose, guard, meter
            )
            rows, interrupted = rows + more, interrupted or cut
            plans.update(more_plans)
        except KeyboardInterrupt:
            interrupted = True
    if spec.heldout.enabled and not interrupted:  # chosen on validation, then tested once
        from sweeps.heldout.stage import evaluate_chosen_trials, publish_heldout

        try:
            # settings.spec: the GPU share the cluster check settled on (none on a CPU-only machine)
            tested = evaluate_chosen_trials(rows, plans, out_dir, settings.spec)
            here = {t: v for t, v in tested.items() if t not in (warm.reused_ids() if warm else ())}
            publish_heldout(here, settings, out_dir / OPTUNA_JOURNAL if sweep.has_search else None)
        except KeyboardInterrupt:  # stopped while testing: --resume tests them again
            interrupted = True
    if spec.confirm_seeds and not interrupted:  # the confirm figures in W&B and Optuna
        from sweeps.run.confirm import publish_confirm

        publish_confirm(rows, settings, out_dir / OPTUNA_JOURNAL, sweep)
    if spec.per_configuration and grid:  # each configuration's aggregate beside its seeds' runs
        from sweeps.run.configs import publish_configurations

        publish_configurations(rows, settings, spec)
    # every planned trial has a row, even one Tune never created
    rows += missing_rows(
        sweep.plans, rows, spec.num_samples, "unfinished" if interrupted else "error"
    )
    # not failed, not the user's Ctrl-C: the requeue, or a larger budget, continues them
    stopped_by = "preempted" if preemption.signal else "budget" if meter.stopping else None
    if stopped_by is not None and interrupted:
        for row in rows:
            if row.get("status") == "unfinished":
                row["status"] = stopped_by
    rows, kept = keep_finished(rows, out_dir / RESULTS_CSV)
    if kept:
        print(
            f"kept {kept} finished trial(s) from the previous results.csv that this run did not report as finished "
            f"(their folders and checkpoints are where the rows say)",
            flush=True,
        )
    written = {}
    try:
        written["csv"] = write_results_csv(rows, out_dir)
        written.update(
            build_local_report(out_dir, spec.metric.name, spec.metric.mode, f"Sweep {sweep.name}")
        )
    except (
        OSError
    ) as exc:  # a full --output: the table still reaches the console, the old files stay whole
        if find_storage_fault(exc) is None:
            raise
        guard.note(exc)
    df = results_frame(rows)
    print()
    if not df.empty:
        print_table(df)
        retried = df[df["retries"].fillna(0) > 0] if "retries" in df else df.iloc[0:0]
        if not retried.empty:
            print(
                f"{len(retried)} trial(s) failed and were retried ({int(retried['retries'].sum())} retries in all; "
                "results.csv's retries column): "
                + ", ".join(f"{r.cell} seed={r.seed}" for r in retried.itertuples())
            )
        if moved := moved_summary(df):
            print(moved)
    if written:
        print("\nwrote " + ", ".join(str(p) for p in written.values()))
    if (
        mode == "offline" and interrupted and not df.empty
    ):  # stopped from outside: see close_cut_run
        from sweeps.integrations.wandb_runs import close_cut_run, offline_run_dirs

        stopped = df.loc[df["status"].isin(["preempted", "budget", "unfinished"]), "trial_id"]
        cut = [r for t in stopped.dropna() for r in offline_run_dirs(out_dir / "wandb", t)]
        if closed := sum(close_cut_run(r) for r in cut):
            print(
                f"closed {closed} W&B run part(s) the stop cut short (history up to the stop "
                "kept): their runs continue under the same ids with --resume"
            )
    hint, broken = wandb_sync_hint(out_dir) if mode == "offline" else (None, [])
    for run, problem in broken:
        print(
            f"W&B run {run} is incomplete ({problem}): left out of the upload command",
            file=sys.stderr,
        )
    if hint:
        print(f"W&B ran offline; upload the runs with:\n  {hint}")
    journal = out_dir / OPTUNA_JOURNAL
    if sweep.has_search and journal.exists():
        first = f"{sweep.name}/{sweep.plans[0].unit}"
        per = "cell and seed"
        if spec.per_configuration:
            first, per = (
                f"{sweep.name}/{sweep.plans[0].cell.slug}",
                "cell, configurations over seeds",
            )
        print(
            f"Optuna studies (one per {per}) in {journal}:\n"
            f"  optuna trials --storage {shlex.quote(str(journal))} --storage-class JournalFileBackend "
            f"--study-name {shlex.quote(first)}\n"
            f"  optuna-dashboard --storage-class JournalFileStorage {shlex.quote(str(journal))}"
        )
    resume_cmd = (
        f"python sweeps/launch.py {args.spec} --resume --output {args.output}"
        + (f" --profile {profile}" if profile else "")
        + "".join(f" --set {shlex.quote(o)}" for o in args.overrides)
    )
    if guard.fault:
        kept_as_was = (
            ""
            if written
            else " results.csv and results.md were left as they were (nothing could be written)."
        )
        print(
            f"error: {guard.message()}{kept_as_was} Continue with:\n  {resume_cmd}", file=sys.stderr
        )
        return 1
    if preemption.signal is not None:
        print(
            f"preempted ({preemption.signal}); finished trials and checkpoints are kept. "
            f"Continue with:\n  {resume_cmd}"
        )
        return EXIT_PREEMPTED
    if stopped_by == "budget" and interrupted:
        print(
            meter.ledger.extend_hint(f"python sweeps/launch.py {args.spec} --output {args.output}")
        )
        return EXIT_BUDGET
    if interrupted:
        print(
            f"interrupted; finished trials and checkpoints are kept. Continue with:\n  {resume_cmd}"
        )
        return 130
    failed = failure_summary(df)
    if failed:
        print(
            f"{len(failed)} of {len(df)} trial(s) failed (their rows in results.md say why):",
            file=sys.stderr,
        )
        print("\n".join(failed), file=sys.stderr)
        print(f"retry them with:\n  {resume_cmd}", file=sys.stderr)
        return 1
    return 0


def publish_timings(rows: list[dict], settings, journal: Path | None) -> None:
    """The timing stage's figures beside what the trial recorded while it trained: in the summary
    of its W&B run (reopened by id online, written into its run log offline) and in its Optuna
    study (:func:`sweeps.run.searcher.record_timings`). A failure to reach one is said, not fatal."""
    from sweeps.integrations.wandb_runs import add_run_summary
    from sweeps.report.results import TIMING_COLUMNS

    timings = {}
    for row in rows:
        values = {
            c: row[c] for c in TIMING_COLUMNS if row.get(c) is not None
        }  # plain values (attach_timing, attach_train_cost)
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
                f"[timing] trial {row['trial_id']}: could not add the timing figures to its W&B run: {exc}",
                file=sys.stderr,
            )
    if journal is not None and timings and journal.exists():
        from sweeps.run.searcher import record_timings

        record_timings(str(journal), timings)
