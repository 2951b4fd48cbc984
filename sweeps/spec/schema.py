"""The sweep file's schema: pydantic models of every key a sweep file may set (the search keys
in :mod:`sweeps.spec.search_schema`), and :class:`SpecError`.

Unknown keys and bad values fail here with the key's path and what is allowed
(:func:`sweeps.spec.messages.format_validation`).
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from lightning_modules.metric_names import (
    FIT_METRICS,
    VAL_BLEU,
)
from sweeps.errors import SpecError  # noqa: F401 (raised here; importable from here too)
from sweeps.spec.fusion_schema import FusionSpec
from sweeps.spec.search_schema import (
    NATURAL_GOALS,
    ConstraintSpec,
    EarlyTerminateSpec,
    ObjectiveSpec,
    ParamSpec,
    StopWhenSpec,
    _Goal,
    _Strict,
    reported_metrics_text,
)
from sweeps.spec.selection_schema import HeldoutSpec, Seed, SeedsSpec, seeds_problem


class MetricSpec(_Goal):
    """What a sweep selects and stops on: one of the metrics a trial reports while it trains
    (``lightning_modules.metric_names.FIT_METRICS``); each is a results.csv column."""

    # the metric trials are selected and stopped on (a results.csv column); default: validation BLEU
    name: str = VAL_BLEU
    # maximize: a higher value of the metric is better; minimize: a lower one (a loss); without
    # it, the metric's own direction
    goal: Literal["maximize", "minimize"] = "maximize"

    @field_validator("name")
    @classmethod
    def _reported(cls, value: str) -> str:
        if value not in FIT_METRICS:
            timing = (
                " (decode_seconds is measured after training, by the timing stage: no trial can be "
                "selected or stopped on it)"
                if value == "decode_seconds"
                else ""
            )
            raise ValueError(
                f"{value!r} is not a metric the trials report{timing}; valid: {reported_metrics_text()}"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _goal_of_the_metric(cls, value: Any) -> Any:
        """Without a goal, the metric's own direction (``{name: val/loss}`` minimizes)."""
        if isinstance(value, dict) and "goal" not in value and "name" in value:
            natural = NATURAL_GOALS.get(value["name"])
            return {**value, "goal": natural} if natural else value
        return value

    @property
    def mode(self) -> str:
        return "max" if self.goal == "maximize" else "min"


#: the client processes an MPS server serves on one GPU (Volta and later): the smallest GPU share
#: a trial may hold is one of them
MPS_CLIENTS = 48


class ResourcesSpec(_Strict):
    """Per trial. ``gpu`` may be fractional (several trials packed on one GPU); ``workers`` > 1
    runs the trial as a DDP job of that many Ray Train workers, each with ``cpu``/``gpu``."""

    # CPUs each trial holds (each of its DDP workers, with workers > 1); Ray places trials by them
    cpu: float = Field(1.0, gt=0)
    # GPUs each trial (or DDP worker) holds: 0 trains on the CPU, 0.5 packs two on one GPU (two
    # trials, or two fused groups: a group holds one trial's share, its members 1/n each); auto:
    # as the plan chooses from the measured costs of the GPU (the fused groups, how many share a
    # GPU, graphs, CPU threads, MPS: docs/gpu.md), and the CPU where there is no GPU
    gpu: float | Literal["auto"] = Field(0.0)
    # processes per trial: 1 is one process; more runs the trial as a DDP job of Ray Train workers
    workers: int = Field(1, ge=1)
    # NVIDIA MPS, so the processes that share a GPU run their kernels side by side instead of
    # taking turns: auto starts a daemon when trials share GPUs (0 < gpu < 1) and the node has
    # nvidia-cuda-mps-control; on whenever trials use a GPU (a node without MPS is an error); off
    # never (YAML reads a bare on/off as true/false: taken as on/off). The launcher starts it for
    # the Ray it starts, cluster/slurm.sbatch on every node
    mps: Literal["auto", "on", "off"] = "auto"
    # the GPU kind the plan costs the arrangement on (a name of sweeps/plan/step_costs.json, or
    # nvidia-smi's; another takes the nearest in the table): for a plan made off the GPU nodes, a
    # login node or a laptop launching onto a cluster; default: this machine's first GPU
    gpu_kind: str | None = None

    @field_validator("mps", mode="before")
    @classmethod
    def _yaml_switch(cls, value: Any) -> Any:
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    _auto_gpu: bool = PrivateAttr(False)

    @field_validator("gpu", mode="before")
    @classmethod
    def _number_or_auto(cls, value: Any) -> Any:
        """One line for a word that is neither (pydantic would name both arms of the union), or
        a yes/no value (pydantic would read true as 1)."""
        if isinstance(value, bool):
            raise ValueError(
                f"{value!r} is a yes/no value; the GPUs each trial holds: a number (0, 0.5, 1) or "
                "auto"
            )
        if isinstance(value, str) and value != "auto":
            try:
                float(value)
            except ValueError:
                raise ValueError(
                    f"the GPUs each trial holds: a number (0, 0.5, 1) or auto (got {value!r})"
                ) from None
        return value

    @field_validator("gpu")
    @classmethod
    def _whole_or_fraction(cls, v: float | str) -> float | str:
        if isinstance(v, str):
            return v
        if v < 0:
            raise ValueError("gpu must be 0 or more (0 trains on the CPU), or auto")
        if v > 1:
            raise ValueError(
                f"{v:g} GPUs a trial: a trial (or each of its DDP workers) trains on one GPU, so the "
                f"others would stay reserved and idle; for {v:g} GPUs a trial write workers: "
                f"{max(2, round(v))} with gpu: 1 (a DDP job, one GPU a worker: it needs "
                f"{max(2, round(v))} GPUs on one node, or on a cluster's nodes together), else "
                "gpu: 1"
            )
        if 0 < v < 1 / MPS_CLIENTS:
            raise ValueError(
                f"gpu {v:g} packs {round(1 / v)} trials on one GPU; NVIDIA MPS serves at most "
                f"{MPS_CLIENTS} processes a GPU and each holds a CUDA context of its own: give "
                f"1/{MPS_CLIENTS} ({1 / MPS_CLIENTS:.3g}) or more, e.g. gpu: 0.125 (8 to a GPU)"
            )
        return v

    @model_validator(mode="after")
    def _auto_is_a_gpu_each(self) -> ResourcesSpec:
        """``gpu: auto`` reads as one GPU a trial (it asks for GPUs: planned for them, the CPU
        where there are none) until the launch's arrangement gives each trial its share."""
        if self.gpu == "auto":
            self.gpu = 1.0
            self._auto_gpu = True
        return self

    @property
    def auto_gpu(self) -> bool:
        """Whether the plan chooses each trial's GPU share (``gpu: auto``)."""
        return self._auto_gpu

    @property
    def asked_gpu(self) -> str:
        """``gpu`` as the sweep file gave it, for messages: ``auto``, or the number."""
        return "auto" if self._auto_gpu else f"{self.gpu:g}"


# A count of batches/steps (int) or a fraction of an epoch (float), as Lightning takes them.
Positive = Annotated[int | float, Field(gt=0)]
NonNegative = Annotated[int | float, Field(ge=0)]
#: the trainer keys Lightning reads as a count when an int and as a fraction when a float:
#: key -> (what the fraction is of, what the count counts)
FRACTION_OR_COUNT = {
    "val_check_interval": ("a fraction of an epoch", "training batches between validations"),
    "limit_train_batches": ("a fraction of each epoch", "training batches per epoch"),
    "limit_val_batches": ("a fraction of the validation set", "validation batches"),
}


class TrainerSpec(_Strict):
    """The Lightning Trainer settings a sweep may set (the rest are fixed by the trial)."""

    # every number here is a count, a fraction or a bound: infinity (.inf) is none of them
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # optimizer steps a trial trains for (Lightning's global steps): the length of every trial
    max_steps: int = Field(1000, ge=1)
    # epochs at most; null: no limit, max_steps alone ends training
    max_epochs: int | None = Field(None, ge=1)
    # validate, report to Tune and checkpoint every N training batches (an int, counted across
    # epochs) or every fraction of an epoch (a float); null: once per epoch
    val_check_interval: Positive | None = None
    # validate every N epochs (with a fractional val_check_interval); null: Lightning's default, 1
    check_val_every_n_epoch: int | None = Field(None, ge=1)
    # training batches per epoch: a count (int) or a fraction of the epoch (float); null: all
    limit_train_batches: Positive | None = None
    # validation batches: a count (int) or a fraction of the validation set (float); null: all.
    # Not 0: validation off, no trial would report its metric (reports come with validation)
    limit_val_batches: NonNegative | None = None
    # the gradients' norm is clipped to this at every step; 0 or null: no clipping
    gradient_clip_val: float | None = Field(1.0, ge=0)
    # batches whose gradients are summed into one optimizer step (1: a step per batch)
    accumulate_grad_batches: int = Field(1, ge=1)
    # Lightning's precision: 32-true is float32; 16-mixed and bf16-mixed compute in half on a GPU;
    # on a CPU bf16-mixed only (16-mixed is refused there: Lightning would swap it for bf16-mixed)
    precision: str = "32-true"
    # steps between two logs of the training metrics (train/loss) to W&B
    log_every_n_steps: int = Field(50, ge=1)
    # torch's deterministic algorithms only: the same run gives the same numbers on a GPU, slower
    deterministic: bool = False
    # capture each training step (forward, backward, clipping, Adam) as a CUDA graph per batch
    # shape and replay it: far fewer kernel launches for these small models. Trials on a GPU only
    # (a trial that falls back to the CPU trains as usual and says so), at precision 32-true, one
    # batch per step; other dropout draws than eager steps, the same maths (docs/gpu.md)
    cuda_graphs: bool = False

    @model_validator(mode="after")
    def _graphable(self) -> TrainerSpec:
        if self.cuda_graphs:
            if self.precision not in ("32-true", "32"):
                raise ValueError(
                    f"cuda_graphs captures float32 steps; precision {self.precision} is not "
                    "(set precision: 32-true, or cuda_graphs: false)"
                )
            if self.accumulate_grad_batches != 1:
                raise ValueError(
                    "cuda_graphs replays one whole step (forward, backward, Adam) per batch; "
                    "accumulate_grad_batches must be 1 with it (or set cuda_graphs: false)"
                )
        return self

    @field_validator(*FRACTION_OR_COUNT)
    @classmethod
    def _fraction_or_count(cls, value: Any, info: ValidationInfo) -> Any:
        """Lightning reads these as a count when whole (an int) and as a fraction when a float,
        which must then be 0.0 to 1.0: above it, it raises when the trial starts."""
        if isinstance(value, float) and value > 1.0:
            fraction, count = FRACTION_OR_COUNT[info.field_name]
            raise ValueError(
                f"{value!r} is above 1.0: Lightning reads a float as {fraction} (0.0 to 1.0) and "
                f"a whole number as a count of {count}; write a fraction up to 1.0, or a whole "
                f"number (e.g. {max(1, round(value))})"
            )
        return value

    @field_validator("limit_val_batches")
    @classmethod
    def _validates(cls, value: Any) -> Any:
        """0 turns Lightning's validation off: the trials report to Tune when they validate, so
        none would report the sweep's metric, and Tune stops the launch with a traceback."""
        if value == 0:
            raise ValueError(
                f"{value!r} turns validation off, so no trial would report the sweep's metric "
                "(trials report when they validate); give a count of validation batches (e.g. "
                "2) or a fraction above 0 (e.g. 0.25)"
            )
        return value

    @field_validator("precision", mode="before")
    @classmethod
    def _lightning_precision(cls, value: Any) -> str:
        text = str(value)
        if text not in LIGHTNING_PRECISIONS:
            raise ValueError(
                f"{value!r} is not a Lightning precision; valid: {', '.join(LIGHTNING_PRECISIONS)}"
            )
        if (
            text.startswith("transformer-engine")
            and importlib.util.find_spec("transformer_engine") is None
        ):  # else each trial's Trainer would refuse it, after Ray started
            raise ValueError(
                f"{text} needs NVIDIA's Transformer Engine, which this Python lacks: install it "
                "where the trials run (pip install 'transformer-engine[pytorch]'), or choose "
                "bf16-mixed"
            )
        return text


#: what ``lightning.pytorch.Trainer(precision=...)`` accepts (Lightning 2.x's ``_PRECISION_INPUT``),
#: written out so a dry run needs no Lightning import; the legacy spellings (16, 32, bf16) included
LIGHTNING_PRECISIONS = (
    "32-true",
    "16-mixed",
    "bf16-mixed",
    "16-true",
    "bf16-true",
    "64-true",
    "transformer-engine",
    "transformer-engine-float16",
    "16",
    "32",
    "64",
    "bf16",
)


class StorageSpec(_Strict):
    """Where Ray keeps trial directories and checkpoints: a local path (default: the --output
    folder) or shared storage (``s3://...``, ``gs://...``, an NFS path) for multi-node clusters."""

    # where trial folders and checkpoints go; null: the --output folder (s3://, gs://, NFS: cluster);
    # a relative local path is taken from the folder the launch runs in
    path: str | None = None
    # checkpoints kept per trial, the newest (older ones are deleted as new ones are written)
    keep_checkpoints: int = Field(2, ge=1)

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        """A local path made absolute, as the task's folders are: Tune takes only a URI or an
        absolute path, and the trials run in folders of their own."""
        if value is None or "://" in value:
            return value
        return os.path.abspath(os.path.expanduser(value))


class FailureSpec(_Strict):
    # retries of a failed trial, each from its last checkpoint, before its status is error (0:
    # none); a trial whose node was lost moves instead, without a charge
    max_failures: int = Field(2, ge=0)


class BudgetSpec(_Strict):
    """What the sweep may spend, over all its runs (:mod:`sweeps.driver.budget`). Once one is spent no
    trial starts, the running ones stop at their last checkpoint with the status ``budget``, and
    ``--resume --set budget.hours=...`` (a larger budget) continues them."""

    hours: float | None = Field(
        None,
        gt=0,
        description="Wall-clock hours the sweep may run, every stage of it (training, timing, "
        "held-out evaluation), summed over its runs (resumes, requeues); the time between runs "
        "is not charged.",
    )
    cpu_hours: float | None = Field(
        None,
        gt=0,
        description="CPU-hours the running trials and the timing and held-out processes may "
        "hold (CPUs x hours).",
    )
    gpu_hours: float | None = Field(
        None,
        gt=0,
        description="GPU-hours the running trials and the timing and held-out processes may "
        "hold (GPUs x hours).",
    )


class WandbSpec(_Strict):
    # the W&B project every trial's run goes to
    project: str = "memory-attention"
    # the W&B team or user that owns the project; null: the default entity of the W&B login
    entity: str | None = None
    # the W&B group of the sweep's runs; null: the sweep's name
    group: str | None = None
    # tags on every run of the sweep
    tags: list[str] = Field(default_factory=list)
    notes: str | None = None  # every run's W&B notes (the run page's description)
    # auto: WANDB_MODE if set, else online with W&B credentials and offline without; online needs
    # credentials; offline writes run folders to upload later (wandb sync); disabled: no W&B
    mode: Literal["auto", "online", "offline", "disabled"] = "auto"
    # each trial's run gets attention heatmaps of a few validation sentences when it ends
    log_heatmaps: bool = True


class SearchSpec(_Strict):
    # Optuna's sampler: tpe, random, or nsga2 (NSGAIISampler, for multi-objective studies)
    sampler: Literal["tpe", "random", "nsga2"] = "tpe"
    # the samplers' base seed: each Optuna study (a cell and seed) samples from a seed drawn from it
    # (by numpy's SeedSequence, which takes whole numbers from 0)
    seed: int = 0

    @field_validator("seed")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(
                f"{value} is out of range; the samplers' base seed is a whole number from 0 (each "
                f"study's seed is drawn from it by numpy's SeedSequence, which refuses negative "
                f"ones), e.g. search: {{seed: 0}}"
            )
        return value


class TimingSpec(_Strict):
    """The decode-timing stage after the Tune run (:mod:`sweeps.timing`): each finished trial's
    final model decodes the ``split`` alone on a node (or a GPU), ``warmup`` untimed passes, then
    at least ``repeats`` timed ones, more until the median is known to ``precision`` (the median is
    the results' ``decode_seconds``), ``threads`` torch
    threads on CPU, the sweep's beam size. ``fresh_process`` (CPU): time in a new process pinned
    to ``threads`` CPUs rather than inside the Ray worker. ``measure`` adds the training step
    (``train_step_seconds``, ``train_tokens_per_second``) and peak memory (``train_peak_mb``,
    ``decode_peak_mb``), taken under the same rules."""

    # time each finished trial's final model after the Tune run (decode_seconds); false: no stage
    enabled: bool = True
    # timed passes at least (exactly, with precision: null)
    repeats: int = Field(5, ge=1)
    # adaptive repeats (the default): go on until the median's notch (~95%) is within `precision`
    # of it, or `max_seconds` per trial and measure have passed (timed passes and the waits for a
    # slow machine, shared among the `processes` on CPU); `precision: null`: exactly `repeats`
    precision: float | None = Field(0.02, gt=0, lt=1)
    max_seconds: float = Field(30.0, gt=0)  # seconds at most per trial and measure (see precision)
    # before its passes, each timing process finds the machine's speed (the fastest of repeated
    # probes over this long); a pass that ran slower than that speed allows is timed again
    calibration_seconds: float = Field(2.0, gt=0)
    warmup: int = Field(1, ge=0)  # untimed passes first (caches, lazy set-up)
    # torch threads when timing on the CPU (the CPUs a fresh process is pinned to)
    threads: int = Field(1, ge=1)
    # cuda: time on a GPU; cpu: on a CPU; auto: on a GPU when the Ray cluster has one, else a CPU
    device: Literal["auto", "cpu", "cuda"] = "auto"
    fresh_process: bool = True  # on CPU: time in a new pinned process, not in the Ray worker
    # with fresh_process: time in this many fresh processes and keep the fastest's median (a
    # process can run slow for its whole life: see sweeps.timing.remote.run_jobs)
    processes: int = Field(3, ge=1)
    # each fresh process times up to this many models one after another (one start-up and one
    # calibration for them all; 1: a process per model)
    models_per_process: int = Field(8, ge=1)
    split: Literal["valid", "test"] = "valid"  # the data split the timed passes decode
    # what each model's timing measures: decode time, the training step (seconds per step and
    # tokens/s on the study's batches, timed like decode time on a copy of the model) and peak
    # memory (a training step's and decoding's, above the process's footprint before the work)
    measure: list[Literal["decode", "train", "memory"]] = Field(
        default_factory=lambda: ["decode", "train", "memory"], min_length=1
    )
    # training steps (the first batches of the study's training data) in one timed pass
    train_steps: int = Field(4, ge=1)
    # the CPU priority of the timing processes: `inherit` keeps the Ray worker's (Ray starts its
    # workers at niceness 15, below everything else on a node, unless its nodes were started with
    # RAY_worker_niceness=0); `normal` runs them at niceness 0 beside a node's other processes,
    # where the worker may raise its priority (root or CAP_SYS_NICE; else the stage says it could not)
    priority: Literal["inherit", "normal"] = "inherit"


class ChaosSpec(_Strict):
    """Fault injection for testing recovery: ``fail_once_at_step``: each trial raises once at this
    global step; ``fail_before_first_report``: every attempt of every trial raises while it sets
    up, before it reports anything (a trial that never produces a result)."""

    # each trial raises once at this global step (retries from a checkpoint); null: never
    fail_once_at_step: int | None = Field(None, ge=1)
    # every attempt of every trial raises while it sets up, before it reports anything
    fail_before_first_report: bool = False


class TeacherSpec(_Strict):
    """A grid variant's teacher: ``grid.model: [..., {attention: memory, distill_weight: 1,
    teacher: {cell: {attention: bahdanau}}}]``. Each student trial of the variant's cells waits
    until its teacher's trials are done (the teacher cell of the same task, length and other grid
    values, same seed), then trains with the chosen teacher's checkpoint as
    ``model.teacher_checkpoint`` (the §3.1 objective: docs/distillation.md). A cell with
    ``distill_weight: 0`` and ``init_from_teacher: none`` needs no teacher and runs at once."""

    cell: dict[str, Any] = Field(
        ...,
        min_length=1,
        description="The teacher cell's values that differ from the student's, as the grid writes "
        "them: keys of the variant's section (`attention: bahdanau`) or dotted keys "
        "(`model.attention`). The student's values on the grid's other axes (task.max_length...) "
        "must match too; exactly one cell of the sweep may match.",
    )
    pick: Literal["best"] = Field(
        "best",
        description="Which of the teacher unit's trials teaches: the best by the sweep's metric "
        "over its Optuna samples (the only trial without a search).",
    )


class SweepSpec(_Strict):
    name: str
    description: str = ""
    task: dict[str, Any]
    model: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, Any] = Field(default_factory=dict)
    parameters: dict[str, ParamSpec] = Field(default_factory=dict)
    num_samples: int = Field(1, ge=1)
    search: SearchSpec = Field(default_factory=SearchSpec)
    # a list (one Optuna study per cell and seed), or {values, per_configuration, objective}
    seeds: Annotated[
        Annotated[Annotated[list[Seed], Field(min_length=1)], Tag("list")]
        | Annotated[SeedsSpec, Tag("mapping")],
        Discriminator(lambda v: "mapping" if isinstance(v, dict | SeedsSpec) else "list"),
    ] = Field(default_factory=lambda: [0])
    metric: MetricSpec = Field(default_factory=MetricSpec)
    # multi-objective studies (sweeps.spec.objectives, sweeps.search.moo): instead of `metric`
    objectives: list[ObjectiveSpec] = Field(default_factory=list)
    constraints: list[ConstraintSpec] = Field(default_factory=list)
    early_terminate: EarlyTerminateSpec = Field(default_factory=EarlyTerminateSpec)
    stop_when: StopWhenSpec | None = (
        None  # a trial whose metric converged stops (sweeps.trial.stop_when)
    )
    trainer: TrainerSpec = Field(default_factory=TrainerSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    # trials of one mechanism and sizes train as one fused model (sweeps.plan.fusion);
    # `fusion: off` trains each alone
    fusion: FusionSpec = Field(default_factory=FusionSpec)
    max_concurrent_trials: int | None = Field(None, ge=1)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    failure: FailureSpec = Field(default_factory=FailureSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    wandb: WandbSpec = Field(default_factory=WandbSpec)
    timing: TimingSpec = Field(default_factory=TimingSpec)
    heldout: HeldoutSpec = Field(default_factory=HeldoutSpec)
    warm_start: str | None = Field(
        None,
        description="An earlier sweep's output folder (or its optuna.journal): its finished trials of "
        "identical plan are reused, not retrained, and its Optuna trials are told to the new studies.",
    )
    chaos: ChaosSpec = Field(default_factory=ChaosSpec)
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @property
    def seed_values(self) -> list[int]:
        """The seeds, from either form of ``seeds:``."""
        return list(self.seeds.values if isinstance(self.seeds, SeedsSpec) else self.seeds)

    @property
    def confirm_seeds(self) -> list[int]:
        """``seeds.confirm``: the fresh seeds the chosen configurations are retrained on."""
        return list(self.seeds.confirm) if isinstance(self.seeds, SeedsSpec) else []

    @property
    def per_configuration(self) -> bool:
        """Configurations judged over seeds (``seeds: {per_configuration: true}``) with a search."""
        return isinstance(self.seeds, SeedsSpec) and self.seeds.per_configuration

    @property
    def seed_objective(self) -> str:
        """How the chosen trials' figures are taken over seeds: ``seeds.objective`` where
        configurations are judged over seeds, else each seed's own choice, then the mean."""
        return self.seeds.objective if self.per_configuration else "mean"

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds_form(cls, value: Any) -> Any:
        """A number or a word is neither form (``seeds: 3`` is not three seeds): one line with
        both. The list form's seeds as :func:`~sweeps.spec.selection_schema.seeds_problem` checks
        them, each once (a seed twice would train the same trials twice)."""
        if not isinstance(value, list | tuple | dict | SeedsSpec):
            raise ValueError(
                "a list of seeds (e.g. [0, 1, 2]: three seeds) or a mapping "
                f"({{values: [0, 1, 2], per_configuration: true}}) (got {value!r})"
            )
        problem = seeds_problem(value, "seeds: [0, 1, 2]")
        if problem:
            raise ValueError(problem)
        if isinstance(value, list | tuple):
            scalars = [v for v in value if isinstance(v, int | float | str)]
            if len(set(scalars)) != len(scalars):
                raise ValueError(f"repeats a seed: {list(value)}; list each seed once")
        return value

    @field_validator("profiles")
    @classmethod
    def _profile_names(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name):
                raise ValueError(
                    f"profile name {name!r}: use letters, digits, '_', '-' (it is typed as --profile NAME)"
                )
        return v

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError(
                "use letters, digits, '_', '-', '.' only (it names folders and W&B groups)"
            )
        return v
