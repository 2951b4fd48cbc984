"""What ``--dry-run`` (and every launch) prints of its plan (:class:`~sweeps.plan.sweep_plan.SweepPlan`),
exactly as the launch uses it: the trials and their resources, the warm start, the fused groups and
their members (and why some trials train alone), the early stopping, the teachers' order, the
stop rule, the budget."""

from __future__ import annotations

from typing import Any

from sweeps.plan.arrangement import seed_groups
from sweeps.plan.fusion import FusionPlan, Group
from sweeps.plan.mps import per_gpu as shares_per_gpu
from sweeps.report.ledger import hours_figure
from sweeps.spec.objectives import baseline_of
from sweeps.spec.teachers import order_lines


def describe(plan: Any) -> list[str]:
    """The plan's lines, in the order a launch prints them."""
    sweep = plan.sweep
    lines = [trial_table(plan)]
    lines += fusion_lines(sweep, plan.fusion, plan.arrangement)
    if plan.arrangement is not None:
        lines += arrangement_lines(sweep, plan.arrangement)
    note = sweep.early_stopping_note()
    if note:
        lines.append(note)
    lines += order_lines(sweep)  # dependent trials: which cells wait for which
    if sweep.spec.stop_when is not None:
        lines.append(
            f"stop_when: a trial stops once {sweep.spec.stop_when.describe()} (status converged)"
        )
    return lines + list(plan.budget_lines)


def arrangement_lines(sweep: Any, a: Any) -> list[str]:
    """How the trials use the GPUs, and what that is expected to give (:mod:`sweeps.plan.arrangement`)."""
    r = sweep.spec.resources
    whose = (
        "the plan's (resources.gpu auto)"
        if a.chosen
        else f"the sweep file's (resources.gpu {r.gpu:g}, cpu {r.cpu:g}; auto lets the plan choose)"
    )
    parts = []
    if a.groups:
        gpu = "a GPU of its own" if a.group_gpu >= 1 else f"{a.group_gpu:g} of a GPU"
        parts.append(
            f"{a.groups} fused group(s), each on {gpu} with {a.group_cpu:g} CPU thread(s), "
            f"its members 1/n each"
        )
    if a.lone:
        per_gpu = shares_per_gpu(a.lone_gpu) if a.lone_gpu else 1
        parts.append(
            f"{a.lone} trial(s) alone, {per_gpu} to a GPU with {a.lone_cpu:g} CPU thread(s) each"
        )
    steps = "graphed (trainer.cuda_graphs)" if a.graphs else "eager"
    if not a.graphs and a.groups and a.chosen:
        steps += " (the cost table holds no graphed fused step yet)"
    steps = a.steps or steps
    note = f"; {a.costs.note}" if a.costs.note else ""
    shared = (a.lone and 0 < a.lone_gpu < 1) or (a.groups and 0 < a.group_gpu < 1)
    mps = (
        "under MPS"
        if a.mps
        else "time-sliced, no MPS"
        if shared
        else "no MPS (no GPU shared by two processes)"
    )
    # the confirm stage's retraining is not costed: its trials are known only after the search
    confirm = (
        f", nor the confirm stage's {confirm_trials(sweep)} full-length trial(s)"
        if sweep.spec.confirm_seeds
        else ""
    )
    lines = [
        f"GPU arrangement, {whose}: " + "; ".join(parts) + f"; steps {steps}; " + mps,
        f"  expected on the {a.costs.name} (sweeps/plan/step_costs.json{note}): "
        f"{a.rate:.3g} member-steps per GPU-second, {a.speedup:.2f}x one eager trial per GPU "
        f"({a.eager_rate:.3g}), fused members counted as members",
        f"  GPU time of the training steps: {_hours(a.gpu_hours)} as arranged, "
        f"{_hours(a.eager_gpu_hours)} with one eager trial per GPU (validation, timing and the "
        f"test split not counted{confirm})",
    ]
    if a.instead:
        lines.insert(2, f"  instead: {a.instead}")
    lines[2:2] = [f"  costed: {line}" for line in a.stand_ins]
    return lines


def _hours(hours: float) -> str:
    """GPU-hours as a reader weighs them: minutes below one hour."""
    if hours < 1:
        return f"{hours * 60:.3g} GPU-minutes"
    return f"{hours_figure(hours)} GPU-hours"


def fusion_lines(sweep: Any, plan: FusionPlan, arrangement: Any = None) -> list[str]:
    """The lines the launcher prints about ``plan`` (none for a sweep with nothing to fuse);
    under ``resources.gpu: auto`` a group holds what ``arrangement`` gives it."""
    spec = sweep.spec
    held = _held(spec.resources, arrangement, grouped=True)
    cap = f"max {plan.cap} members a group" + (
        "" if spec.fusion.max_members is not None else f", the {plan.device.upper()} default"
    )
    if plan.off is not None:
        trials = sweep.num_trials  # the relative constraints' baselines too: none is fused
        lines = [f"fusion: none of the {trials} trials is fused: {plan.off}"] if trials > 1 else []
        if plan.planned:
            lines += _group_table(sweep, plan.planned)
        return lines
    if plan.seed_chunks:
        configs = len(sweep.cells) * spec.num_samples
        per = len(plan.seed_chunks)
        seeds = len(spec.seed_values)
        if not plan.active:
            return [f"fusion: each configuration's seed trains alone ({cap})"]
        return [
            f"fusion ({cap}): each configuration's {seeds} seeds train as {per} fused group(s) of "
            f"{', '.join(map(str, plan.seed_chunks))}: {configs * per} training processes for "
            f"{configs * seeds} trials (unfused: {configs * seeds}), each group holding one trial's "
            f"resources ({held}); a configuration's groups are named after it (<cell>#<n>)"
        ]
    fused, alone = plan.fused, [g for g in plan.groups if g.name is None]
    # the relative constraints' baselines, one per (cell, seed): the searcher's own trials, each
    # alone, not in the plan's groups (the counts below are of every trial the launch trains)
    baselines = len(sweep.plans) if baseline_of(spec) and plan.groups else 0
    trials = sum(len(g.slots) for g in plan.groups) + baselines
    lines = []
    if not fused and plan.alone:
        lines.append(f"fusion ({cap}): none of the {trials} trials trains fused; kept apart:")
    elif not fused:
        lines.append(
            f"fusion ({cap}): no two of the {trials} trials share their shapes: each trains alone"
            if not plan.apart
            else f"fusion ({cap}): each of the {trials} trials trains alone, the cost model's choice"
        )
    else:
        lines.append(
            f"fusion ({cap}): {sum(len(g.slots) for g in fused)} of the {trials} trials train in "
            f"{len(fused)} fused group(s), {len(alone) + baselines} alone: "
            f"{len(fused) + len(alone) + baselines} training processes for {trials} trials "
            f"(unfused: {trials}); each group holds one trial's "
            f"resources ({held}), its members 1/n each"
        )
        lines += _group_table(sweep, fused)
    lines += [f"  alone: {why}" for why in plan.alone]
    if baseline_of(spec) and plan.groups:  # the searcher's own trials, not in the plan's groups
        shown = " ".join(f"{k}={v}" for k, v in baseline_of(spec).items())
        lines.append(
            f"  alone: the baseline model of the relative constraints ({shown}), once per (cell, "
            "seed), before its unit's samples"
        )
    if plan.kinds:
        lines.append(
            f"  never fused with each other: trials that differ in {', '.join(plan.kinds)}"
        )
    if plan.costs is not None and (fused or plan.apart):
        device = "CPU" if plan.costs.device == "cpu" else plan.costs.name
        note = f"; {plan.costs.note}" if plan.costs.note else ""
        why = "; neighbouring groups kept apart, and why:" if plan.apart else ""
        lines.append(
            f"  groups cut where the measured step costs of the {device} say (sweeps/plan/"
            f"step_costs.json{note}){why}"
        )
    said: dict[tuple[frozenset[str], str], list[Any]] = {}  # each pair of cells once
    for apart in plan.apart:
        left, right = (_slots_text(sweep, slots) for slots in (apart.left, apart.right))
        said.setdefault((frozenset((left, right)), apart.reason), [left, right, 0])[2] += 1
    for (_, reason), (left, right, times) in said.items():
        again = f" (at {times} places in the order)" if times > 1 else ""
        lines.append(f"    {left}  |  {right}: {reason}{again}")
    return lines


def _slots_text(sweep: Any, slots: Any) -> str:
    """Which cells some of a group's trials belong to, folded (``length=20 K=1, 4``)."""
    cells = list({sweep.plans[s.unit].cell.slug: sweep.plans[s.unit].cell for s in slots}.values())
    return (_folded(cells) if len(cells) > 1 else None) or "; ".join(c.name for c in cells)


def _group_table(sweep: Any, groups: Any) -> list[str]:
    rows = [("group", "trials", "members")]
    rows += [(g.name or "", str(len(g.slots)), members_text(sweep, g)) for g in groups]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return [f"  {a.ljust(widths[0])}  {b.ljust(widths[1])}  {c}".rstrip() for a, b, c in rows]


def members_text(sweep: Any, group: Group) -> str:
    """A group's members by cell: ``attention=memory K=16: seeds 0, 1, 2``; cells that differ
    in one grid value each, with the same seeds, as ``length=20 attention=memory K=1, 4, 16:
    seeds 0, 1, 2``; for Optuna's samples of one unit, ``... seed=0: samples 1, 2, 3``."""
    by_cell: dict[str, list[tuple[int, int]]] = {}
    cells: dict[str, Any] = {}
    for slot in group.slots:
        p = sweep.plans[slot.unit]
        by_cell.setdefault(p.cell.name, []).append((p.seed, slot.sample))
        cells[p.cell.name] = p.cell
    searched = sweep.has_search and sweep.spec.num_samples > 1
    if not searched:
        seeds = {name: tuple(sorted({s for s, _ in pairs})) for name, pairs in by_cell.items()}
        if len(set(seeds.values())) == 1 and len(cells) > 1:
            folded = _folded(list(cells.values()))
            if folded is not None:
                return f"{folded}: {_seeds_text(next(iter(seeds.values())))}"
    parts = []
    for cell, pairs in by_cell.items():
        seeds = sorted({s for s, _ in pairs})
        if not searched:
            parts.append(f"{cell}: {_seeds_text(seeds)}")
            continue
        for seed in seeds:
            numbers = sorted(n + 1 for s, n in pairs if s == seed)
            parts.append(
                f"{cell} seed={seed}: sample{'s' if len(numbers) > 1 else ''} "
                f"{', '.join(map(str, numbers))}"
            )
    return "; ".join(parts)


def _seeds_text(seeds: Any) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def _folded(cells: list[Any]) -> str | None:
    """The cells' names with the grid values that differ between them listed once each
    (``length=20 attention=memory K=1, 4``), when the cells are every combination of those
    values; None otherwise (the names are listed one by one)."""
    keys = list(dict.fromkeys(k for c in cells for k in c.values))
    varying = {
        k: list(dict.fromkeys(c.values.get(k) for c in cells))
        for k in keys
        if len({repr(c.values.get(k)) for c in cells}) > 1
    }
    combos = 1
    for values in varying.values():
        combos *= len(values)
    if combos != len(cells):
        return None
    first = cells[0]
    name_parts = first.name.split(" ")
    out = []
    for part, key in zip(name_parts, first.values):
        if key in varying:
            label = part.split("=", 1)[0]
            out.append(f"{label}={', '.join(_value_text(v) for v in varying[key])}")
        else:
            out.append(part)
    return " ".join(out)


def _value_text(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _held(r: Any, arrangement: Any, grouped: bool) -> str:
    """What a trial alone (or a fused group, ``grouped``) reserves: the sweep file's resources,
    or under ``resources.gpu: auto`` the GPU arrangement's (``gpu: auto`` alone says nothing of
    what is reserved)."""
    cpu, gpu = r.cpu, r.gpu
    if arrangement is not None and arrangement.chosen:
        cpu, gpu = (
            (arrangement.group_cpu, arrangement.group_gpu)
            if grouped
            else (arrangement.lone_cpu, arrangement.lone_gpu)
        )
    return (
        f"cpu={cpu:g}"
        + (f" gpu={gpu:g}" if gpu else "")
        + (f" workers={r.workers}" if r.workers > 1 else "")
    )


def trial_table(plan: Any) -> str:
    """The trials of each (cell, seed), their resources, the search and the warm start. A fused
    group's trials show what the group holds (its members 1/n each); under ``resources.gpu:
    auto`` what the GPU arrangement reserves, and a line says what they hold without a GPU."""
    sweep = plan.sweep
    r = sweep.spec.resources
    a = plan.arrangement
    # (groups the arrangement dissolved are no longer named: their trials train alone)
    grouped = {s.unit for g in plan.fusion.groups if g.name is not None for s in g.slots}
    if plan.fusion.seed_chunks:  # the seeds in a configuration's fused chunks
        grouped = {s.unit for g in seed_groups(sweep, plan.fusion)[0] for s in g.slots}
    samples = sweep.spec.num_samples if sweep.has_search else 1
    rows = [("#", "cell", "seed", "samples", "resources")]
    rows += [
        (str(i + 1), p.cell.name, str(p.seed), str(samples), _held(r, a, i in grouped))
        for i, p in enumerate(sweep.plans)
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if a is not None and a.chosen:
        lines.append(
            "resources: on GPUs as the GPU arrangement below reserves them (resources.gpu auto); "
            f"where Ray offers no GPU every trial trains on the CPU with cpu={r.cpu:g}"
            + (
                f", a fused group (up to {plan.fusion.cap} members) cpu={r.cpu:g} for all its "
                "members"
                if plan.fusion.active
                else ""
            )
        )
    search = ""
    if sweep.has_search:
        keys = ", ".join(  # model.lr (log_uniform_values): how each is drawn, inferred or given
            f"{k} ({v.resolved_distribution()})" for k, v in sweep.spec.parameters.items()
        )
        search = f"; Optuna {sweep.spec.search.sampler.upper()} over {keys}, {samples} samples per cell and seed"
        if sweep.spec.per_configuration:
            search = (
                f"; configurations judged over seeds: one Optuna {sweep.spec.search.sampler.upper()} study per "
                f"cell over {keys}, {samples} configurations per cell, each trained on every seed and "
                f"told the {sweep.spec.seeds.objective} over its seeds"
            )
        else:
            search += " (per-unit mode: each (cell, seed) its own Optuna study)"
        if baseline_of(sweep.spec):  # counted in the trials: say where the extra ones come from
            shown = " ".join(f"{k}={v}" for k, v in baseline_of(sweep.spec).items())
            search += f", plus 1 baseline ({shown}) per cell and seed for the relative constraints"
    if plan.warm is not None:
        lines.append(plan.warm.summary())
    lines.append(
        f"{len(sweep.cells)} cells x {len(sweep.spec.seed_values)} seed(s) = {len(sweep.plans)} grid points, "
        f"{sweep.num_trials} trials{search}"
    )
    if confirm := confirm_summary(sweep):
        lines.append(confirm)
    return "\n".join(lines)


def confirm_trials(sweep: Any) -> int:
    """How many trials the confirm stage retrains: each cell's choice once per confirm seed."""
    return len(sweep.cells) * len(sweep.spec.confirm_seeds)


def confirm_summary(sweep: Any) -> str | None:
    """``--dry-run``'s line on the confirm trials (None without ``seeds.confirm``)."""
    seeds = sweep.spec.confirm_seeds
    if not seeds:
        return None
    n = confirm_trials(sweep)
    return (
        f"then confirm: each cell's chosen configuration retrained on the fresh seed(s) {seeds}: "
        f"{n} confirm trial(s) ({len(sweep.cells)} cells x {len(seeds)})"
        + (", evaluated on test" if sweep.spec.heldout.enabled else "")
        + ", reported beside the selection seeds"
    )
