"""What ``--dry-run`` (and every launch) prints of its plan (:class:`~sweeps.plan.sweep_plan.SweepPlan`),
exactly as the launch uses it: the trials and their resources, the warm start, the fused groups and
their members (and why some trials train alone), the early stopping, the teachers' order, the
stop rule, the budget."""

from __future__ import annotations

from typing import Any

from sweeps.plan.fusion import FusionPlan, Group
from sweeps.spec.objectives import baseline_of
from sweeps.spec.teachers import order_lines


def describe(plan: Any) -> list[str]:
    """The plan's lines, in the order a launch prints them."""
    sweep = plan.sweep
    lines = [trial_table(plan)]
    lines += fusion_lines(sweep, plan.fusion)
    note = sweep.early_stopping_note()
    if note:
        lines.append(note)
    lines += order_lines(sweep)  # dependent trials: which cells wait for which
    if sweep.spec.stop_when is not None:
        lines.append(
            f"stop_when: a trial stops once {sweep.spec.stop_when.describe()} (status converged)"
        )
    return lines + list(plan.budget_lines)


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
    if not fused:
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
    if baseline_of(spec) and plan.groups:  # the searcher's own trials, not in the plan's groups
        shown = " ".join(f"{k}={v}" for k, v in baseline_of(spec).items())
        lines.append(
            f"  alone: the baseline model of the relative constraints ({shown}), once per (cell, "
            "seed), before its unit's samples"
        )
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


def trial_table(plan: Any) -> str:
    """The trials of each (cell, seed), their resources, the search and the warm start."""
    sweep = plan.sweep
    r = sweep.spec.resources
    res = (
        f"cpu={r.cpu:g}"
        + (f" gpu={r.gpu:g}" if r.gpu else "")
        + (f" workers={r.workers}" if r.workers > 1 else "")
    )
    samples = sweep.spec.num_samples if sweep.has_search else 1
    rows = [("#", "cell", "seed", "samples", "resources")]
    rows += [
        (str(i + 1), p.cell.name, str(p.seed), str(samples), res) for i, p in enumerate(sweep.plans)
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    search = ""
    if sweep.has_search:
        keys = ", ".join(sweep.spec.parameters)
        search = f"; Optuna {sweep.spec.search.sampler.upper()} over {keys}, {samples} samples per cell and seed"
        if sweep.spec.per_configuration:
            search = (
                f"; configurations judged over seeds: one Optuna {sweep.spec.search.sampler.upper()} study per "
                f"cell over {keys}, {samples} configurations per cell, each trained on every seed and "
                f"told the {sweep.spec.seeds.objective} over its seeds"
            )
        else:
            search += " (per-unit mode: each (cell, seed) its own Optuna study)"
    if plan.warm is not None:
        lines.append(plan.warm.summary())
    lines.append(
        f"{len(sweep.cells)} cells x {len(sweep.spec.seed_values)} seed(s) = {len(sweep.plans)} grid points, "
        f"{sweep.num_trials} trials{search}"
    )
    if confirm := confirm_summary(sweep):
        lines.append(confirm)
    return "\n".join(lines)


def confirm_summary(sweep: Any) -> str | None:
    """``--dry-run``'s line on the confirm trials (None without ``seeds.confirm``)."""
    seeds = sweep.spec.confirm_seeds
    if not seeds:
        return None
    n = len(sweep.cells) * len(seeds)
    return (
        f"then confirm: each cell's chosen configuration retrained on the fresh seed(s) {seeds}: "
        f"{n} confirm trial(s) ({len(sweep.cells)} cells x {len(seeds)})"
        + (", evaluated on test" if sweep.spec.heldout.enabled else "")
        + ", reported beside the selection seeds"
    )
