"""The trainable of a sweep with fused trials: a member trial joins its group
(:mod:`sweeps.trial.fused.group`) and passes each report the group publishes for it to
``tune.report``, with its checkpoint, as an unfused trial's report callback does; a trial that fuses
with nobody (no ``fused_with`` in its config) runs the unfused trainable
(:func:`sweeps.trial.trainable.run_trial`).

The member keeps what is the trial's own: its W&B run (the unfused trial's settings, written as
Lightning's logger writes them: each report's history logged at its steps, the attention heatmaps
of its final model), its checkpoints in its trial folder, the ``chaos`` block's faults. When Tune
stops it (a scheduler's decision arrives as ``SystemExit`` from ``tune.report``, or a stop of the
sweep between reports) it tells the group, which drops it before the next step, and closes its W&B
run.

A member trains nothing, so its process imports neither torch nor Lightning (a GPU's group of 16
would otherwise hold 16 processes that import them): the group draws the member's heatmaps from
its last checkpoint, and the member logs the images.
"""

from __future__ import annotations

import functools
import io
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import ray
from ray import tune

from sweeps.errors import ChaosError
from sweeps.layout import CHECKPOINT_FILE, TRIAL_STATE_FILE
from sweeps.plan.fusion import member_of, member_share
from sweeps.spec import TrialPlan
from sweeps.storage import short_storage_faults
from sweeps.trial import phases
from sweeps.trial.fused.state import GroupSetup, group_folder
from sweeps.trial.lifecycle import (
    STOP_REQUESTED,
    FinishOnStop,
    placement_metrics,
    quiet_logs,
    report_earlier_finish,
    trial_storage_dir,
    trial_storage_path,
)
from sweeps.trial.settings import TrialSettings
from sweeps.trial.teacher import end_without_teacher
from sweeps.trial.wandb_run import (
    HEATMAP_KEY,
    MemberRun,
    close_wandb,
    log_reported_training,
    run_arguments,
)

#: seconds a member waits for its next report before it looks whether Tune is stopping it
POLL_S = 1.0


class FusedGroupError(RuntimeError):
    """The member's group failed; the member's retry joins a group restarted from its last state."""


def run_member_trial(config: dict[str, Any], settings: TrialSettings) -> None:
    """Tune function trainable of a sweep with fused trials (bound with ``tune.with_parameters``)."""
    found = member_of(config)
    if found is None or settings.fusion_roster is None:
        from sweeps.trial.trainable import run_trial  # torch and Lightning: this trial trains

        return run_trial(config, settings)
    group, j, size = found
    # a student whose teacher failed fails at once, as its unfused trial does: its group trains
    # the other members once Tune has ended this one (the roster says so)
    end_without_teacher(config, settings.metric)
    phases.start()
    plan = settings.plan(config)
    ctx = tune.get_context()
    trial_id, trial_name = ctx.get_trial_id(), ctx.get_trial_name()
    with short_storage_faults(
        f"trial {trial_id}, writing to {trial_storage_path(ctx) or 'its storage'}"
    ):
        if report_earlier_finish(trial_storage_dir(ctx), trial_id, plan.trainer["max_steps"]):
            return
        quiet_logs()
        STOP_REQUESTED.clear()  # a reused actor starts its next trial unstopped
        if settings.spec.chaos.fail_before_first_report:
            raise ChaosError(
                "chaos: injected failure before the first report (sweep spec `chaos.fail_before_first_report`)"
            )
        last_step, resumed_from = restored_step(tune.get_checkpoint())
        handle = open_group(settings, ctx, group, size)
        if ray.get(handle.join.remote(j, trial_id, plan, last_step)) != "ok":
            raise FusedGroupError(
                f"group {group} already trains without member {j + 1} (trial {trial_id})"
            )
        extra = {**placement_metrics(), "resumed_from": resumed_from, "skipped_checkpoints": 0}
        try:
            follow(handle, settings, plan, j, trial_id, trial_name, last_step, extra)
        finally:
            phases.dump(trial_storage_dir(ctx))


def follow(
    handle: Any,
    settings: TrialSettings,
    plan: TrialPlan,
    j: int,
    trial_id: str,
    trial_name: str,
    last: int,
    extra: dict[str, Any],
) -> None:
    """Pass the group's reports for member ``j`` to Tune until its final one, or until Tune stops
    it; the W&B run is closed whatever happens (see :func:`sweeps.trial.fitting.fit_trial`)."""
    logger, stop, failed, final_ckpt, drawn = None, None, True, None, False
    wants_heatmaps = settings.wandb.log_heatmaps and settings.wandb.mode != "disabled"
    try:
        try:
            while True:
                if STOP_REQUESTED.is_set():  # Tune is stopping this trial between reports
                    raise SystemExit(0)
                report = ray.get(handle.next_report.remote(j, last, POLL_S))
                if report is None:
                    continue
                if "error" in report:
                    raise FusedGroupError(report["error"])
                chaos_once(settings, trial_id, report["step"])
                if logger is None and settings.wandb.mode != "disabled":
                    with phases.phase("wandb_init"):
                        logger = MemberRun(
                            run_arguments(
                                settings, plan, trial_id, trial_name, _Hparams(report["hparams"])
                            )
                        )
                        _ = logger.experiment
                for step, values in report["history"]:
                    if logger is not None:
                        logger.log_metrics(values, step=step)
                if logger is not None:
                    log_reported_training([logger], report["metrics"], report["step"])
                # the model this report describes, also when Tune stops the trial inside the
                # report below: the heatmaps are of the model the stopped trial ends with
                final_ckpt = report["files"].get(CHECKPOINT_FILE, final_ckpt)
                if report["final"]:
                    # the run is whole before Tune has the final report: at the end of a sweep Tune
                    # kills a trial's process about 10 s after that report, and a member still
                    # waiting for its heatmaps (drawn by the group, busy training the others) then
                    # left its W&B run unfinished
                    drawn = True
                    if wants_heatmaps and final_ckpt is not None:  # the group draws them: ask
                        # before the release, after which the group may go
                        log_heatmaps(logger, heatmaps_of(handle, j, final_ckpt, trial_id), trial_id)
                    with phases.phase("wandb_close"):
                        close_wandb(logger)
                    logger = None
                with tempfile.TemporaryDirectory() as tmp:
                    for name, data in report["files"].items():
                        Path(tmp, name).write_bytes(data)
                    with phases.phase("report"):
                        tune.report(
                            {**report["metrics"], **extra},
                            checkpoint=tune.Checkpoint.from_directory(tmp),
                        )
                last = report["step"]
                if report["final"]:  # Tune has it: the group need not wait for this member
                    _quietly(lambda: ray.get(handle.release.remote(j), timeout=30))
                    break
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
            stop = exc
            if wants_heatmaps and final_ckpt is not None and not drawn:
                log_heatmaps(logger, heatmaps_of(handle, j, final_ckpt, trial_id), trial_id)
            _quietly(lambda: ray.get(handle.leave.remote(j), timeout=30))
        failed = False
    finally:
        with phases.phase("wandb_close"):
            close_wandb(logger, exit_code=1 if failed else 0)
    if stop is not None:
        raise stop


def member_resources(per_trial: dict[str, float], lone: dict[str, float] | None = None):
    """Tune's resources of a trial by its config: a member of a group of n reserves 1/n of
    ``per_trial`` (rounded down to Ray's 1/10,000), so the group holds what one trial does; a trial
    that trains alone reserves ``lone`` where the plan gives it its own share (else ``per_trial``)."""
    return functools.partial(_member_bundle, per_trial, lone)


def _member_bundle(
    per_trial: dict[str, float], lone: dict[str, float] | None, config: dict[str, Any]
):
    from ray.tune import PlacementGroupFactory

    share = member_share(config)
    if share == 1.0 and lone is not None:
        per_trial = lone
    bundle = {k.upper(): math.floor(v * share * 10_000) / 10_000 for k, v in per_trial.items()}
    return PlacementGroupFactory([{k: max(v, 0.0001) for k, v in bundle.items() if v}])


def open_group(settings: TrialSettings, ctx: Any, group: str, size: int) -> Any:
    """The group's actor, from the roster (created on this trial's node by its first member)."""
    storage = ctx.get_storage()
    setup = GroupSetup(
        name=group,
        size=size,
        roster=settings.fusion_roster,
        filesystem=storage.storage_filesystem,
        folder=group_folder(storage.experiment_fs_path, group),
        threads=max(1, int(settings.resources.cpu)),
        gpu_ids=tuple(str(g) for g in ray.get_gpu_ids()),
        stop_when=settings.stop_when,
    )
    roster = ray.get_actor(settings.fusion_roster)
    node = ray.get_runtime_context().get_node_id()
    return ray.get(roster.open_group.remote(group, node, setup))


def restored_step(checkpoint: Any) -> tuple[int, str]:
    """The step of the trial's last report (its checkpoint's ``trial_state.json``) and the
    checkpoint folder's name; ``(-1, "")`` without one."""
    if checkpoint is None:
        return -1, ""
    try:
        with checkpoint.as_directory() as d:
            state = json.loads(Path(d, TRIAL_STATE_FILE).read_text())
        return int(state["step"]), Path(checkpoint.path.rstrip("/")).name
    except (OSError, ValueError, KeyError):
        return -1, ""


def chaos_once(settings: TrialSettings, trial_id: str, step: int) -> None:
    """The ``chaos.fail_once_at_step`` fault, at the first report at or past that step (once per
    trial, remembered in a marker file as :class:`sweeps.trial.callbacks.Chaos` does)."""
    at = settings.spec.chaos.fail_once_at_step
    marker = Path(settings.chaos_dir) / f"{trial_id}.failed"
    if at and step >= at and not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("failed once\n")
        raise ChaosError(f"chaos: injected failure at step {step} (sweep spec `chaos` block)")


def log_heatmaps(logger: Any, pngs: list[bytes], trial_id: str) -> None:
    """The heatmaps (PNG files) into the member's W&B run, as the unfused trial logs them."""
    if not pngs or logger is None:
        return
    try:
        with phases.phase("heatmaps"):
            from PIL import Image

            logger.log_image(HEATMAP_KEY, [Image.open(io.BytesIO(png)) for png in pngs])
    except Exception as exc:  # noqa: BLE001 -- a plotting problem must not fail a finished trial
        print(f"[trial {trial_id}] could not log attention heatmaps: {exc!r}")


def heatmaps_of(handle: Any, j: int, checkpoint: bytes, trial_id: str) -> list[bytes]:
    """The attention heatmaps of the member's final model (its last report's checkpoint), as the
    unfused trial logs them, drawn by the group as PNG files; none if the group cannot."""
    try:
        with phases.phase("heatmaps"):
            return ray.get(handle.heatmaps.remote(j, checkpoint), timeout=120)
    except ray.exceptions.RayActorError:  # the group is gone: the sweep is being stopped
        return []
    except Exception as exc:  # noqa: BLE001 -- a plotting problem must not fail a finished trial
        print(f"[trial {trial_id}] could not draw attention heatmaps: {exc!r}")
        return []


class _Hparams:
    """What :func:`run_arguments` reads of a module: its hyperparameters."""

    def __init__(self, hparams: dict[str, Any]) -> None:
        self.hparams = hparams


def _quietly(call) -> None:
    try:
        call()
    except Exception:  # noqa: BLE001 -- the group is gone: nothing left to tell it
        pass


# as the unfused trainable: a stopped trial closes W&B before its process goes
run_member_trial.__mixins__ = (FinishOnStop,)
