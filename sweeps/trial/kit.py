"""The trial kit: what the single-process trainable (:mod:`sweeps.trial.trainable`) and the DDP trainable
(:mod:`sweeps.trial.ddp`) share -- seeding, data and module, restoring a
checkpoint, the report-to-Ray callback, fault injection, the Trainer's arguments, and fitting
(the W&B run: :mod:`sweeps.trial.wandb_logger`).

Each trial reports to Ray after every validation, with a checkpoint, so a retried trial
(``FailureConfig(max_failures)``) or a resumed sweep continues from where it stopped. It logs to
W&B through Lightning's ``WandbLogger`` only (one logging path: no driver-side W&B callback).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from ray import tune

from datamodules.resumable import RngStateCallback
from sweeps.errors import ChaosError  # noqa: F401 (raised here; importable from here too)
from sweeps.layout import CHECKPOINT_FILE, HYPOTHESES_FILE, REFERENCES_FILE, TRIAL_STATE_FILE
from sweeps.spec import TrialPlan
from sweeps.storage import find_storage_fault, quiet_close
from sweeps.trial import phases
from sweeps.trial.build import build_datamodule, build_module
from sweeps.trial.settings import TrialSettings
from sweeps.trial.wandb_logger import close_wandb, log_heatmaps

EXTRA_FILE = TRIAL_STATE_FILE


class TuneReport(pl.Callback):
    """Reports ``trainer.callback_metrics`` to Tune after each validation, with a checkpoint.

    The project's own callback (rather than Ray's) so it always subclasses the same Lightning
    ``Callback`` class as the Trainer in use.
    """

    def __init__(
        self, time_offset: float = 0.0, extra_metrics: dict[str, Any] | None = None
    ) -> None:
        self.time_offset = time_offset
        self.extra_metrics = dict(extra_metrics or {})
        self.start = time.perf_counter()
        self.last_reported_step = -1

    def train_seconds(self) -> float:
        return self.time_offset + time.perf_counter() - self.start

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.report(trainer)

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if (
            STOP_REQUESTED.is_set()
        ):  # Tune is stopping this trial between reports (see FinishOnStop)
            raise SystemExit(0)

    def report(self, trainer: pl.Trainer) -> None:
        metrics = {
            k: float(v)
            for k, v in trainer.callback_metrics.items()
            if torch.is_tensor(v) and v.numel() == 1
        }
        metrics.update(self.extra_metrics)
        metrics.update(
            step=trainer.global_step, epoch=trainer.current_epoch, train_time_s=self.train_seconds()
        )
        with tempfile.TemporaryDirectory() as tmp:
            with phases.phase("checkpoint"):
                save_checkpoint_atomic(trainer, os.path.join(tmp, CHECKPOINT_FILE))
                if trainer.is_global_zero:
                    Path(tmp, EXTRA_FILE).write_text(
                        json.dumps({"train_time_s": metrics["train_time_s"]})
                    )
                    write_hypotheses(trainer.lightning_module, tmp)
            with phases.phase(
                "report"
            ):  # Tune's report: the checkpoint copied into the trial's storage
                self.send(metrics, tmp, trainer)
        self.last_reported_step = trainer.global_step

    def send(self, metrics: dict[str, Any], checkpoint_dir: str, trainer: pl.Trainer) -> None:
        """Hand one report to Ray: here Tune's session; :mod:`sweeps.trial.ddp` sends to Ray Train."""
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(checkpoint_dir))


def write_hypotheses(module: pl.LightningModule, folder: str) -> None:
    """The validation hypotheses and references this report's BLEU was computed from, one sentence
    a line, in the validation set's order, beside the checkpoint (``val_hypotheses.txt``,
    ``val_references.txt``): the report's paired bootstrap between models reads them
    (:mod:`sweeps.report.findings`) without decoding again or importing torch."""
    decoded = getattr(module, "last_decoded", {}).get("val")
    if decoded:
        hyps, refs = decoded
        Path(folder, HYPOTHESES_FILE).write_text("".join(h.replace("\n", " ") + "\n" for h in hyps))
        Path(folder, REFERENCES_FILE).write_text("".join(r.replace("\n", " ") + "\n" for r in refs))


class Chaos(pl.Callback):
    """Raises once at ``step`` (per trial, remembered in a marker file) to test fault tolerance."""

    def __init__(self, step: int, marker: Path) -> None:
        self.step = step
        self.marker = marker

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step >= self.step and not self.marker.exists():
            self.marker.parent.mkdir(parents=True, exist_ok=True)
            self.marker.write_text("failed once\n")
            raise ChaosError(
                f"chaos: injected failure at step {trainer.global_step} (sweep spec `chaos` block)"
            )


def placement_metrics() -> dict[str, Any]:
    """Where Ray placed this process: its node id, the GPU ids Ray assigned ("" for none) and the
    share of a GPU it holds (``gpu_share``, e.g. 0.5 when trials pack two to a GPU). Reported with
    every result, so a sweep's placement on a cluster can be read back."""
    import ray

    ctx = ray.get_runtime_context()
    return {
        "node_id": ctx.get_node_id(),
        "gpu_ids": ",".join(str(g) for g in ray.get_gpu_ids()),
        "gpu_share": float(ctx.get_assigned_resources().get("GPU", 0.0)),
    }


@dataclass
class Restored:
    """What :func:`restore_checkpoint` found: the local Lightning checkpoint to resume from (None:
    start at step 0), the training time already spent, the checkpoint folder used and how many
    newer ones did not load."""

    ckpt_path: str | None = None
    time_offset: float = 0.0
    name: str = ""
    skipped: int = 0


def checkpoint_candidates(checkpoint) -> list:
    """``checkpoint`` (a Ray ``Checkpoint``) and then the older ``checkpoint_NNNNNN`` folders of
    the same trial, newest first, on whatever filesystem holds them (local disk, NFS, a bucket)."""
    import pyarrow.fs

    fs, path = checkpoint.filesystem, checkpoint.path.rstrip("/")
    parent, name = os.path.dirname(path), os.path.basename(path)
    try:
        infos = fs.get_file_info(pyarrow.fs.FileSelector(parent))
    except OSError:
        infos = []
    older = sorted(
        (
            i.base_name
            for i in infos
            if i.type == pyarrow.fs.FileType.Directory
            and re.fullmatch(r"checkpoint_\d+", i.base_name)
            and i.base_name < name
        ),
        reverse=True,
    )
    return [checkpoint] + [type(checkpoint)(path=f"{parent}/{n}", filesystem=fs) for n in older]


def restore_checkpoint(checkpoint, local_dir: str, log=print) -> Restored:
    """Copy the newest of the trial's checkpoints that loads to ``local_dir``.

    A checkpoint that does not load (truncated by a crash, say) is skipped for the previous one,
    and the log says so; when none loads the trial starts again from step 0 and says that --
    never the same failing restore on every retry."""
    if checkpoint is None:
        return Restored()
    skipped = 0
    for candidate in checkpoint_candidates(checkpoint):
        target = os.path.join(local_dir, CHECKPOINT_FILE)
        try:
            with candidate.as_directory() as d:
                shutil.copy(os.path.join(d, CHECKPOINT_FILE), target)
                extra = Path(d, EXTRA_FILE)
                time_offset = (
                    float(json.loads(extra.read_text()).get("train_time_s", 0.0))
                    if extra.exists()
                    else 0.0
                )
            torch.load(
                target, map_location="cpu", weights_only=False
            )  # our own file: does it load whole?
        except Exception as exc:  # noqa: BLE001 -- any unreadable checkpoint is skipped the same way
            lines = str(exc).strip().splitlines()
            log(
                f"checkpoint {candidate.path} does not load ({lines[-1] if lines else type(exc).__name__}); "
                f"trying the previous one"
            )
            skipped += 1
            continue
        name = os.path.basename(candidate.path.rstrip("/"))
        if skipped:
            log(
                f"resuming from {candidate.path}, the newest checkpoint that loads ({skipped} newer skipped)"
            )
        return Restored(target, time_offset, name, skipped)
    log(f"none of this trial's {skipped} checkpoint(s) loads: training restarts from step 0")
    return Restored(skipped=skipped)


def save_checkpoint_atomic(trainer: pl.Trainer, path: str) -> None:
    """``trainer.save_checkpoint`` to a temporary name, flushed to disk, then renamed: a crash
    mid-write leaves no half-written ``path``. Collective under DDP (rank 0 writes)."""
    partial = path + ".partial"
    trainer.save_checkpoint(
        partial, weights_only=False
    )  # the whole state: a resumed trial needs its optimiser
    if trainer.is_global_zero:
        with open(partial, "rb") as f:
            os.fsync(f.fileno())
        os.replace(partial, path)


def finish_fit(
    trainer: pl.Trainer, module: pl.LightningModule, dm: pl.LightningDataModule, report: TuneReport
) -> None:
    """After ``fit``: when the run ended between validations, validate once more so the final
    model is what the trial reports."""
    if report.last_reported_step != trainer.global_step:
        trainer.validate(module, datamodule=dm, verbose=False)
        if report.last_reported_step != trainer.global_step:
            report.report(trainer)


def pick_accelerator() -> tuple[str, int]:
    """GPU only when Ray assigned this trial one (a 0-GPU trial on a GPU node must stay on CPU)."""
    import ray

    if ray.get_gpu_ids() and torch.cuda.is_available():
        return "gpu", 1
    return "cpu", 1


def trainer_kwargs(trainer_cfg: dict[str, Any]) -> dict[str, Any]:
    kw = {k: v for k, v in trainer_cfg.items() if v is not None}
    if isinstance(kw.get("val_check_interval"), int):
        # count validation intervals in global steps across epochs, not batches within one epoch
        kw.setdefault("check_val_every_n_epoch", None)
    if "max_epochs" not in kw:
        kw["max_epochs"] = -1  # max_steps bounds the run
    return kw


# Lines every trial would print at every start or report, forwarded to the study's console.
QUIET_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",  # GPU/TPU available, tips
    "lightning.fabric.utilities.rank_zero",
    "ray.train._internal.storage",  # "Checkpoint successfully created at ..."
    "ray.train.v2._internal.execution.storage",
)


def quiet_logs() -> None:
    """Raise the per-trial banners to warnings only; warnings and errors still reach the console."""
    import logging
    import warnings

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # Lightning's own notice about torch's pytree API, once per trial; nothing a study can change
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")


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
    if settings.chaos_before_report and with_chaos:
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
        from sweeps.trial.stop_when import make_callback

        callbacks.insert(0, make_callback(settings.stop_when, report.extra_metrics))
    if settings.chaos_step and with_chaos:
        callbacks.append(
            Chaos(settings.chaos_step, Path(settings.chaos_dir) / f"{trial_id}.failed")
        )
    return TrialParts(dm, module, restored.ckpt_path, local_ckpt_dir, report, callbacks)


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
    """Fit (from the restored checkpoint when resuming), report the final model, log heatmaps, and
    close W&B and the local checkpoint copy whatever happens.

    Tune stops a trial (a scheduler's decision, or ``max_t``) by raising ``SystemExit(0)`` from
    inside the report call; :class:`FinishOnStop` holds the process until this function has
    logged the heatmaps and closed the W&B run on that path too, then the stop goes on."""
    stop: SystemExit | None = None
    failed = True  # until fit returns or Tune stops the trial: a crash marks the W&B run failed
    try:
        try:
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
    if stop is not None:
        raise stop


#: seconds a stopped trial's process waits for its training thread to close W&B (heatmaps included)
STOP_GRACE_S = 120.0
#: set by FinishOnStop when Tune stops the trial while it trains (a Ctrl-C of the sweep, say): the
#: report callback then ends the fit at the next step, the way a scheduler's stop ends it at a report
STOP_REQUESTED = threading.Event()


class FinishOnStop:
    """Mixin for Tune's function trainable (through the trainable's ``__mixins__``): when Tune
    stops a trial, wait for the training thread to finish before the actor goes.

    Ray's ``FunctionTrainable.cleanup`` lets the training thread go without waiting for it
    (``session.finish(timeout=0)``), and the actor's process exits while the thread is still
    unwinding the ``SystemExit`` of the stop. W&B's service then sees its client vanish mid-run and
    abandons the run: a 7-byte ``.wandb`` file, state unknown. Waiting here lets
    :func:`fit_trial` log the heatmaps and ``wandb.finish()`` the run first."""

    def cleanup(self) -> None:
        self._finish_training_thread()
        super().cleanup()  # type: ignore[misc]

    def reset_config(self, new_config) -> bool:
        """The actor runs the next trial (``reuse_actors``): Tune gives the stopped trial's thread
        only ``TUNE_FUNCTION_THREAD_TIMEOUT_S`` (2 s) to end, then fails the *next* trial ("Could
        not re-use actor"); closing W&B and logging heatmaps takes longer. Wait here as on cleanup."""
        self._finish_training_thread()
        return super().reset_config(new_config)  # type: ignore[misc]

    @staticmethod
    def _finish_training_thread() -> None:
        from ray.train._internal.session import get_session

        session = get_session()
        thread = getattr(session, "training_thread", None)
        if (
            session is not None
            and session.training_started
            and thread is not None
            and thread.is_alive()
        ):
            session.stop_event.set()  # what session.finish does first: the thread leaves its report call
            session.continue_lock.release()
            STOP_REQUESTED.set()  # or, if it is training, at its next step
            thread.join(timeout=STOP_GRACE_S)
