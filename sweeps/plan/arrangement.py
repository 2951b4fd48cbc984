"""How a sweep's trials use the GPUs: the plan's arrangement, from the measured costs of the GPU
(:mod:`sweeps.plan.step_costs`), and what it is expected to give.

With ``resources.gpu: auto`` (the shipped sweep files' default) the plan chooses, for each fused
group and each trial that trains alone: how many share a GPU, whether their steps replay CUDA
graphs, the CPU threads each training process holds, and whether the GPU's processes run under
MPS. It picks, among the arrangements the table measured, the one with the most member-steps per
GPU-second:

- a fused group holds a GPU of its own (one group to a GPU is what was measured: a group of 16
  steps about as fast as a group of 1), with one CPU thread (a process that drives a GPU needs one
  fast thread to launch its kernels; more threads do nothing for the GPU's work), and a CPU more
  for each of its DataLoader workers (``task.num_workers``);
- trials alone share a GPU under MPS, as many as the table's best measured count (8) and no more
  than there are trials alone, eager, or graphed when no trial of the sweep trains fused (graphs
  are set for the whole sweep, and the table has no graphed fused step yet);
- graphed fused groups once the table holds their measured step (``fused_graphed_s``).

Graphs the sweep file sets itself (``trainer.cuda_graphs`` in its trainer section or a grid)
stand, under ``auto`` too: each trial is costed as its plan says. With a number for
``resources.gpu`` the sweep file's own arrangement stands; the plan reports
what the table expects of it (several fused groups on one GPU were not measured: they are taken
to share it without gain).

Expected figures count trials per GPU with fused members counted as members: member-steps per
GPU-second, against one eager trial per GPU (how a Ray Tune user runs such trials:
``resources.gpu: 1``), and the GPU-hours of the sweep's training steps for both (validation,
timing and the test split not counted).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lightning_modules.presets import PRESETS
from sweeps.plan.fusion import FusionPlan, Group, Slot, balanced_chunks, member_shape
from sweeps.plan.mps import MpsPlan
from sweeps.plan.mps import per_gpu as shares_per_gpu
from sweeps.plan.step_costs import (
    MEASURED_BATCH,
    SIZE_KEYS,
    DeviceCosts,
    Member,
    device_costs,
    fused_envelope,
)
from sweeps.spec.gpu import sets_cuda_graphs
from sweeps.spec.objectives import baseline_of

#: the sample number of a relative constraint's baseline (one per unit, besides its samples)
BASELINE_SAMPLE = -1

#: the CPU threads a process that drives a GPU holds
GPU_PROCESS_CPUS = 1.0


@dataclass(frozen=True)
class Arrangement:
    """A sweep's use of the GPUs (module docstring).

    Attributes:
        chosen: the plan chose it (``resources.gpu: auto``); False: the sweep file's resources.
        fused: trials train in the plan's fused groups; False: every trial alone (the plan's
            groups dissolved: training them alone is cheaper on this GPU).
        costs: the GPU's entry of the cost table (``costs.note``: which GPU stands in).
        group_gpu, group_cpu: what a fused group holds (its members 1/n each).
        lone_gpu, lone_cpu: what a trial that trains alone holds.
        graphs: the trials' steps replay CUDA graphs (``trainer.cuda_graphs``).
        mps: processes share a GPU: an MPS daemon under them where the node has one.
        rate, eager_rate: expected member-steps per GPU-second, as arranged and with one eager
            trial per GPU; gpu_hours, eager_gpu_hours: the sweep's training steps' GPU-hours.
    """

    chosen: bool
    costs: DeviceCosts
    fused: bool
    group_gpu: float
    group_cpu: float
    lone_gpu: float
    lone_cpu: float
    graphs: bool
    mps: bool
    groups: int
    lone: int
    rate: float
    eager_rate: float
    gpu_hours: float
    eager_gpu_hours: float
    #: the best arrangement of the other kind (fused or not), and what it would give
    instead: str | None = None
    #: the sweep's models the table has no figures of, and what stands in for each; arrangements
    #: it has no figures of, and how they are costed
    stand_ins: tuple[str, ...] = ()
    #: the trials' steps where the sweep file sets ``trainer.cuda_graphs`` itself (its choice
    #: stands, also under ``auto``): which are graphed, and how they are costed; None: ``graphs``
    steps: str | None = None

    @property
    def speedup(self) -> float:
        return self.rate / self.eager_rate if self.eager_rate else 0.0

    def resources(self, config: dict[str, Any], members: int | None) -> dict[str, float]:
        """What one trial reserves: a member of a group of ``members`` its 1/n of the group's
        share, a trial alone its own."""
        if members:
            return {"cpu": self.group_cpu / members, "gpu": self.group_gpu / members}
        return {"cpu": self.lone_cpu, "gpu": self.lone_gpu}


def plan_arrangement(
    sweep: Any, fusion: FusionPlan, gpu_name: str | None = None
) -> Arrangement | None:
    """The sweep's GPU arrangement; None for a sweep whose trials use no GPU. With
    ``resources.gpu: auto`` the cheapest of: the fused groups as planned (each a GPU of its own,
    eager, or graphed where the table measured it) beside the trials alone, and every trial alone
    (``fused`` False: the plan then trains none fused); each with the trials alone shared
    P to a GPU, eager or graphed, as measured."""
    r = sweep.spec.resources
    if not r.gpu or r.workers > 1:
        return None
    costs = device_costs("gpu", gpu_name)
    units = sweep.plans
    steps = {i: int(p.trainer.get("max_steps") or 1) for i, p in enumerate(units)}
    groups = [g for g in fusion.groups if g.name is not None]
    lone = [g.slots[0] for g in fusion.groups if g.name is None]
    if not fusion.groups:  # configurations judged over seeds: their groups made as Optuna asks
        groups, lone = seed_groups(sweep, fusion)
    base = baseline_of(sweep.spec)
    if base and sweep.has_search:  # a relative constraint's baseline per unit, trained alone
        lone += [Slot(i, BASELINE_SAMPLE) for i in range(len(units))]
    every = [s for g in groups for s in g.slots] + lone
    preset = lambda i: str(units[i].model.get("preset") or "paper_copy")  # noqa: E731
    shape = lambda i: member_shape(units[i].task, units[i].model)  # noqa: E731
    # graphs the sweep sets, on or off (its trainer section, a grid, a --set) stand: each trial as
    # its plan says
    own_graphs = sets_cuda_graphs(sweep.spec)

    def graphed_of(s: Slot, chosen: bool) -> bool:
        return bool(units[s.unit].trainer.get("cuda_graphs")) if own_graphs else chosen

    notes: list[str] = []

    def steps_word(graphed: bool) -> str:
        return (
            "steps as the sweep sets trainer.cuda_graphs"
            if own_graphs
            else "graphed"
            if graphed
            else "eager"
        )

    def alone(s: Slot) -> float:
        model = units[s.unit].model
        if s.sample == BASELINE_SAMPLE:
            model = {**model, **{k.split(".", 1)[1]: v for k, v in (base or {}).items()}}
        return costs.group_seconds(preset(s.unit), [member_shape(units[s.unit].task, model)])

    eager = sum(alone(s) * steps[s.unit] for s in every)
    member_steps = sum(steps[s.unit] for s in every)

    def group_seconds(graphed: bool) -> float:
        total = 0.0
        for g in groups:
            members = [shape(s.unit) for s in g.slots]
            measured = _has(costs, units, [g], "fused_graphed_s")  # else costed eager
            step = _fused_step(
                costs,
                preset(g.slots[0].unit),
                members,
                graphed_of(g.slots[0], graphed) and measured,
            )
            total += step * max(steps[s.unit] for s in g.slots)
        return total

    def lone_seconds(slots: list[Any], per_gpu: int, graphed: bool, mps: bool) -> float:
        return sum(
            alone(s)
            / _shared(costs, preset(s.unit), per_gpu, graphed_of(s, graphed), mps)
            * steps[s.unit]
            for s in slots
        )

    def measured(slots: list[Any], per_gpu: int, graphed: bool, mps: bool) -> bool:
        if own_graphs and per_gpu == 1:
            return True  # each alone as the file sets it; a graphed step not measured costs eager
        return all(
            _measured(costs, units, [s], per_gpu, graphed_of(s, graphed), mps) for s in slots
        )

    if r.auto_gpu:
        mps = r.mps != "off"  # processes that share a GPU do so under MPS, unless it is off
        can_graph = graphs_problem(sweep) is None
        graphed_groups = bool(groups) and _has(costs, units, groups, "fused_graphed_s")
        options = []  # (seconds, fused, per_gpu, graphed)
        for fused in [True, False] if groups else [False]:
            trials_alone = lone if fused else every
            # no more to a GPU than there are trials alone: a count's gain needs that many
            counts = [n for n in _measured_counts(costs, units, trials_alone, mps)]
            counts = [n for n in counts if n <= max(1, len(trials_alone))]
            for per_gpu in counts:
                for graphed in (False,) if own_graphs else (False, True):
                    if graphed and (not can_graph or (fused and not graphed_groups)):
                        continue  # graphs are the sweep's: a group's graphed step not measured
                    if not measured(trials_alone, per_gpu, graphed, mps):
                        continue
                    seconds = lone_seconds(trials_alone, per_gpu, graphed, mps)
                    seconds += group_seconds(graphed) if fused else 0.0
                    options.append((seconds, fused, per_gpu, graphed))
        seconds, fused, per_gpu, graphed = min(
            options, key=lambda o: (o[0], not o[1], not o[3], o[2])
        )
        # the process that drives the GPU, and each of its DataLoader workers (task.num_workers)
        loaders = max(int(u.task.get("num_workers") or 0) for u in units)
        # a fused group's members each run their own DataLoader workers in the group's process
        members = max((len(g.slots) for g in groups), default=1) if fused else 1
        arrangement = dict(
            fused=fused,
            group_gpu=1.0,
            group_cpu=GPU_PROCESS_CPUS + loaders * members,
            lone_gpu=1.0 / per_gpu,
            lone_cpu=GPU_PROCESS_CPUS + loaders,
            graphs=graphed,
            # a daemon where trials share a GPU; resources.mps on asks for one in any case
            mps=r.mps == "on" or (bool(lone or not fused) and per_gpu > 1 and mps),
        )
        if not fused:
            groups, lone = [], every
        if groups and fused:
            unfused = [o for o in options if not o[1]]
            if unfused:
                best = min(unfused)
                arrangement["instead"] = (
                    f"every trial alone would give {member_steps / best[0]:.3g} member-steps per "
                    f"GPU-second ({best[2]} to a GPU, {steps_word(best[3])})"
                ) + _close(seconds, best[0])
        elif len(options) > 1 and any(o[1] for o in options):
            best = min(o for o in options if o[1])
            arrangement["instead"] = (
                f"the fused groups as planned would give {member_steps / best[0]:.3g} "
                f"member-steps per GPU-second ({steps_word(best[3])}"
                + ("" if graphed_groups else ": the cost table holds no graphed fused step yet")
                + ")"
                + _close(seconds, best[0])
            )
    else:  # the sweep file's own: r.gpu a group's or a lone trial's share
        per_gpu = shares_per_gpu(r.gpu)
        mps = r.mps == "on" or (r.mps == "auto" and 0 < r.gpu < 1)
        if lone and not measured(lone, per_gpu, False, mps):
            notes.append(
                f"{per_gpu} trials to a GPU {'under MPS' if mps else 'time-sliced'} is not "
                f"measured on the {costs.name}: costed as one alone (no gain from sharing)"
            )
            per_gpu = 1  # not measured: the shared GPU is taken to give no more than one alone
        if groups and shares_per_gpu(r.gpu) > 1:  # never measured: each group as on a GPU alone
            notes.append(
                f"{shares_per_gpu(r.gpu)} fused groups to a GPU {'under MPS' if mps else 'time-sliced'}"
                f" is not measured on the {costs.name}: each costed as a group alone on its GPU "
                "(no gain from sharing)"
            )
        seconds = lone_seconds(lone, per_gpu, False, mps) + group_seconds(False)
        arrangement = dict(
            fused=bool(groups),
            group_gpu=r.gpu,
            group_cpu=r.cpu,
            lone_gpu=r.gpu,
            lone_cpu=r.cpu,
            graphs=bool(sweep.spec.trainer.cuda_graphs),
            mps=mps,
        )
    if own_graphs and any(
        graphed_of(s, False) and "graphed_speedup" not in _length_entry(costs, preset(s.unit))
        for s in lone
    ):
        notes.append(
            f"graphed steps of trials alone are not measured on the {costs.name}: costed eager"
        )
    if own_graphs:
        arrangement["graphs"] = False  # the plan adds none: each trial's plan holds its own
        arrangement["steps"] = _own_steps(
            "trainer.cuda_graphs" in sweep.spec.parameters,
            [graphed_of(s, False) for s in every],
            [
                graphed_of(g.slots[0], False) and not _has(costs, units, [g], "fused_graphed_s")
                for g in groups
            ],
        )
    return Arrangement(
        stand_ins=stand_ins(costs, units, sweep.spec.parameters) + tuple(notes),
        chosen=r.auto_gpu,
        costs=costs,
        groups=len(groups),
        lone=len(lone),
        rate=member_steps / seconds if seconds else 0.0,
        eager_rate=member_steps / eager if eager else 0.0,
        gpu_hours=seconds / 3600,
        eager_gpu_hours=eager / 3600,
        **arrangement,
    )


#: a margin between the chosen arrangement and the other kind's best that figures from separate
#: benchmark runs do not tell apart (the table's sharing and graph gains are each a ratio to their
#: own benchmark's eager step, applied to the fusion benchmark's)
CLOSE_MARGIN = 0.10


def _close(chosen_s: float, other_s: float) -> str:
    """What the ``instead`` line adds where the other kind costs within :data:`CLOSE_MARGIN` of
    the choice: which way the sweep goes is then not settled by the table."""
    if not chosen_s or other_s > chosen_s * (1 + CLOSE_MARGIN):
        return ""
    return (
        f"; {100 * (other_s / chosen_s - 1):.0f}% more GPU time than the choice, within the "
        f"{100 * CLOSE_MARGIN:.0f}% that figures from separate benchmark runs do not tell apart: "
        "measure the cluster's GPU into the table before a long sweep (docs/gpu.md)"
    )


def _own_steps(searched: bool, trials: list[bool], eager_groups: list[bool]) -> str:
    """How the trials step where the sweep file sets ``trainer.cuda_graphs``: ``searched``, by
    the search's sample; else ``trials`` whether each is graphed; ``eager_groups`` for each fused
    group, whether it is graphed but costed eager (the table holds no graphed fused step)."""
    n = sum(trials)
    if searched:
        return "as each trial samples trainer.cuda_graphs (costed eager where not set)"
    text = (
        "graphed (trainer.cuda_graphs)"
        if n == len(trials)
        else f"graphed in {n} of {len(trials)} trial(s) (trainer.cuda_graphs), eager in the rest"
        if n
        else "eager (trainer.cuda_graphs false)"
    )
    if any(eager_groups):
        text += (
            f"; {sum(eager_groups)} graphed fused group(s) costed eager (the cost table holds no "
            "graphed fused step yet)"
        )
    return text


def stand_ins(
    costs: DeviceCosts, units: list[Any], searched: Iterable[str] = ()
) -> tuple[str, ...]:
    """For each model preset and task of ``units`` the table has no figures of: what it is
    costed as (the measured preset nearest in hidden size; the copy task's step at the same
    length for any other task); and the settings the table's steps were not measured with (a
    model size the preset sets otherwise, another batch size, a precision other than float32,
    set or ``searched``), costed as the measured ones."""
    out = []
    for preset, task in dict.fromkeys(
        (str(u.model.get("preset") or "paper_copy"), str(u.task.get("name") or "copy"))
        for u in units
    ):
        measured = costs.preset_entry(preset, "unfused_s")[0]
        if measured == preset and task == "copy":
            continue
        what = f"{task}'s {preset} model" if task != "copy" else f"the {preset} model"
        out.append(
            f"{what} is costed as the table's {measured} model on the copy task"
            + (" (nearest in hidden size)" if measured != preset else "")
            + " at the same length: not measured"
        )
    differing: dict[str, dict[str, None]] = {}  # per measured preset, each setting once
    for u in units:
        preset = str(u.model.get("preset") or "paper_copy")
        measured = costs.preset_entry(preset, "unfused_s")[0]
        for said in _unmeasured_settings(u, preset, measured, searched):
            differing.setdefault(measured, {})[said] = None
    for measured, said in differing.items():
        batch = MEASURED_BATCH.get(measured)
        out.append(
            f"trials with {', '.join(said)} are costed as the table's {measured} model "
            f"(its sizes{f', batch {batch}' if batch else ''}, float32): not measured"
        )
    return tuple(out)


def _unmeasured_settings(
    unit: Any, preset: str, measured: str, searched: Iterable[str]
) -> list[str]:
    """The settings of ``unit`` the table's step of ``measured`` was not measured with."""
    sizes = PRESETS.get(preset, {})
    out = [
        f"{key}={unit.model[key]}"
        for key in SIZE_KEYS
        if unit.model.get(key) is not None and unit.model[key] != sizes.get(key)
    ]
    batch = unit.task.get("batch_size")
    if batch is not None and measured in MEASURED_BATCH and batch != MEASURED_BATCH[measured]:
        out.append(f"batch_size={batch}")
    if str(unit.trainer.get("precision") or "32-true") not in ("32-true", "32"):
        out.append(f"precision={unit.trainer['precision']}")
    unmeasured = (*SIZE_KEYS, "batch_size", "precision")
    return out + [f"{key} searched" for key in searched if key.split(".")[-1] in unmeasured]


def graphs_problem(sweep: Any) -> str | None:
    """Why the sweep's trials cannot replay CUDA graphs, or None: graphs capture single-process
    float32 steps of one batch each, and not a distilling student's teacher. Each cell's trainer
    is read (a grid over ``trainer.*`` sets it per cell: the arrangement graphs every cell), and
    a search over those settings is one too."""
    spec = sweep.spec
    for plan in sweep.plans:
        precision = str(plan.trainer.get("precision") or spec.trainer.precision)
        if precision not in ("32-true", "32"):
            return f"trainer.precision {precision}"
        if int(plan.trainer.get("accumulate_grad_batches") or 1) != 1:
            return "trainer.accumulate_grad_batches is not 1"
    for key in ("trainer.precision", "trainer.accumulate_grad_batches"):
        if key in spec.parameters:
            return f"{key} is searched"
    if any(float(p.model.get("distill_weight") or 0) > 0 for p in sweep.plans):
        return "a distilling student's teacher runs outside the graph"
    return None


def seed_groups(sweep: Any, fusion: FusionPlan) -> tuple[list[Group], list[Slot]]:
    """The fused groups and lone trials of a sweep whose configurations are judged over seeds
    (``fusion.seed_chunks``): each configuration's seeds in the chunks Optuna's configurations
    train in (:func:`~sweeps.plan.fusion.configuration_member`), a chunk of one alone; every trial
    alone where no seed fuses."""
    samples = sweep.spec.num_samples if sweep.has_search else 1
    if not fusion.active:
        return [], [Slot(i, s) for i in range(len(sweep.plans)) for s in range(samples)]
    groups: list[Group] = []
    lone: list[Slot] = []
    for cell in sweep.cells:
        units = [i for i, p in enumerate(sweep.plans) if p.cell == cell]
        for sample in range(samples):
            for chunk in balanced_chunks(units, fusion.cap):
                slots = tuple(Slot(i, sample) for i in chunk)
                if len(slots) > 1:
                    groups.append(Group(f"{cell.name}#{sample}", slots))
                else:
                    lone += slots
    return groups, lone


def _length_entry(costs: DeviceCosts, preset: str) -> dict[str, Any]:
    lengths = costs.preset_entry(preset)[1]["lengths"]
    return next(iter(lengths.values()))


def _has(costs: DeviceCosts, units: list[Any], groups: list[Any], field: str) -> bool:
    presets = {
        str(units[s.unit].model.get("preset") or "paper_copy") for g in groups for s in g.slots
    }
    return all(field in _length_entry(costs, p) for p in presets)


def _fused_step(costs: DeviceCosts, preset: str, members: list[Member], graphed: bool) -> float:
    """A fused group's step, eager or (where measured) graphed."""
    if not graphed:
        return costs.group_seconds(preset, members)
    entry = _length_entry(costs, preset)
    length = max(m.length for m in members)
    L = next(int(k) for k in costs.preset_entry(preset)[1]["lengths"])
    return fused_envelope(entry["fused_graphed_s"], len(members)) * length / L


def _shared_field(graphed: bool, mps: bool) -> str:
    """The table's figures of processes sharing a GPU: eager or graphed, under MPS or
    time-sliced (no MPS)."""
    return f"shared_{'graphed' if graphed else 'eager'}_{'mps' if mps else 'timesliced'}"


def _shared(costs: DeviceCosts, preset: str, per_gpu: int, graphed: bool, mps: bool) -> float:
    """Steps per GPU-second of ``per_gpu`` processes sharing a GPU (under MPS, or time-sliced),
    over one eager process alone (1 with one eager process)."""
    entry = _length_entry(costs, preset)
    if per_gpu == 1 and not graphed:
        return 1.0
    if per_gpu == 1 and graphed and "graphed_speedup" in entry:
        return float(entry["graphed_speedup"])
    table = entry.get(_shared_field(graphed, mps)) or {}
    return float(table.get(str(per_gpu), 1.0))


def _measured_counts(costs: DeviceCosts, units: list[Any], lone: list[Any], mps: bool) -> list[int]:
    """The numbers of trials to a GPU the table measured, under MPS or time-sliced (1 always)."""
    counts = {1}
    for s in lone:
        entry = _length_entry(costs, str(units[s.unit].model.get("preset") or "paper_copy"))
        for graphed in (False, True):
            counts |= {int(k) for k in entry.get(_shared_field(graphed, mps), {})}
    return sorted(counts)


def _measured(
    costs: DeviceCosts, units: list[Any], lone: list[Any], per_gpu: int, graphed: bool, mps: bool
) -> bool:
    """Whether the table holds this arrangement of the lone trials (every one's preset)."""
    for s in lone:
        entry = _length_entry(costs, str(units[s.unit].model.get("preset") or "paper_copy"))
        if per_gpu == 1:
            if graphed and "graphed_speedup" not in entry:
                return False
            continue
        if str(per_gpu) not in entry.get(_shared_field(graphed, mps), {}):
            return False
    return True


def local_gpu_name() -> str | None:
    """The name of this machine's first GPU (``nvidia-smi``), or None without one: the GPU the
    plan costs a launch from here on (a cluster's nodes are not known before Ray starts)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.strip() for line in out.splitlines() if line.strip()]
    return names[0] if names else None


def arrangement_mps(arrangement: Arrangement, mode: str) -> MpsPlan:
    """The MPS decision of a chosen arrangement: a daemon where processes share a GPU (required
    with ``resources.mps: on``, which also asks for one under whole GPUs; never with ``off``,
    where the plan shares a GPU only as far as time-slicing was measured to pay)."""
    if mode == "on":
        return MpsPlan("required", "resources.mps is on (resources.gpu auto)")
    if arrangement.mps:
        per_gpu = shares_per_gpu(arrangement.lone_gpu)
        return MpsPlan("yes", f"the plan puts {per_gpu} trials alone to a GPU (resources.gpu auto)")
    if mode == "off":
        return MpsPlan("no", "resources.mps is off (resources.gpu auto)")
    return MpsPlan(
        "no", "the plan gives each training process a GPU of its own (resources.gpu auto)"
    )
