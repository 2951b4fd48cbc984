"""One launch's plan: everything a launch decides before it starts anything, worked out once from
the sweep file and what is on disk, and handed to every stage as it is.

    plan = build_plan(sweep, output=Path("sweep-results"))
    print("\\n".join(describe(plan)))          # what --dry-run prints, and every launch

What it holds: the units (cell and seed) in the order the searcher hands them out, with their
expected length and their teachers; the warm start (the trials an earlier sweep finished, and its
Optuna trials); the fused groups and why some trials train alone; what each trial, group and
member reserves; whether the trials share GPUs under MPS; the folders the sweep writes; and the
budget lines (what earlier runs of this sweep charged, what the rest needs). No stage works any
part of it out again: the searcher is built from its units, groups and warm start, the trial
settings from its fused groups, the MPS daemon from its MPS decision.

Nothing here imports torch, Lightning or Ray: a plan is made, and printed by ``--dry-run``, before
either is needed (whether a model has a fused form is read from the signature cache, which asks
the model package only about a model section it has never seen).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeps.plan.arrangement import (
    Arrangement,
    arrangement_mps,
    local_gpu_name,
    plan_arrangement,
    seed_groups,
)
from sweeps.plan.cost import estimated_cost
from sweeps.plan.estimate import launch_lines
from sweeps.plan.folders import (
    Folder,
    check_teacher_checkpoints,
    check_test_split,
    data_notes,
    folder_datamodules,
    sweep_folders,
)
from sweeps.plan.fusion import FusionPlan, plan_fusion, unfusable
from sweeps.plan.mps import MpsPlan, plan_mps
from sweeps.plan.units import Unit, sweep_units
from sweeps.plan.warm_start import WarmStart, plan_warm_start
from sweeps.spec import Sweep
from sweeps.spec.signatures import save as save_signatures


@dataclass
class Paths:
    output: Path  # local folder for results, W&B files and the Optuna journal
    storage: str  # Ray Tune storage root (local path or s3:// gs://)

    def experiment(self, name: str) -> str:
        return self.storage.rstrip("/") + "/" + name


@dataclass(frozen=True)
class SweepPlan:
    """A launch's plan (module docstring). Immutable: made by :func:`build_plan`, read by every
    stage.

    Attributes:
        sweep: the loaded sweep file (its cells, resolved trial plans, teachers).
        output: the ``--output`` folder; ``storage``: where Tune keeps the experiment.
        units: per (cell, seed), in the sweep's plans' order, what the searcher hands out.
        warm: what a warm start reuses and tells (None without ``warm_start``).
        fusion: the fused groups, the trials that train alone and why.
        arrangement: how the trials use the GPUs, and what that is expected to give (None for
            trials on the CPU).
        mps: whether the trials share GPUs under an MPS daemon, and why.
        folders: every folder the sweep writes (checked before anything starts).
        data_notes: ``--dry-run``'s notes on task data the data stage would stop on.
        budget_lines: the budget, what earlier runs charged, estimates of the rest.
    """

    sweep: Sweep
    output: Path
    storage: str
    units: tuple[Unit, ...]
    warm: WarmStart | None
    fusion: FusionPlan
    arrangement: Arrangement | None
    mps: MpsPlan
    folders: tuple[Folder, ...]
    budget_lines: tuple[str, ...]
    data_notes: tuple[str, ...] = ()
    gpu_name: str | None = None

    @property
    def name(self) -> str:
        return self.sweep.name

    @property
    def spec(self) -> Any:
        return self.sweep.spec

    @property
    def paths(self) -> Paths:
        return Paths(output=self.output, storage=self.storage)

    @property
    def out_dir(self) -> Path:
        """``<output>/<name>``: results, W&B runs, the Optuna journal."""
        return self.output / self.sweep.name

    @property
    def to_train(self) -> int:
        """The trials this launch trains: every planned one but those a warm start reuses."""
        return self.sweep.num_trials - (self.warm.reused_count if self.warm is not None else 0)

    @property
    def trials_per_slot(self) -> int:
        """How many member trials one trial's resources hold: the fused groups' cap when any
        trial trains fused (``max_concurrent_trials`` counts groups' worth of trials), else 1."""
        return self.fusion.cap if self.fusion.active else 1


def build_plan(
    sweep: Sweep,
    output: Path,
    gpu_name: str | None = None,
    first_warm: dict[str, Any] | None = None,
) -> SweepPlan:
    """The plan of a launch of ``sweep`` writing under ``output`` (made once per launch).
    ``gpu_name``: the GPU to cost the arrangement for where ``resources.gpu_kind`` names none ("":
    none), a resume's first launch's (:func:`~sweeps.spec.launch_record.recorded_gpu_name`); by
    default this machine's. ``first_warm``: a resume's first launch's warm start, which it keeps
    (:func:`~sweeps.spec.launch_record.recorded_warm_start`)."""
    output = Path(output).resolve()
    spec = sweep.spec
    warm = plan_warm_start(sweep, first_warm)
    units = sweep_units(sweep, lambda p: estimated_cost(p.task, p.model, p.trainer))
    if not spec.resources.gpu:
        gpu_name = None
    else:  # nvidia-smi asked only where the trials use GPUs
        if gpu_name is None:
            gpu_name = local_gpu_name() or ""
        gpu_name = spec.resources.gpu_kind or gpu_name or None
    fusion = plan_fusion(sweep, warm, unfusable, gpu_name)
    arrangement = plan_arrangement(sweep, fusion, gpu_name)
    if arrangement is not None and arrangement.chosen and fusion.active and not arrangement.fused:
        planned = len(fusion.fused) or len(seed_groups(sweep, fusion)[0])
        fusion = fusion.dissolved(
            f"its {planned} fused group(s) are planned, but the GPU arrangement trains "
            "every trial alone, cheaper by the measured costs (below); a number for "
            "resources.gpu keeps the groups"
        )
    if arrangement is not None and arrangement.chosen:
        mps = arrangement_mps(arrangement, spec.resources.mps)
    else:
        mps = plan_mps(spec.resources.mps, spec.resources.gpu)
    datamodules = folder_datamodules(sweep)  # the folders they write, the data they lack
    check_test_split(sweep, datamodules)
    check_teacher_checkpoints(sweep)
    save_signatures()  # the step costs and fusion checks learnt here serve the next launch
    return SweepPlan(
        sweep=sweep,
        output=output,
        storage=spec.storage.path or str(output),
        units=tuple(units),
        warm=warm,
        fusion=fusion,
        arrangement=arrangement,
        mps=mps,
        folders=tuple(sweep_folders(sweep, output, datamodules)),
        data_notes=tuple(data_notes(datamodules)),
        budget_lines=tuple(launch_lines(output / sweep.name, sweep)),
        gpu_name=gpu_name,
    )
