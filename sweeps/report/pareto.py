"""Pareto maths for the multi-objective search, on plain sequences (no Ray, no Optuna).

Every function takes points as tuples to MINIMISE (:func:`to_minimize` flips the maximised
objectives), so "a dominates b" means a is no worse on every objective and better on one.

- :func:`pareto_ranks`      non-dominated sorting: rank 0 is the front, rank 1 the front once rank 0
                            is removed, and so on (NSGA-II's sort)
- :func:`crowding`          NSGA-II's crowding distance inside one rank (ends: infinite)
- :func:`hypervolume_2d`    the area two objectives' points dominate up to a reference point
- :func:`rung_survivors`    the early-stopping rule at one rung (see ``docs/moo_early_stopping.md``)

:func:`dominates` and :func:`hopeless` take an optional ``tolerance``: per objective, a relative
difference a point must be better by to count as better, so that a measurement's noise (the decode
probe's few per cent) cannot by itself make a trial hopeless. The rungs, the front and the
hypervolume use plain dominance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Point = Sequence[float]
Tolerance = Sequence[float] | None


def to_minimize(values: Sequence[float], directions: Sequence[str]) -> tuple[float, ...]:
    """``values`` with every ``maximize`` objective negated."""
    return tuple(-float(v) if d == "maximize" else float(v) for v, d in zip(values, directions))


def dominates(a: Point, b: Point, tolerance: Tolerance = None) -> bool:
    """a is no worse than b on every objective and strictly better on one (minimisation).

    With ``tolerance`` (one relative figure per objective, 0 for exact), "better" must be by more
    than ``tolerance x`` the larger magnitude: a is no worse than b on every objective and better by
    more than that on one. So a difference within the noise never makes a dominate b, and it never
    hides that a is worse somewhere: the relation holds only where plain dominance holds too."""
    if not tolerance:
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))
    return all(x <= y for x, y in zip(a, b)) and any(
        x < y - t * max(abs(x), abs(y)) for x, y, t in zip(a, b, tolerance)
    )


def pareto_ranks(points: Sequence[Point]) -> list[int]:
    """Each point's Pareto rank: 0 for points no other point dominates, k for points dominated
    only by points of ranks below k. O(n^2) per rank; rungs hold tens of points."""
    remaining = set(range(len(points)))
    ranks = [0] * len(points)
    rank = 0
    while remaining:
        front = {
            i
            for i in remaining
            if not any(dominates(points[j], points[i]) for j in remaining if j != i)
        }
        for i in front:
            ranks[i] = rank
        remaining -= front
        rank += 1
    return ranks


def pareto_mask(points: Sequence[Point]) -> list[bool]:
    """True for the non-dominated points (rank 0). Duplicates of a front point are all on it."""
    return [r == 0 for r in pareto_ranks(points)]


def crowding(points: Sequence[Point], members: Sequence[int]) -> dict[int, float]:
    """NSGA-II's crowding distance of each index in ``members`` (one rank) among themselves:
    the sum over objectives of the normalised gap between its two neighbours; the ends of each
    objective's order get infinity, so the extremes of a front are kept first."""
    out = {i: 0.0 for i in members}
    if len(members) <= 2:
        return {i: math.inf for i in members}
    for m in range(len(points[members[0]])):
        order = sorted(members, key=lambda i: (points[i][m], i))
        low, high = points[order[0]][m], points[order[-1]][m]
        out[order[0]] = out[order[-1]] = math.inf
        if high == low:
            continue
        for prev, cur, nxt in zip(order, order[1:], order[2:]):
            out[cur] += (points[nxt][m] - points[prev][m]) / (high - low)
    return out


def rung_order(points: Sequence[Point], ranks: Sequence[int] | None = None) -> list[int]:
    """Indices best first: by Pareto rank, then larger crowding distance, then arrival (index).
    ``ranks``: :func:`pareto_ranks` of ``points`` when the caller has them already."""
    ranks = pareto_ranks(points) if ranks is None else ranks
    dist: dict[int, float] = {}
    for r in set(ranks):
        dist.update(crowding(points, [i for i, x in enumerate(ranks) if x == r]))
    return sorted(range(len(points)), key=lambda i: (ranks[i], -dist[i], i))


def keep_count(n: int, reduction_factor: float) -> int:
    """How many of ``n`` trials at a rung go on: ASHA's quantile rule counted out (a trial goes on
    when it is at or above the (1 - 1/rf) quantile of the rung, linear interpolation): n=1 -> 1,
    n=2 or 3 -> 1, n=4 -> 2 at rf=3."""
    if n <= 0:
        return 0
    position = (1.0 - 1.0 / reduction_factor) * (n - 1)
    return max(1, n - math.ceil(position - 1e-9))


def rung_standing(points: Sequence[Point], reduction_factor: float) -> tuple[list[int], int]:
    """A rung's order (:func:`rung_order`) and how many of it go on: the top 1/rf
    (:func:`keep_count`), and never fewer than the rung's non-dominated points (no point on the
    rung's front is stopped). One non-dominated sort for both."""
    ranks = pareto_ranks(points)
    return rung_order(points, ranks), max(keep_count(len(points), reduction_factor), ranks.count(0))


def rung_survivors(points: Sequence[Point], reduction_factor: float) -> set[int]:
    """The rung rule: of the points recorded at a rung, the first ``keep`` in :func:`rung_order`
    go on (:func:`rung_standing`): every non-dominated point, and at least the top 1/rf by Pareto
    rank (crowding distance breaking ties)."""
    order, keep = rung_standing(points, reduction_factor)
    return set(order[:keep])


def hopeless(optimistic: Point, finished: Sequence[Point], tolerance: Tolerance = None) -> bool:
    """Whether a finished point dominates the best a running trial could still reach
    (``optimistic``: its known objectives as they are, the trained ones at their bounds), better
    by more than ``tolerance`` somewhere (:func:`dominates`): a stop that is never undone, so it must
    not rest on noise."""
    return any(dominates(f, optimistic, tolerance) for f in finished)


def hypervolume_2d(points: Sequence[Point], reference: Point) -> float:
    """The area dominated by ``points`` (two objectives, minimised) and bounded by
    ``reference``; points not better than the reference on both count nothing."""
    inside = sorted(
        (float(a), float(b)) for a, b in points if a < reference[0] and b < reference[1]
    )
    area, best_b = 0.0, float(reference[1])
    for (
        a,
        b,
    ) in (
        inside
    ):  # ascending first objective: each point adds the strip below the best second so far
        if b < best_b:
            area += (reference[0] - a) * (best_b - b)
            best_b = b
    return area


def reference_point(
    points: Sequence[Point], margin: float = 0.1, floor: Point | None = None
) -> tuple[float, ...]:
    """A reference point just past the worst value of each objective: worst + ``margin`` x the
    objective's range (or x |worst| when every point ties), at least ``floor`` when given."""
    ref = []
    for m in range(len(points[0])):
        col = [p[m] for p in points]
        span = (max(col) - min(col)) or abs(max(col)) or 1.0
        value = max(col) + margin * span
        if floor is not None:
            value = max(value, floor[m])
        ref.append(value)
    return tuple(ref)
