"""The stages of a launch before training, each a function of the launch's state
(:class:`~sweeps.stages.launch_state.Launch`), in the order :mod:`sweeps.stages.pipeline` runs them:

1. :func:`check_output` -- what ``--resume`` continues, the output and storage, W&B's mode;
2. :func:`start_budget` -- the budget's meter, or a stop when a resumed sweep's budget is spent;
3. :func:`prepare_data` -- the tokenizer and token caches, once for all trials;
4. :func:`join_ray` -- join or start Ray, check what the cluster can hold, the trials' settings.

Then training (:mod:`sweeps.stages.train`), the measuring stages (:mod:`sweeps.stages.measure`),
the confirm stage (:mod:`sweeps.stages.confirm`), publishing (:mod:`sweeps.stages.publish`) and the
results (:mod:`sweeps.stages.results`). A stage returns None, or the launcher's exit status when
the launch ends there.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from sweeps.build import prepare_data as prepare_task_data
from sweeps.driver.budget import EXIT_BUDGET, budget_meter
from sweeps.driver.cluster import (
    LaunchError,
    check_address,
    check_cluster,
    check_writable,
    init_ray,
)
from sweeps.driver.gcs_watch import GcsWatch, end_launch, lost_head_line, watchable
from sweeps.driver.launch_lock import hold_launch_lock, running_launch
from sweeps.driver.preemption import EXIT_PREEMPTED, StopRequested
from sweeps.driver.resume_check import check_before_resume, lost_finished_checkpoints
from sweeps.integrations.wandb_env import resolve_wandb_mode
from sweeps.layout import already_holds, inside_a_sweep, nothing_to_resume, only_launch_files
from sweeps.plan.folders import elsewhere_hint
from sweeps.plan.warm_start import code_version
from sweeps.spec import save_launch
from sweeps.spec.launch_record import UNRECORDED, code_versions, recorded
from sweeps.stages.launch_state import Launch
from sweeps.stages.train import holds_sweep, make_settings


def check_output(launch: Launch) -> None:
    """What ``--resume`` continues is there and whole, and a new sweep's folder holds none (known
    before Ray starts); no other launch is running the sweep (:mod:`sweeps.driver.launch_lock`);
    a cluster address given answers; the output and storage folders are writable, W&B's mode is
    settled, and ``launch.json`` records the run's overrides. A launch refused here writes
    nothing: every refusal is checked before the sweep's folder, its lock and its files are made
    (and those taking the lock checked again under it)."""
    sweep, args, paths, out_dir = launch.sweep, launch.args, launch.paths, launch.out_dir
    local = "://" not in paths.storage
    experiment = paths.experiment(sweep.name)
    if args.resume and local and not holds_sweep(experiment):
        raise LaunchError(nothing_to_resume(experiment))
    if not args.resume and (nested := inside_a_sweep(args.output, args.spec)):
        raise LaunchError(nested)
    if running := running_launch(out_dir):
        raise LaunchError(running)
    if not args.resume:
        refuse_a_sweep_there(launch, experiment)
    check_given_address(args.address)
    launch.mode = resolve_wandb_mode(launch.spec.wandb.mode)
    check_writable(paths.output, "--output")
    if launch.spec.storage.path:
        check_writable(launch.spec.storage.path, "storage.path")
    out_dir.mkdir(parents=True, exist_ok=True)
    launch.lock = hold_launch_lock(out_dir, launch.full_cmd)
    if args.resume and local:  # repaired only by the launch that holds the lock
        for repair in check_before_resume(out_dir, Path(experiment)):
            print(f"repaired: {repair}", flush=True)
        if lost := lost_finished_checkpoints(out_dir, args.spec, args.output):
            print(lost, flush=True)
    if not args.resume:  # again, under the lock: a launch may have started it meanwhile
        refuse_a_sweep_there(launch, experiment)
    os.environ["WANDB_MODE"] = launch.mode
    os.environ.setdefault("WANDB_SILENT", "true")
    if args.resume or only_launch_files(out_dir):
        code = code_version()
        known = code_versions(out_dir) or ([UNRECORDED] if recorded(out_dir) else [])
        if args.resume and (line := code_changed_line(known, code)):
            print(line, flush=True)
        # a new sweep: what --resume will reuse; a resume: the first run's overrides, with the
        # settings outside the plan this resume gave (a budget, failure:, ...)
        save_launch(
            out_dir,
            args.overrides,
            launch.profile,
            launch.sweep.planned,
            launch.sweep.profile_settings,
            resume=args.resume,
            code=code,
            description=launch.sweep.spec.description,
            gpu_name=launch.plan.gpu_name or "",
            warm=launch.warm.to_record() if launch.warm is not None else None,
        )


def refuse_a_sweep_there(launch: Launch, experiment: str) -> None:
    """A new sweep (no ``--resume``) is refused where its experiment folder already holds a
    sweep, or its own folder holds a sweep's results (its trials under another storage.path: a
    new one there would mix its rows with theirs)."""
    args, out_dir = launch.args, launch.out_dir
    if "://" not in launch.paths.storage and holds_sweep(experiment):
        raise LaunchError(already_holds(experiment, args.spec, args.output))
    if out_dir.is_dir() and not only_launch_files(out_dir):
        raise LaunchError(already_holds(str(out_dir), args.spec, args.output))


def check_given_address(address: str | None) -> None:
    """The cluster address the launch will join, where one is given (``--address``, else
    ``RAY_ADDRESS``), answers as Ray's (:func:`~sweeps.driver.cluster.check_address`): a launch
    refused for it stops before it writes anything. ``auto``, ``local`` and none are Ray's to
    find or start (:func:`~sweeps.driver.cluster.init_ray`)."""
    given = address or os.environ.get("RAY_ADDRESS")
    if given and address != "local":
        check_address(given, source="--address" if address else "RAY_ADDRESS")


def code_changed_line(codes: list[str], code: str) -> str:
    """On a resume, the line saying the trials' code changed since the sweep's last run (``codes``:
    launch.json's, :func:`~sweeps.spec.launch_record.code_versions`; ``unrecorded`` last for a sweep
    of a version that recorded none: the line says it may have); "" where it did not, or where
    there is no record."""
    if not codes or codes[-1] == code:
        return ""
    since = (
        "may differ from its earlier runs' (made by a version that did not record it)"
        if codes[-1] == UNRECORDED
        else "changed since this sweep's last run"
    )
    return (
        "note: the trials' code (lightning_modules, datamodules, sweeps/trial, sweeps/build.py) "
        f"{since}: the trials this resume trains or continues run this code beside finished "
        "ones an earlier one trained (results.csv's code_version says which), and a later warm "
        "start reuses only the trials whose whole training ran one version. For results of one "
        "version, start a new sweep with another --output"
    )


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
        hint = next((h for task in tasks if (h := elsewhere_hint(task))), "")
        raise LaunchError(f"preparing the data failed: {exc}{hint}") from None


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
    watch_head(launch, conn.address)
    launch.fit = check_cluster(launch.sweep, launch.paths, conn.address, bool(args.resume))
    launch.settings = make_settings(launch.plan, launch.mode, launch.fit)
    # as placed: no GPU, none charged; trials alone beside fused groups, on a share of their own
    launch.meter.place(launch.settings.resources, launch.settings.lone)


def watch_head(launch: Launch, address: str | None) -> None:
    """Watch the GCS of the Ray just joined (or started): a lost head ends the launch with the
    resume command and exit status 75 (:mod:`sweeps.driver.gcs_watch`), not Ray's bare exit 1."""
    import ray

    if address and address.startswith("ray://"):
        return
    gcs = ray.get_runtime_context().gcs_address
    if not watchable(gcs):
        return

    def stopping() -> bool:
        return launch.stopped_by() is not None

    def lost(seconds: float) -> None:
        with contextlib.suppress(Exception):  # what was charged until now stays charged
            if launch.meter is not None:
                launch.meter.stop()
        with_stop = address is None and stopping()  # its own Ray, gone with the stop's signal
        end_launch(lost_head_line(gcs, seconds, launch.resume_cmd, with_stop), EXIT_PREEMPTED)

    launch.watch = GcsWatch(gcs, lost, stopping=stopping).start()
