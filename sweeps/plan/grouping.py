"""How trials that may fuse are cut into fused groups: each trial's shape as the cost model sees
it (:func:`member_shape`), and the cheapest cut of a pool of them into groups of at most the cap
by the measured step costs of the device (:func:`cheapest_groups`, :mod:`sweeps.plan.step_costs`),
with the reason each two neighbouring groups stay apart (:class:`Apart`). Which trials may fuse at
all is :mod:`sweeps.plan.fusion`'s."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lightning_modules.fused.axes import MEMBER_ATTENTION_OPTIONS, PADDED_ATTENTION_OPTIONS
from sweeps.plan.step_costs import DeviceCosts, Member
from sweeps.spec.signatures import default_attention

FUSED_WITH, FUSED_MEMBER = "fused_with", "fused_member"
#: the task setting that is each member's own length (its datamodule's, and so its model's
#: ``max_source_len``) where the mechanism lets members differ in it
LENGTH_KEY = "max_length"
#: the preset a model section without one is costed as (Seq2SeqModule's default sizes)
DEFAULT_PRESET = "paper_copy"


@dataclass(frozen=True)
class Slot:
    """One trial to train: the ``sample``-th trial of the sweep's plan ``unit`` (a cell and seed)."""

    unit: int
    sample: int


@dataclass(frozen=True)
class Group:
    """Trials that train as one fused model (``name`` ``g1``, ``g2`` ...), or one that trains alone
    (``name`` None)."""

    name: str | None
    slots: tuple[Slot, ...]

    def member_config(self, j: int) -> dict[str, str]:
        """What member ``j`` (0-based) of this group adds to its Tune config (nothing when alone)."""
        if self.name is None:
            return {}
        return {FUSED_WITH: self.name, FUSED_MEMBER: f"{j + 1}/{len(self.slots)}"}


@dataclass(frozen=True)
class Apart:
    """Two neighbouring groups of trials that could have fused, and why they did not."""

    left: tuple[Slot, ...]
    right: tuple[Slot, ...]
    reason: str


def member_shape(
    task: dict[str, Any], model: dict[str, Any], sampled: dict[str, Any] | None = None
) -> Member:
    """What a trial brings to its group's cost (:class:`~sweeps.plan.step_costs.Member`): its
    length, its padded option (memory attention's K) and its switches. ``sampled``: the upper
    ends of Optuna parameters along a member axis, whose values are not known before Optuna asks
    (a group is costed as if each took its largest)."""
    attention = str(model.get("attention") or default_attention())
    values = {**model, **(sampled or {})}
    padded = [int(values[k]) for k in PADDED_ATTENTION_OPTIONS.get(attention, ()) if k in values]
    switches = tuple(
        (k, str(values.get(k)))
        for k in MEMBER_ATTENTION_OPTIONS.get(attention, ())
        if k not in PADDED_ATTENTION_OPTIONS.get(attention, ()) and k != "max_source_len"
    )
    length = int(task.get(LENGTH_KEY) or DEFAULT_LENGTH)
    return Member(length, max(padded) if padded else None, switches)


#: the length a task without ``max_length`` is costed at (a WMT pair's sentences)
DEFAULT_LENGTH = 50


#: seconds that tell partitions of equal cost apart: fewer groups, then cells kept whole
TIE = 1e-9


def cheapest_groups(
    pool: list[tuple[Slot, Member]], cap: int, costs: DeviceCosts, preset: str, sweep: Any
) -> tuple[list[list[tuple[Slot, Member]]], list[Apart]]:
    """``pool`` (trials that may fuse) cut into the groups of at most ``cap`` whose steps cost
    least on the device (:meth:`~sweeps.plan.step_costs.DeviceCosts.group_seconds`, summed over
    the groups: their members each train the same number of steps), and why each cut is there.
    The trials keep their order by Optuna sample, then length and padded size (so a cell's seeds,
    and cells of close shapes, are neighbours); the cuts are the cheapest of all that keep it
    (dynamic programming over the cut points)."""
    items = sorted(
        pool,
        key=lambda sm: (sm[0].sample, sm[1].length, sm[1].padded or 0, sm[1].switches, sm[0].unit),
    )
    n = len(items)

    def cost(a: int, b: int) -> float:
        return costs.group_seconds(preset, [m for _, m in items[a:b]])

    def splits_a_cell(a: int) -> bool:  # a cut at a parts one cell's trials
        cell = lambda i: sweep.plans[items[i][0].unit].cell.slug  # noqa: E731
        return 0 < a < n and cell(a - 1) == cell(a)

    # between cuts of equal cost: fewer groups, then cells kept whole
    best, cut = [0.0] + [math.inf] * n, [0] * (n + 1)
    for b in range(1, n + 1):
        for a in range(max(0, b - cap), b):
            c = best[a] + cost(a, b) + TIE + (TIE if splits_a_cell(a) else 0.0)
            if c < best[b]:
                best[b], cut[b] = c, a
    bounds, b = [], n
    while b > 0:
        bounds.append((cut[b], b))
        b = cut[b]
    bounds.reverse()
    chunks = [items[a:b] for a, b in bounds]
    why = []
    for (a0, a1), (b0, b1) in zip(bounds, bounds[1:]):
        if b1 - a0 > cap:
            reason = f"together they would be {b1 - a0} members, over the cap of {cap}"
        else:
            joined, split = cost(a0, b1), cost(a0, a1) + cost(b0, b1)
            reason = (
                f"one group's step would cost {joined:.3g} s against {split:.3g} s for the two "
                f"({_padding_text([m for _, m in items[a0:b1]])})"
            )
        slots = [s for s, _ in items]
        why.append(Apart(tuple(slots[a0:a1]), tuple(slots[b0:b1]), reason))
    return chunks, why


def _padding_text(members: list[Member]) -> str:
    """What joining ``members`` pads: lengths, the padded option, switched functions."""
    parts = []
    lengths = sorted({m.length for m in members})
    if len(lengths) > 1:
        parts.append(f"length {lengths[0]} padded to {lengths[-1]}")
    padded = sorted({m.padded for m in members if m.padded is not None})
    if len(padded) > 1:
        parts.append(f"K {padded[0]} padded to {padded[-1]}")
    if len({m.switches for m in members}) > 1:
        parts.append("both branches of switched functions")
    return ", ".join(parts) or "no padding"
