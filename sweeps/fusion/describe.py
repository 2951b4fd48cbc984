"""What ``--dry-run`` (and every launch) says about a sweep's fusion: the groups and their
members, why some trials train alone, and what the fused sweep holds against the unfused one."""

from __future__ import annotations

from typing import Any

from sweeps.fusion.plan import FusionPlan, Group


def fusion_lines(sweep: Any, plan: FusionPlan) -> list[str]:
    """The lines the launcher prints about ``plan`` (none for a sweep with nothing to fuse)."""
    spec = sweep.spec
    r = spec.resources
    held = f"cpu={r.cpu:g}" + (f" gpu={r.gpu:g}" if r.gpu else "")
    cap = f"max {plan.cap} members a group" + (
        "" if spec.fusion.max_members is not None else f", the {plan.device.upper()} default"
    )
    if plan.off is not None:
        trials = sum(len(g.slots) for g in plan.groups) or sweep.num_trials
        return [f"fusion: none of the {trials} trials is fused: {plan.off}"] if trials > 1 else []
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
    trials = sum(len(g.slots) for g in plan.groups)
    lines = []
    if not fused and plan.alone:
        lines.append(f"fusion ({cap}): none of the {trials} trials trains fused; kept apart:")
    elif not fused:
        lines.append(
            f"fusion ({cap}): no two of the {trials} trials share their shapes: each trains alone"
        )
    else:
        lines.append(
            f"fusion ({cap}): {sum(len(g.slots) for g in fused)} of the {trials} trials train in "
            f"{len(fused)} fused group(s), {len(alone)} alone: {len(fused) + len(alone)} training "
            f"processes for {trials} trials (unfused: {trials}); each group holds one trial's "
            f"resources ({held}), its members 1/n each"
        )
        rows = [("group", "trials", "members")]
        rows += [(g.name or "", str(len(g.slots)), members_text(sweep, g)) for g in fused]
        widths = [max(len(row[i]) for row in rows) for i in range(2)]
        lines += [f"  {a.ljust(widths[0])}  {b.ljust(widths[1])}  {c}".rstrip() for a, b, c in rows]
    lines += [f"  alone: {why}" for why in plan.alone]
    return lines


def members_text(sweep: Any, group: Group) -> str:
    """A group's members by cell: ``attention=memory K=16: seeds 0, 1, 2`` or, for Optuna's
    samples of one unit, ``... seed=0: samples 1, 2, 3``."""
    by_cell: dict[str, list[tuple[int, int]]] = {}
    for slot in group.slots:
        p = sweep.plans[slot.unit]
        by_cell.setdefault(p.cell.name, []).append((p.seed, slot.sample))
    searched = sweep.has_search and sweep.spec.num_samples > 1
    parts = []
    for cell, pairs in by_cell.items():
        seeds = sorted({s for s, _ in pairs})
        if not searched:
            parts.append(
                f"{cell}: seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
            )
            continue
        for seed in seeds:
            numbers = sorted(n + 1 for s, n in pairs if s == seed)
            parts.append(
                f"{cell} seed={seed}: sample{'s' if len(numbers) > 1 else ''} "
                f"{', '.join(map(str, numbers))}"
            )
    return "; ".join(parts)
