"""Which trials of a sweep train fused, decided before Ray starts from the resolved plans.

Two trials may fuse when their *fuse keys* are equal (:func:`fuse_key`): the model's section
without what a member keeps to itself (learning rate, weight decay, dropout, the evaluation
settings, and its mechanism's *member axes*: memory attention's K, scoring functions and position
encoding, the length it was built for; :mod:`lightning_modules.fused.axes`), the task without its
length (each member's seed still draws its own data and order) and the training loop (the trainer
section, but for each member's own gradient clipping). Members come from the seeds of a cell, from
grid values along the member axes or that change no shape, and from Optuna's samples of one unit
asked together. Which of the trials that may fuse do, is the cost model's choice
(:mod:`sweeps.plan.step_costs`): it cuts each pool into the groups whose steps cost least on the
sweep's device, at most ``fusion.max_members`` members a group
(:class:`~sweeps.spec.fusion_schema.FusionSpec`), and says why two neighbouring groups stay apart.

A member's Tune config says which group it belongs to (``fused_with``) and which member it is
(``fused_member``: ``"2/3"``), so a trial knows its group from its own config, results.csv and W&B
show it, and the trial reserves ``1/3`` of a trial's resources (:func:`member_share`): the group
as a whole holds what one unfused trial does. A trial that fuses with nobody trains as before.
This module imports no torch and no Ray: ``--dry-run`` prints what it decides (:func:`fusion_lines`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from lightning_modules.fused.axes import MAX_SOURCE_LEN_PER_MEMBER, member_keys
from sweeps.plan.grouping import (  # noqa: F401 (the plan's groups, importable from here too)
    DEFAULT_PRESET,
    FUSED_MEMBER,
    FUSED_WITH,
    LENGTH_KEY,
    Apart,
    Group,
    Member,
    Slot,
    cheapest_groups,
    member_shape,
)
from sweeps.plan.step_costs import DeviceCosts, device_costs
from sweeps.spec import resolve_sections
from sweeps.spec.search_schema import configuration_rungs
from sweeps.spec.signatures import default_attention, fusion_problem

#: trainer settings each member keeps to itself (the fused model clips per member)
MEMBER_TRAINER_KEYS = ("gradient_clip_val",)
#: Lightning precisions the fused training step runs in
FUSED_PRECISIONS = ("32-true", "32", "bf16-mixed")


@dataclass(frozen=True)
class FusionPlan:
    """A sweep's fusion: its groups (hand-out order is the searcher's), or why nothing fuses.

    Attributes:
        cap: the most members a group may have; device: ``cpu`` or ``gpu`` (the default's).
        groups: every trial to train, fused groups and single trials (plain and per-unit sweeps).
        seed_chunks: configurations judged over seeds: the sizes of the fused groups one
            configuration's seeds train in (its groups are made when Optuna asks it).
        off: why no trial of this sweep fuses, or None.
        alone: why some trials train alone although fusion is on.
        kinds: the settings that tell apart the kinds of trials that never fuse (empty: one kind).
        apart: in each kind, why the cost model cut it between two neighbouring groups.
        costs: the device's cost model the groups were cut by (its ``note`` says which
            measured device stands in for this one).
        planned: the fused groups the plan made and the GPU arrangement dissolved (``off`` says
            why); empty otherwise.
    """

    cap: int
    device: str
    groups: tuple[Group, ...] = ()
    seed_chunks: tuple[int, ...] = ()
    off: str | None = None
    alone: tuple[str, ...] = field(default_factory=tuple)
    kinds: tuple[str, ...] = ()
    apart: tuple[Apart, ...] = ()
    costs: DeviceCosts | None = None
    planned: tuple[Group, ...] = ()

    @property
    def fused(self) -> list[Group]:
        return [g for g in self.groups if g.name is not None]

    def dissolved(self, reason: str) -> FusionPlan:
        """This plan with every trial alone, and ``reason`` why (the GPU arrangement trains the
        trials unfused where that is cheaper than the groups)."""
        alone = tuple(Group(None, (s,)) for g in self.groups for s in g.slots)
        return FusionPlan(
            self.cap, self.device, alone, off=reason, costs=self.costs, planned=tuple(self.fused)
        )

    @property
    def active(self) -> bool:
        """Whether any trial of the sweep trains fused."""
        return bool(self.fused) or any(n > 1 for n in self.seed_chunks)


def member_of(config: dict[str, Any]) -> tuple[str, int, int] | None:
    """``(group, member index from 0, group size)`` of a member trial's config, or None."""
    group, member = config.get(FUSED_WITH), config.get(FUSED_MEMBER)
    if not group or not member:
        return None
    j, n = str(member).split("/")
    return str(group), int(j) - 1, int(n)


def member_share(config: dict[str, Any]) -> float:
    """The share of one trial's resources a trial reserves: ``1/n`` for a member of a group of n."""
    found = member_of(config)
    return 1.0 / found[2] if found else 1.0


def balanced_chunks(items: list[Any], cap: int) -> list[list[Any]]:
    """``items`` in order, cut into the fewest chunks of at most ``cap``, sizes differing by at most
    one (7 at cap 3: 3, 2, 2 -- not 3, 3, 1, whose last member would train alone)."""
    if not items:
        return []
    k = math.ceil(len(items) / cap)
    size, extra = divmod(len(items), k)
    out, start = [], 0
    for i in range(k):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def configuration_member(label: str, seed_index: int, n_seeds: int, cap: int) -> dict[str, str]:
    """The fused keys of seed ``seed_index`` of a configuration judged over ``n_seeds`` seeds
    (``label``: the configuration's, e.g. ``attention-memory#3``), or {} when it trains alone."""
    chunks = balanced_chunks(list(range(n_seeds)), cap)
    for k, chunk in enumerate(chunks):
        if seed_index in chunk and len(chunk) > 1:
            name = label if len(chunks) == 1 else f"{label}/{k + 1}"
            return {FUSED_WITH: name, FUSED_MEMBER: f"{chunk.index(seed_index) + 1}/{len(chunk)}"}
    return {}


def fuse_key(task: dict[str, Any], model: dict[str, Any], trainer: dict[str, Any]) -> str:
    """Trials whose keys are equal may train as one fused model (module docstring)."""
    return json.dumps(key_sections(task, model, trainer), sort_keys=True, default=str)


def key_sections(
    task: dict[str, Any], model: dict[str, Any], trainer: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The settings that must be equal for trials to fuse, by section."""
    attention = str(model.get("attention") or default_attention())
    own = member_keys(attention)
    shapes = {k: v for k, v in model.items() if k not in own}
    data = dict(task)
    if attention in MAX_SOURCE_LEN_PER_MEMBER:  # each member's own length
        data.pop(LENGTH_KEY, None)
    loop = {k: v for k, v in trainer.items() if k not in MEMBER_TRAINER_KEYS}
    return {"model": shapes, "task": data, "trainer": loop}


def loop_problem(trainer: dict[str, Any]) -> str | None:
    """Why the fused training loop cannot run these trainer settings as Lightning would, or None."""
    vci = trainer.get("val_check_interval")
    if not isinstance(vci, int) or isinstance(vci, bool):
        return "trainer.val_check_interval is not a whole number of steps"
    for key in ("max_epochs", "check_val_every_n_epoch", "limit_train_batches"):
        if trainer.get(key) is not None:
            return f"trainer.{key} is set (the fused loop counts steps only)"
    if int(trainer.get("accumulate_grad_batches") or 1) != 1:
        return "trainer.accumulate_grad_batches is not 1"
    if str(trainer.get("precision", "32-true")) not in FUSED_PRECISIONS:
        return f"trainer.precision {trainer.get('precision')} (the fused step runs 32-true or bf16-mixed)"
    return None


def teacher_problem(plan: Any, check: Any = None) -> str | None:
    """Why a cell's students train alone, or None: a student fuses with students of its shape,
    each member with its own teacher (the fused model's teacher pass). The searcher hands a
    students' group out only once every member's teacher has ended, each member's config with its
    own ``teacher`` and ``teacher_checkpoint`` (or its ``teacher_error``: the member fails at once,
    as the unfused trainable does, and its group trains the others). With a ``check`` (the
    launch's: :func:`unfusable`), the fused model's own answer for what else it refuses."""
    model = plan.model
    weight, init = float(model.get("distill_weight") or 0), model.get("init_from_teacher", "none")
    if weight <= 0 and init in (None, "none"):
        return None
    return check(plan) if check is not None else None


def sweep_off(sweep: Any, cap: int) -> str | None:
    """Why no trial of ``sweep`` fuses, or None."""
    spec = sweep.spec
    if cap == 1:
        return "fusion is off (fusion: off, or fusion.max_members: 1)"
    if spec.resources.workers > 1:
        return "DDP trials (resources.workers > 1) are not fused"
    if spec.early_terminate.waits_at_rungs:
        return (
            "early_terminate pareto with promotion: wait pauses trials at their rungs, and a "
            "paused trial cannot leave a fused group and come back: they train alone "
            "(promotion: immediate fuses)"
        )
    if spec.per_configuration and configuration_rungs(spec):
        return (
            f"early_terminate {spec.early_terminate.type} pauses a configuration's seeds at its "
            "rungs, and a paused trial cannot leave a fused group and come back: they train alone"
        )
    return None


def plan_fusion(
    sweep: Any, warm: Any = None, check: Any = None, gpu_name: str | None = None
) -> FusionPlan:
    """The sweep's fusion; ``warm`` (:class:`sweeps.plan.warm_start.WarmStart`): its reused trials are
    not trained, so they fuse with nobody; ``check(plan)``: why a plan has no fused form, or None
    (:func:`unfusable`, which the launch passes: on a model section the signature cache has not
    seen it imports torch, which ``--dry-run`` never does); ``gpu_name``: the GPU whose measured
    costs cut the groups of a sweep on GPUs (None: the cost table's first)."""
    spec = sweep.spec
    device = "gpu" if spec.resources.gpu else "cpu"
    cap = spec.fusion.cap(device)
    off = sweep_off(sweep, cap)
    samples = spec.num_samples if sweep.has_search else 1
    reused = {i: len(rows) for i, rows in (warm.reused.items() if warm is not None else [])}
    slots = {
        i: [Slot(i, s) for s in range(reused.get(i, 0), samples)] for i in range(len(sweep.plans))
    }
    if off is not None:
        return FusionPlan(cap, device, _alone(slots), off=off)
    alone: list[str] = []
    loose = set()  # units whose trials train alone
    for i, plan in enumerate(sweep.plans):
        problem = (
            loop_problem(plan.trainer)
            or teacher_problem(plan, check)
            or (check(plan) if check is not None else None)
        )
        if problem is not None:
            loose.add(i)
            alone.append(f"{plan.cell.name}: {problem}")
    if spec.per_configuration:  # a configuration's seeds share its sampled values
        chunks = balanced_chunks(list(spec.seed_values), cap)
        if (
            loose
        ):  # a cell whose loop cannot fuse: its settings hold for every cell (no grid on them)
            return FusionPlan(cap, device, off="; ".join(dict.fromkeys(alone)))
        return FusionPlan(cap, device, seed_chunks=tuple(len(c) for c in chunks))
    sampled: dict[str, Any] = {}
    if sweep.has_search and samples > 1:
        for key in _shape_changing(sweep):
            alone.append(
                f"parameters.{key} changes the model's shapes: Optuna's samples train alone"
            )
            loose.update(range(len(sweep.plans)))
        sampled = _sampled_axes(sweep)
    costs = device_costs(device, gpu_name)
    role = _roles(sweep)  # teachers fuse with teachers, students with students
    pools: dict[tuple[str, str], list[tuple[Slot, Member]]] = {}
    keys: dict[str, dict[str, Any]] = {}
    singles: list[Slot] = []
    for s in range(samples):
        for i, plan in enumerate(sweep.plans):
            if not any(slot.sample == s for slot in slots[i]):
                continue
            if i in loose:
                singles.append(Slot(i, s))
                continue
            key = fuse_key(plan.task, plan.model, plan.trainer)
            keys.setdefault(key, key_sections(plan.task, plan.model, plan.trainer))
            shape = member_shape(plan.task, plan.model, sampled)
            pools.setdefault((role[i], key), []).append((Slot(i, s), shape))
    groups: list[Group] = []
    apart: list[Apart] = []
    for pool in pools.values():
        preset = str(sweep.plans[pool[0][0].unit].model.get("preset") or DEFAULT_PRESET)
        chunks, why = cheapest_groups(pool, cap, costs, preset, sweep)
        groups += [Group("" if len(c) > 1 else None, tuple(s for s, _ in c)) for c in chunks]
        apart += why
    groups += [Group(None, (slot,)) for slot in singles]
    groups.sort(key=lambda g: (min(s.sample for s in g.slots), min(s.unit for s in g.slots)))
    # a warm start's reused rows keep the group names they trained under: new groups get others,
    # so that no two groups of one results.csv share a name
    taken = {
        str(r.get(FUSED_WITH))
        for rows in (warm.reused.values() if warm is not None else [])
        for r in rows
        if isinstance(r.get(FUSED_WITH), str)
    }
    count = sum(1 for g in groups if g.name is not None)
    width = len(str(count + len(taken)))
    named, n = [], 0
    for g in groups:
        if g.name is not None:
            n += 1
            while any(name in taken for name in (f"g{n}", f"g{n:0{width}d}")):
                n += 1
            g = Group(f"g{n:0{width}d}", g.slots)
        named.append(g)
    return FusionPlan(
        cap,
        device,
        tuple(named),
        alone=tuple(dict.fromkeys(alone)),
        kinds=_differences(list(keys.values())) + _role_difference({r for r, _ in pools}),
        apart=tuple(apart),
        costs=costs,
    )


def _differences(pools: list[dict[str, dict[str, Any]]]) -> tuple[str, ...]:
    """The settings (``model.attention`` ...) whose values differ between the kinds of trials
    that may fuse among themselves: what keeps them from fusing with each other."""
    differing = []
    for section in ("model", "task", "trainer"):
        for name in sorted({k for p in pools for k in p[section]}):
            values = {json.dumps(p[section].get(name), sort_keys=True, default=str) for p in pools}
            if len(values) > 1:
                differing.append(f"{section}.{name}")
    return tuple(differing)


def _role_difference(roles: set[str]) -> tuple[str, ...]:
    """What keeps units of different roles (:func:`_roles`) apart, in the words of
    :func:`_differences`' list; nothing where the pools share one role."""
    if len(roles) < 2:
        return ()
    return ("their role (a teacher's, a student's, or neither: each trains in groups of its own)",)


def _sampled_axes(sweep: Any) -> dict[str, Any]:
    """The Optuna parameters along a member axis (``model.K`` ...), at their largest value: what
    a group of samples is costed at before Optuna has asked them."""
    out = {}
    for key, p in sweep.spec.parameters.items():
        section, _, name = key.partition(".")
        if section != "model":
            continue
        candidates = p.values if p.values is not None else [p.min, p.max]
        try:
            out[name] = max(candidates)
        except TypeError:
            out[name] = candidates[-1]
    return out


def unfusable(plan: Any) -> str | None:
    """Why the fused model cannot train a trial of ``plan`` (``lightning_modules.fused``'s own
    answer, e.g. monotonic attention forced to its hard mode in training), or None; asked once per
    model section, ever (:func:`sweeps.spec.signatures.fusion_problem`)."""
    return fusion_problem(plan.model)


def _roles(sweep: Any) -> list[str]:
    """Per unit, whether it teaches, learns, both or neither: units of different roles never share
    a group (a teacher's group goes out first, a student's only when its teachers have ended)."""
    n = len(sweep.plans)
    teacher_of = (
        [sweep.teacher_index(i) for i in range(n)]
        if getattr(sweep, "teachers", None)
        else [None] * n
    )
    teaching = {t for t in teacher_of if t is not None}
    return [
        ("teacher" if i in teaching else "") + ("student" if teacher_of[i] is not None else "")
        for i in range(n)
    ]


def _alone(slots: dict[int, list[Slot]]) -> tuple[Group, ...]:
    return tuple(Group(None, (s,)) for i in sorted(slots) for s in slots[i])


def _shape_changing(sweep: Any) -> list[str]:
    """The Optuna parameters whose values change a trial's fuse key (a hidden size, say)."""
    out = []
    plan = sweep.plans[0]
    base = {"task": plan.task, "model": plan.model, "trainer": plan.trainer}
    for key, p in sweep.spec.parameters.items():
        candidates = p.values if p.values is not None else [p.min, p.max]
        keys = {fuse_key(*resolve_sections(base, {key: value})) for value in candidates}
        if len(keys) > 1:
            out.append(key)
    return out
