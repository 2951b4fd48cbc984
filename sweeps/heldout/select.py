"""Which trials the validation metric chose: the ones the held-out stage evaluates and the report's
held-out section shows. The same rule as the report's summary (:mod:`sweeps.report.summary`):

- per (cell, seed): the finished trial with the best metric over its Optuna samples (a sweep
  without ``parameters`` has one trial per (cell, seed): every finished trial is chosen);
- a sweep whose configurations are judged over seeds (rows carry ``config``, the configuration's
  number in its cell's Optuna study): per cell the configuration with the best mean over its seeds,
  and every seed's trial of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

FINISHED = ("done", "stopped", "converged")
#: the results.csv column that says a row is the chosen one of its (cell, seed) or cell
CHOSEN = "chosen"


def _value(row: Mapping[str, Any], metric: str) -> float | None:
    v = row.get(metric)
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if v != v else v


def chosen_trials(rows: Iterable[Mapping[str, Any]], metric: str, mode: str) -> set[str]:
    """Trial ids of the chosen trials among ``rows`` (results rows: ``trial_id``, ``cell``,
    ``seed``, ``status``, the metric, and ``config`` when configurations are judged over seeds).
    ``mode`` is ``max`` or ``min``; a row without the metric or unfinished is never chosen."""
    sign = 1.0 if mode == "max" else -1.0
    finished = [
        r
        for r in rows
        if r.get("status") in FINISHED and _value(r, metric) is not None and r.get("trial_id")
    ]
    by_config = [r for r in finished if _has(r.get("config"))]
    chosen: set[str] = set()
    best: dict[tuple, tuple[float, str]] = {}
    for r in finished:
        if _has(r.get("config")):
            continue
        key = (r["cell"], r["seed"])
        score = sign * _value(r, metric)
        if key not in best or score > best[key][0]:
            best[key] = (score, r["trial_id"])
    chosen |= {tid for _, tid in best.values()}
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in by_config:
        groups.setdefault((r["cell"], _config_key(r["config"])), []).append(r)
    per_cell: dict[Any, tuple[float, tuple]] = {}
    for (cell, config), members in groups.items():
        mean = sum(_value(m, metric) for m in members) / len(members)
        if cell not in per_cell or sign * mean > per_cell[cell][0]:
            per_cell[cell] = (sign * mean, (cell, config))
    for _, key in per_cell.values():
        chosen |= {m["trial_id"] for m in groups[key]}
    return chosen


def _has(value: Any) -> bool:
    return (
        value is not None
        and not (isinstance(value, float) and value != value)
        and str(value) != "<NA>"
    )


def _config_key(value: Any) -> str:
    try:
        return str(int(float(value)))
    except (TypeError, ValueError):
        return str(value)


def mark_chosen(rows: list[dict[str, Any]], metric: str, mode: str) -> set[str]:
    """Write ``chosen`` (True/False) into every row with a trial id; returns the chosen ids."""
    chosen = chosen_trials(rows, metric, mode)
    for r in rows:
        if r.get("trial_id"):
            r[CHOSEN] = r["trial_id"] in chosen
    return chosen
