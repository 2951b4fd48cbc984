"""Fitting a trial: what the single-process trainable (:mod:`sweeps.trial.trainable`) and the
DDP trainable (:mod:`sweeps.trial.ddp`) share -- seeding, data and module, restoring a
checkpoint, the report-to-Ray callback, fault injection, the Trainer's arguments, and the fit
itself (the W&B run: :mod:`sweeps.trial.wandb_logger`).

Each trial reports to Ray after every validation, with a checkpoint, so a retried trial
(``FailureConfig(max_failures)``) or a resumed sweep continues from where it stopped. It logs to
W&B through Lightning's ``WandbLogger`` only (one logging path: no driver-side W&B callback).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from datamodules.resumable import RngStateCallback
from lightning_modules.cuda_graphs import enable_cuda_graphs
from sweeps.build import build_datamodule, build_module, trainer_kwargs
from sweeps.errors import ChaosError, CpuPrecisionError, GpuTorchError
from sweeps.integrations.torch_build import gpu_torch_problem
from sweeps.spec import TrialPlan
from sweeps.spec.gpu import FLOAT16_MIXED
from sweeps.storage import find_storage_fault, quiet_close
from sweeps.trial import phases
from sweeps.trial.callbacks import Chaos, TuneReport
from sweeps.trial.checkpoints import restore_checkpoint
from sweeps.trial.lifecycle import STOP_REQUESTED, quiet_logs
from sweeps.trial.settings import TrialSettings
from sweeps.trial.stop_when import make_callback
from sweeps.trial.wandb_logger import log_heatmaps
from sweeps.trial.wandb_run import close_wandb


def finish_fit(
    trainer: pl.Trainer, module: pl.LightningModule, dm: pl.LightningDataModule, report: TuneReport
) -> None:
    """After ``fit``: when the run ended between validations, validate once more so the final
    model is what the trial reports."""
    report.fit_over = True
    if report.last_reported_step != trainer.global_step:
        trainer.validate(module, datamodule=dm, verbose=False)
        if report.last_reported_step != trainer.global_step:
            report.report(trainer)


def pick_accelerator(precision: str = "32-true") -> tuple[str, int]:
    """GPU only when Ray assigned this trial one (a 0-GPU trial on a GPU node must stay on CPU).
    A GPU assigned to a torch that cannot use it stops the trial before it builds anything
    (:class:`~sweeps.errors.GpuTorchError`), rather than train on the CPU beside an idle GPU; so
    does float16 mixed ``precision`` on the CPU (:func:`check_cpu_precision`)."""
    import ray

    accelerator = "cpu"
    if gpu_ids := ray.get_gpu_ids():
        host = ray.util.get_node_ip_address()
        problem = gpu_torch_problem(f"trial on {host} (GPU {','.join(map(str, gpu_ids))})")
        if problem:
            raise GpuTorchError(problem)
        accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    if accelerator == "cpu":
        check_cpu_precision(precision)
    return accelerator, 1


def check_cpu_precision(precision: str) -> None:
    """:class:`~sweeps.errors.CpuPrecisionError` for float16 mixed precision on the CPU, where
    Lightning trains bf16-mixed in its place: a trial a cluster's Ray gave no GPU
    (``resources.gpu: 0`` is refused before Ray starts, :func:`sweeps.spec.gpu.check_gpu_settings`;
    a local launch on a machine without a GPU before any trial, :func:`sweeps.driver.cluster.check_cluster`)."""
    if str(precision) in FLOAT16_MIXED:
        raise CpuPrecisionError(
            f"trainer.precision {precision} is float16 mixed precision, which Lightning runs on a "
            "GPU only, and Ray gave this trial none: Lightning would train it bf16-mixed while its "
            "records said float16; set trainer.precision: bf16-mixed, or give the trials a GPU "
            "(resources.gpu)"
        )


@dataclass
class TrialParts:
    """A trial's objects before its Trainer: data, module, the checkpoint to resume from, the
    report callback and the other callbacks."""

    dm: pl.LightningDataModule
    module: pl.LightningModule
    ckpt_path: str | None
    local_ckpt_dir: str
    report: TuneReport
    callbacks: list[pl.Callback]
    cuda_graphs: bool = False  # trainer.cuda_graphs: graphed training steps where on a GPU


def prepare_trial(
    plan: TrialPlan,
    settings: TrialSettings,
    checkpoint,
    trial_id: str,
    report_cls: type[TuneReport],
    extra_metrics: dict[str, Any],
    with_chaos: bool = True,
) -> TrialParts:
    """Seed, build and set up the datamodule and module, copy ``checkpoint`` (a Ray checkpoint or
    None) to local disk, and make the callbacks (``report_cls`` first; the chaos callback when the
    spec asks for it and ``with_chaos``)."""
    quiet_logs()
    STOP_REQUESTED.clear()  # a reused actor starts its next trial unstopped
    if settings.spec.chaos.fail_before_first_report and with_chaos:
        raise ChaosError(
            "chaos: injected failure before the first report (sweep spec `chaos.fail_before_first_report`)"
        )
    torch.set_num_threads(max(1, int(settings.resources.cpu)))
    pl.seed_everything(plan.seed, workers=True, verbose=False)
    dm = build_datamodule(plan.task, plan.seed)
    dm.prepare_data()
    dm.setup("fit")
    module = build_module(plan.model, dm)
    # the local copy of the checkpoint to resume from: in the trial's own working folder (Tune runs
    # each trial there), not a shared /tmp, and removed if anything fails before fit_trial owns it
    local_ckpt_dir = tempfile.mkdtemp(prefix="trial-resume-", dir=os.getcwd())
    try:
        restored = restore_checkpoint(
            checkpoint,
            local_ckpt_dir,
            log=lambda msg: print(f"[trial {trial_id}] {msg}", flush=True),
        )
    except BaseException:
        shutil.rmtree(local_ckpt_dir, ignore_errors=True)
        raise
    # reported with every result, so a recovery can be read back from result.json and results.csv
    extra_metrics = {
        **extra_metrics,
        "resumed_from": restored.name,
        "skipped_checkpoints": restored.skipped,
    }
    report = report_cls(time_offset=restored.time_offset, extra_metrics=extra_metrics)
    callbacks: list[pl.Callback] = [
        report,
        RngStateCallback(),
    ]  # RNG states in every checkpoint: exact resume
    if settings.stop_when is not None:  # first: the report at the same validation says it converged
        callbacks.insert(0, make_callback(settings.stop_when, report.extra_metrics))
    if settings.spec.chaos.fail_once_at_step and with_chaos:
        callbacks.append(
            Chaos(
                settings.spec.chaos.fail_once_at_step,
                Path(settings.chaos_dir) / f"{trial_id}.failed",
            )
        )
    return TrialParts(
        dm, module, restored.ckpt_path, local_ckpt_dir, report, callbacks,
        cuda_graphs=bool(plan.trainer.get("cuda_graphs")),
    )  # fmt: skip


def common_trainer_kwargs(plan: TrialPlan, parts: TrialParts, logger) -> dict[str, Any]:
    """The Trainer arguments every trainable passes: logger, callbacks, no Lightning checkpoints
    (they go to Ray through the report callback), quiet console, and the plan's trainer section."""
    return dict(
        logger=logger if logger is not None else False,
        callbacks=parts.callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=not getattr(parts.dm, "handles_distributed_sampling", False),
        **trainer_kwargs(plan.trainer),
    )


def fit_trial(
    trainer: pl.Trainer, parts: TrialParts, logger, heatmaps: bool, trial_id: str
) -> None:
    """Fit (from the restored checkpoint when resuming), log heatmaps, close W&B and the local
    checkpoint copy whatever happens, then hand Tune the final model's report.

    The last report waits for the W&B run to close (:attr:`TuneReport.hold_last`): Tune stops a
    trial at a scheduler's ``max_t``, and at the end of an experiment kills a stopping actor
    after about 10 s. Tune stops a trial earlier (a scheduler's decision) by raising
    ``SystemExit(0)`` from inside a report call; :class:`FinishOnStop` holds the process until
    this function has logged the heatmaps and closed the W&B run on that path too, then the stop
    goes on."""
    stop: SystemExit | None = None
    failed = True  # until fit returns or Tune stops the trial: a crash marks the W&B run failed
    try:
        try:
            if parts.cuda_graphs:  # the module's training hooks change (on a GPU only)
                print(f"[trial {trial_id}] {enable_cuda_graphs(parts.module, trainer)}", flush=True)
            with phases.phase("fit"):
                trainer.fit(parts.module, datamodule=parts.dm, ckpt_path=parts.ckpt_path)
                finish_fit(trainer, parts.module, parts.dm, parts.report)
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
            stop = exc
        failed = False
        if heatmaps:
            try:
                with phases.phase("heatmaps"):
                    log_heatmaps(logger, parts.module, parts.dm)
            except Exception as exc:  # a plotting problem must not fail a finished trial
                print(f"[trial {trial_id}] could not log attention heatmaps: {exc!r}")
    except BaseException as exc:
        if find_storage_fault(exc) is not None:  # W&B's files are on the failed storage too
            quiet_close(lambda: close_wandb(logger, exit_code=1))
            logger = None
        raise
    finally:
        with phases.phase("wandb_close"):
            close_wandb(logger, exit_code=1 if failed else 0)
        shutil.rmtree(parts.local_ckpt_dir, ignore_errors=True)
        if failed:
            parts.report.drop_held()
    parts.report.send_held()
    if stop is not None:
        raise stop
