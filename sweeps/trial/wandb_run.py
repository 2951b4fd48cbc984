"""A trial's W&B run without torch or Lightning: its config (the plan, flat and dotted, each key
once), ``wandb.init``'s arguments, a fused member's run (:class:`MemberRun`) and closing a run. The
Lightning logger of an unfused trial and the heatmaps are in :mod:`sweeps.trial.wandb_logger`."""

from __future__ import annotations

from typing import Any

from lightning_modules.metric_names import TRAIN_DISTILL, TRAIN_LOSS
from lightning_modules.presets import PRESETS
from sweeps.report.columns import BASELINE
from sweeps.report.selection import CONFIRM, ROLE, SELECT
from sweeps.spec import TrialPlan
from sweeps.spec.signatures import model_identity
from sweeps.trial.settings import TrialSettings


def wandb_config(plan: TrialPlan, module: Any = None) -> dict[str, Any]:
    """The trial's W&B config: its flat plan once (``cell``, ``seed``, the grid values and Optuna's
    samples under their flat names), then every other setting under its dotted name
    (``task.max_length``, ``trainer.max_steps``, ``model.hidden_size``). No key twice, no nulls:
    a model setting the preset supplies is taken from the built module's hyperparameters."""
    config = {k: v for k, v in plan.config.items() if v is not None}
    shown = set(plan.grid) | set(plan.params)  # dotted keys already there under a flat name
    for key, value in model_identity(plan.model).items():  # as results.csv's columns name them
        config.setdefault(key, value)
        shown.add(f"model.{key}")
    if plan.config.get("set"):  # a relative constraint's baseline (sweeps.search.baselines)
        config[BASELINE] = True
    if plan.config.get("teacher_checkpoint"):  # a student's: its flat teacher keys say it
        shown.add("model.teacher_checkpoint")
    resolved = dict(getattr(module, "hparams", {}) or {})
    for section in ("task", "model", "trainer"):
        values = dict(plan.sections[section])
        if section == "model":
            kwargs = resolved.get("attention_kwargs") or {}
            preset = PRESETS.get(str(resolved.get("preset") or values.get("preset")), {})
            values = {
                **preset,
                **{k: v for k, v in resolved.items() if k != "attention_kwargs" and v is not None},
                **kwargs,
                **{k: v for k, v in values.items() if v is not None},
            }
        for key, value in values.items():
            dotted = f"{section}.{key}"
            if value is None or dotted in shown:
                continue
            config[dotted] = value
    return config


def configuration_label(cell_slug: str, number: int) -> str:
    """``<cell>#<n>``, the W&B job type of a configuration's runs; W&B takes at most 64 characters,
    so a long cell name is cut and a digest of it kept."""
    label = f"{cell_slug}#{number}"
    if len(label) <= 64:
        return label
    import hashlib

    digest = hashlib.sha1(cell_slug.encode()).hexdigest()[:8]
    return f"{cell_slug[: 64 - len(digest) - len(str(number)) - 2]}~{digest}#{number}"


def run_arguments(
    settings: TrialSettings,
    plan: TrialPlan,
    trial_id: str,
    trial_name: str,
    module: Any = None,
) -> dict[str, Any] | None:
    """``wandb.init``'s arguments for this trial's run (its id is the trial id), or None when W&B
    is disabled. The API key is never passed here: wandb reads it from the environment or its own
    login. ``module``: the built module or anything with its ``hparams``."""
    wb = settings.wandb
    if wb.mode == "disabled":
        return None
    run_config = {**wandb_config(plan, module), "trial_id": trial_id, "sweep": settings.name}
    if getattr(settings, "sweep_id", None):  # this sweep's runs among the group's (the Report's)
        run_config["sweep_id"] = settings.sweep_id
    job_type, label = "train", ""
    if (
        "configuration" in plan.config
    ):  # judged over seeds (sweeps.search.over_seeds): its seeds' runs together
        job_type = configuration_label(plan.cell.slug, plan.config["configuration"])
        run_config["configuration_id"], label = (
            job_type,
            f" configuration={plan.config['configuration']}",
        )
    if plan.config.get(ROLE) == CONFIRM:  # retrained after the choice (sweeps.stages.confirm)
        run_config[ROLE], label = CONFIRM, label + " confirm"
    elif settings.spec.confirm_seeds:  # the W&B Report's panels tell the two kinds apart by it
        run_config[ROLE] = SELECT
    tags, notes = list(wb.tags), wb.notes
    teacher = plan.config.get("teacher")
    if (
        teacher
    ):  # a student (sweeps.search.teachers) names its teacher's run (its id is the trial id)
        tags.append(f"teacher:{teacher}")
        line = f"Taught by W&B run {teacher} (checkpoint {plan.config.get('teacher_checkpoint')})."
        notes = f"{notes}\n{line}" if notes else line
    return {
        "name": f"{plan.cell.name}{label} seed={plan.seed}"
        + (f" [{trial_name}]" if settings.has_search else ""),
        "project": wb.project,
        "dir": settings.wandb_dir,
        "id": trial_id,
        "resume": "allow",
        "entity": wb.entity,
        "group": wb.group or settings.name,
        "tags": tags,
        "notes": notes,
        "job_type": job_type,
        "config": run_config,
        "mode": wb.mode,
    }


#: results.csv's training figures: Lightning's logger records them only as ``<name>_step`` (every
#: ``log_every_n_steps``) and ``<name>_epoch``, which are not the reported values
REPORTED_TRAINING = (TRAIN_LOSS, TRAIN_DISTILL)


def log_reported_training(loggers: Any, metrics: dict[str, Any], step: int) -> None:
    """Log a report's training figures (:data:`REPORTED_TRAINING`) under results.csv's names, at
    the step its validation metrics were logged at (Lightning's: the report's step - 1), so a
    run's history holds every metric at every report as results.csv names it."""
    figures = {k: metrics[k] for k in REPORTED_TRAINING if metrics.get(k) is not None}
    if figures:
        for logger in loggers:
            logger.log_metrics(figures, step=max(step - 1, 0))


#: the W&B key of the attention heatmaps a trial logs at its end
HEATMAP_KEY = "val/attention"


class MemberRun:
    """A fused member's W&B run, written as Lightning's ``WandbLogger`` writes an unfused trial's
    (the same ``wandb.init`` arguments, ``trainer/global_step`` as every metric's step, the
    step inside each logged row), without importing torch or Lightning: the member's process
    trains nothing (:mod:`sweeps.trial.fused.member`)."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments
        self._run = None

    @property
    def experiment(self):
        """The run: ``wandb.init`` on first use, as ``WandbLogger.experiment``."""
        if self._run is None:
            import wandb

            self._run = wandb.run if wandb.run is not None else self._init(wandb)
        return self._run

    def _init(self, wandb):
        run = wandb.init(**self.arguments)
        run.define_metric("trainer/global_step")
        run.define_metric("*", step_metric="trainer/global_step", step_sync=True)
        return run

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        row = dict(metrics) if step is None else {**metrics, "trainer/global_step": step}
        self.experiment.log(row)

    def log_image(self, key: str, images: list[Any]) -> None:
        import wandb

        self.log_metrics({key: [wandb.Image(image) for image in images]})


def close_wandb(logger, exit_code: int = 0) -> None:
    """Finish the trial's W&B run (``exit_code`` 1: state failed, for an attempt that crashed;
    a retry continues the run in a new segment) and stop W&B's service while this process is
    whole: left to exit time, its teardown races Ray's worker shutdown and prints a
    ConnectionResetError."""
    if logger is None:
        return
    import wandb

    if wandb.run is not None:
        wandb.finish(exit_code=exit_code)
    wandb.teardown()
