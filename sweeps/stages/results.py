"""The last stage of a launch, after a stop too: every planned trial gets a row (a stopped one
the status ``preempted`` or ``budget``), results.csv and results.md are written from what is
done, the console shows the table and how to go on, and :func:`exit_status` says how the launch
ended (see :mod:`sweeps.launch`)."""

from __future__ import annotations

import shlex
import sys

from sweeps.driver.budget import EXIT_BUDGET
from sweeps.driver.preemption import EXIT_INTERRUPTED, EXIT_PREEMPTED
from sweeps.integrations.wandb_env import unsynced_runs, wandb_sync_hint
from sweeps.integrations.wandb_runs import (
    close_cut_run,
    close_superseded_parts,
    offline_run_dirs,
)
from sweeps.layout import RESULTS_CSV, wandb_command
from sweeps.report.local import build_local_report
from sweeps.report.results import (
    failure_summary,
    keep_finished,
    missing_rows,
    print_table,
    results_frame,
    trial_names,
    write_results_csv,
)
from sweeps.schedulers.lost_nodes import moved_summary
from sweeps.spec.objectives import baseline_of
from sweeps.stages.launch_state import Launch
from sweeps.storage import find_storage_fault

#: the statuses of trials a stop left for later
STOPPED = ("preempted", "budget", "unfinished")
#: the statuses of a trial that ran to its own end: W&B's state "finished" says as much
ENDED = ("done", "converged")


#: what the retry line adds: a resume keeps the settings that planned the trials
RETRY_NOTE = (
    "(a resume runs them as they were planned: a failure that a setting of task, model, trainer, "
    "grid or the search causes fails again; change it with another --output, a new sweep)"
)


def retry_command(launch: Launch) -> str:
    """The resume that retries a launch's failed trials: without the ``chaos`` faults it injected
    (its own ``--set chaos...`` left out, and the recorded ones, which a resume keeps, switched
    off), which would fail every trial again."""
    chaos = launch.spec.chaos
    injected = [
        key
        for key, value in (
            ("fail_before_first_report", chaos.fail_before_first_report),
            ("fail_once_at_step", chaos.fail_once_at_step),
        )
        if value
    ]
    if not injected:
        return launch.resume_cmd
    command = launch.resume_cmd
    for o in launch.args.overrides:
        if o.strip().startswith("chaos."):
            command = command.replace(f" --set {shlex.quote(o)}", "", 1)
    off = {"fail_before_first_report": "false", "fail_once_at_step": "null"}
    return command + "".join(f" --set chaos.{key}={off[key]}" for key in injected)


def write_results(launch: Launch) -> None:
    """Every planned trial's row (even one Tune never created), results.csv and results.md."""
    spec, rows = launch.spec, launch.rows
    left = "unfinished" if launch.interrupted else "error"
    rows += missing_rows(
        launch.sweep.plans, rows, spec.num_samples, left, spec.parameters, baseline_of(spec)
    )
    # not failed, not the user's Ctrl-C: the requeue, or a larger budget, continues them
    stopped_by = launch.stopped_by()
    if stopped_by in ("preempted", "budget") and launch.interrupted:
        for row in rows:
            if row.get("status") == "unfinished":
                row["status"] = stopped_by
    rows, kept = keep_finished(rows, launch.out_dir / RESULTS_CSV, launch.superseded)
    if kept:
        print(
            f"kept {kept} finished trial(s) from the previous results.csv that this run did not "
            "report as finished (their folders and checkpoints are where the rows say)",
            flush=True,
        )
    launch.rows = rows
    try:
        launch.written["csv"] = write_results_csv(rows, launch.out_dir)
        title = f"Sweep {launch.sweep.name}"
        launch.written.update(
            build_local_report(launch.out_dir, spec.metric.name, spec.metric.mode, title)
        )
    except OSError as exc:  # a full --output: the table still reaches the console, the old
        if find_storage_fault(exc) is None:  # files stay whole
            raise
        launch.guard.note(exc)
    launch.df = results_frame(rows)


def tell_console(launch: Launch) -> None:
    """The results table, retried and moved trials, the files written, W&B's and Optuna's
    next steps."""
    df, out_dir = launch.df, launch.out_dir
    print()
    if not df.empty:
        print_table(df)
        retried = df[df["retries"].fillna(0) > 0] if "retries" in df else df.iloc[0:0]
        if not retried.empty:
            print(
                f"{len(retried)} trial(s) failed and were retried ({int(retried['retries'].sum())} "
                "retries in all; results.csv's retries column): "
                + ", ".join(f"{r.cell} seed={r.seed}" for r in retried.itertuples())
            )
        if moved := moved_summary(df):
            print(moved)
    if launch.written:
        print("\nwrote " + ", ".join(str(p) for p in launch.written.values()))
    if launch.mode == "offline" and (closed := close_superseded_parts(out_dir / "wandb")):
        print(
            f"closed {closed} W&B run part(s) that an earlier run of the sweep left open (its "
            "launcher or node lost; history up to then kept): their runs upload whole"
        )
    if launch.mode == "offline" and launch.interrupted and not df.empty:
        stopped = df.loc[df["status"].isin(STOPPED), "trial_id"]  # see close_cut_run
        cut = [r for t in stopped.dropna() for r in offline_run_dirs(out_dir / "wandb", t)]
        if closed := sum(close_cut_run(r) for r in cut):
            print(
                f"closed {closed} W&B run part(s) the stop cut short (history up to the stop "
                "kept): their runs continue under the same ids with --resume"
            )
    # (online, each run is reopened over the network: not while a preempted job's grace runs)
    online = launch.mode == "online" and launch.stopped_by() != "preempted"
    if (launch.mode == "offline" or online) and launch.settings:
        from sweeps.stages.publish import (  # (imports Optuna)
            estimates_of,
            publish_failed,
            publish_stopped,
        )

        cut = STOPPED if launch.interrupted else ()
        status = launch.trained - launch.published
        if online:  # a reopening over the network per run: only where W&B's "finished" misleads
            ended = {  # or where the run lacks the probe figures Optuna was told
                str(r.get("trial_id"))
                for r in launch.rows
                if r.get("status") in ENDED and not estimates_of(r)
            }
            status -= ended
        publish_stopped(launch.rows, launch.settings, cut, status)
        names = trial_names(launch.grid)
        if opened := publish_failed(launch.rows, launch.settings, launch.plans, names):
            print(
                f"opened a W&B run for {opened} trial(s) that failed before they opened one "
                "(state failed; results.csv's status and error in its summary)"
            )
    sync = wandb_sync_hint(out_dir) if launch.mode == "offline" else None
    for run, problem in sync.broken if sync else ():
        print(
            f"W&B run {run} is incomplete ({problem}): left out of the upload command",
            file=sys.stderr,
        )
    if sync and sync.empty:
        print(
            f"{len(sync.empty)} W&B run folder(s) in {out_dir / 'wandb'} hold nothing logged (a "
            "trial stopped while W&B was starting, or killed before W&B wrote its first records): "
            "left out of the upload command, with nothing to upload"
        )
    if sync and sync.command:
        print(f"W&B ran offline; upload the runs with:\n  {sync.command}")
    if reused := reused_runs_hint(launch):
        print(reused)
    _optuna_hint(launch)


def reused_runs_hint(launch: Launch) -> str:
    """A warm start's reused rows have their W&B runs in the earlier sweep's folder: the command
    that uploads those not uploaded yet (the W&B group lacks them until it runs), or ""."""
    warm = launch.warm
    if warm is None or not warm.reused_count:
        return ""
    ids = warm.reused_ids()
    runs = [
        warm.folder / "wandb" / name
        for name in unsynced_runs(warm.folder)
        if name.rsplit("-", 1)[-1] in ids
    ]
    if not runs:
        return ""
    return (
        f"{len(runs)} W&B run(s) of the {warm.reused_count} reused row(s) are the earlier "
        f"sweep's, in {warm.folder / 'wandb'}, not uploaded yet; upload them with:\n  {wandb_command()} sync "
        + " ".join(str(r) for r in runs)
    )


def _optuna_hint(launch: Launch) -> None:
    sweep, journal = launch.sweep, launch.journal
    if journal is None or not journal.exists():
        return
    names, per = [f"{sweep.name}/{p.unit}" for p in sweep.plans], "cell and seed"
    if launch.spec.per_configuration:
        names = [f"{sweep.name}/{p.cell.slug}" for p in sweep.plans]
        per = "cell, configurations over seeds"
    names = list(dict.fromkeys(names))
    shown = names if len(names) <= 6 else [*names[:3], "...", names[-1]]
    print(
        f"Optuna studies (one per {per}) in {journal}: {', '.join(shown)} ({len(names)})\n"
        f"  optuna trials --storage {shlex.quote(str(journal))} --storage-class JournalFileBackend "
        f"--study-name {shlex.quote(names[0])}"
        + ("   # or another study's name" if len(names) > 1 else "")
        + "\n"
        f"  optuna-dashboard --storage-class JournalFileStorage {shlex.quote(str(journal))}"
    )


def exit_status(launch: Launch) -> int:
    """1 for a storage fault; for a launch that left work undone, 75 (preempted), 3 (budget) or
    130 (Ctrl-C); 1 when a trial failed; else 0, also when a stop came after every stage had
    finished (nothing to requeue)."""
    resume_cmd = launch.resume_cmd
    if launch.guard.fault:
        kept_as_was = (
            ""
            if launch.written
            else " results.csv and results.md were left as they were (nothing could be written)."
        )
        print(
            f"error: {launch.guard.message()}{kept_as_was} Continue with:\n  {resume_cmd}",
            file=sys.stderr,
        )
        return 1
    stopped_by = launch.stopped_by()
    if launch.interrupted and stopped_by == "preempted":
        where = f" in the {launch.stopped_in} stage" if launch.stopped_in else ""
        print(
            f"preempted ({launch.stop.signal}){where}; finished trials, checkpoints and records "
            f"are kept. Continue with:\n  {resume_cmd}"
        )
        return EXIT_PREEMPTED
    if launch.interrupted and stopped_by == "budget":
        print(launch.meter.ledger.extend_hint(launch.launch_cmd))
        return EXIT_BUDGET
    if launch.interrupted:
        where = f" in the {launch.stopped_in} stage" if launch.stopped_in else ""
        print(
            f"interrupted{where}; finished trials and checkpoints are kept. Continue with:\n"
            f"  {resume_cmd}"
        )
        return EXIT_INTERRUPTED
    if stopped_by is not None:
        print(f"{stopped_by} after every stage had finished: nothing was cut, nothing to requeue")
    failed = failure_summary(launch.df)
    if failed:
        print(
            f"{len(failed)} of {len(launch.df)} trial(s) failed (their rows in results.md say why):",
            file=sys.stderr,
        )
        print("\n".join(failed), file=sys.stderr)
        print(f"retry them with:\n  {retry_command(launch)}\n{RETRY_NOTE}", file=sys.stderr)
        return 1
    return 0
