"""Which trials the validation metric chose: the ones the held-out stage evaluates and the report's
held-out section shows. The same rule as the report's summary (:mod:`sweeps.report.summary`):

- per (cell, seed): the finished trial with the best metric over its Optuna samples (a sweep
  without ``parameters`` has one trial per (cell, seed): every finished trial is chosen);
- a sweep whose configurations are judged over seeds (rows carry ``configuration``, the configuration's
  number in its cell's Optuna study): per cell the configuration with the best mean over its seeds,
  and every seed's trial of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sweeps.report.columns import BASELINE, FINISHED  # noqa: F401 (importable from here too)
from sweeps.report.student_t import t975

#: the results.csv column that says a row is the chosen one of its (cell, seed) or cell
CHOSEN = "chosen"
#: results.csv's ``role`` column (a sweep with ``seeds.confirm``): ``select`` for the trials the choice
#: was made among, ``confirm`` for the chosen configuration retrained on a fresh seed afterwards
#: (:mod:`sweeps.stages.confirm`): never chosen, never part of a selection summary
ROLE, SELECT, CONFIRM = "role", "select", "confirm"


def is_baseline(row: Mapping[str, Any]) -> bool:
    """Whether a results row is a relative constraint's baseline (:data:`BASELINE`; "True" when
    read back from results.csv)."""
    return str(row.get(BASELINE, "")).strip().lower() in ("true", "1", "1.0")


def is_confirm(row: Mapping[str, Any]) -> bool:
    """Whether a results row is a confirm trial (``role: confirm``), not one selection saw."""
    return str(row.get(ROLE, "")) == CONFIRM


def _value(row: Mapping[str, Any], metric: str) -> float | None:
    v = row.get(metric)
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if v != v else v


def aggregate(values: list[float], objective: str = "mean", mode: str = "max") -> float:
    """The figure a configuration is judged on over its seeds: the mean of their values, or
    (``lcb``) the end of their 95% t-interval that is worse for ``mode`` (``max``: mean -
    t*sd/sqrt(n)). One seed: its value. What Optuna is told (:mod:`sweeps.search.over_seeds`)."""
    import math

    n = len(values)
    mean = sum(values) / n
    if objective != "lcb" or n < 2:
        return mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return mean - half if mode == "max" else mean + half


def chosen_trials(
    rows: Iterable[Mapping[str, Any]], metric: str, mode: str, objective: str = "mean"
) -> set[str]:
    """Trial ids of the chosen trials among ``rows`` (results rows: ``trial_id``, ``cell``,
    ``seed``, ``status``, the metric, and ``configuration`` when configurations are judged over
    seeds). ``mode`` is ``max`` or ``min``; a row without the metric or unfinished, or a confirm
    trial (:func:`is_confirm`) or a relative constraint's baseline (:func:`is_baseline`), is
    never chosen.
    Over seeds, a configuration all of whose seeds ran to the end (not stopped early) beats one
    stopped at a rung, then more finished seeds beat fewer, then the ``objective``'s aggregate."""
    sign = 1.0 if mode == "max" else -1.0
    finished = [
        r
        for r in rows
        if r.get("status") in FINISHED
        and _value(r, metric) is not None
        and r.get("trial_id")
        and not is_confirm(r)
        and not is_baseline(r)
    ]
    chosen: set[str] = set()
    best: dict[tuple, tuple[float, str]] = {}
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in finished:
        if _has(r.get("configuration")):
            groups.setdefault((r["cell"], _config_key(r["configuration"])), []).append(r)
            continue
        key = (r["cell"], r["seed"])
        score = sign * _value(r, metric)
        if key not in best or score > best[key][0]:
            best[key] = (score, r["trial_id"])
    chosen |= {tid for _, tid in best.values()}
    per_cell: dict[Any, tuple[tuple, tuple]] = {}
    for (cell, config), members in groups.items():
        whole = all(m.get("status") != "stopped" for m in members)
        score = sign * aggregate([_value(m, metric) for m in members], objective, mode)
        rank = (whole, len(members), score)
        if cell not in per_cell or rank > per_cell[cell][0]:
            per_cell[cell] = (rank, (cell, config))
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


def mark_chosen(
    rows: list[dict[str, Any]], metric: str, mode: str, objective: str = "mean"
) -> set[str]:
    """Write ``chosen`` (True/False) into every row with a trial id, and where configurations
    were judged over seeds by another aggregate than the mean, that ``objective`` into their rows
    (:data:`SEED_OBJECTIVE`: the report's tables choose as the launch did); returns the chosen ids."""
    chosen = chosen_trials(rows, metric, mode, objective)
    for r in rows:
        if r.get("trial_id"):
            r[CHOSEN] = r["trial_id"] in chosen
            if objective != "mean" and _has(r.get("configuration")):
                r[SEED_OBJECTIVE] = objective
    return chosen


#: results.csv's column of the aggregate over seeds the configurations were judged by, where it is
#: not the mean (``lcb``)
SEED_OBJECTIVE = "seed_objective"


def seed_objective(rows: Any) -> str:
    """The aggregate over seeds a results frame's configurations were judged by (its
    :data:`SEED_OBJECTIVE` column), ``mean`` where none is written."""
    if SEED_OBJECTIVE not in rows:
        return "mean"
    values = [v for v in rows[SEED_OBJECTIVE] if isinstance(v, str) and v]
    return values[0] if values else "mean"


def chosen_configurations(
    rows: Iterable[Mapping[str, Any]],
    metric: str,
    mode: str,
    objective: str = "mean",
    param_keys: Iterable[str] = (),
) -> dict[str, dict[str, Any]]:
    """Per cell, the one configuration the choice settled on, what ``seeds.confirm`` retrains:
    ``{cell: {"params": {dotted key: value}, "configuration": its number or None, "from": [the
    chosen trial ids]}}``. Over seeds: the chosen configuration. Per (cell, seed), where each seed
    chose its own: the chosen trial with the best metric over the seeds. Without ``parameters``:
    the cell's one setting (``params`` empty)."""
    rows = list(rows)
    keys = list(param_keys)
    chosen = chosen_trials(rows, metric, mode, objective)
    sign = 1.0 if mode == "max" else -1.0
    best: dict[str, tuple[float, Mapping[str, Any]]] = {}
    ids: dict[str, list[str]] = {}
    for r in rows:
        if r.get("trial_id") not in chosen:
            continue
        ids.setdefault(r["cell"], []).append(r["trial_id"])
        score = sign * _value(r, metric)
        if r["cell"] not in best or score > best[r["cell"]][0]:
            best[r["cell"]] = (score, r)
    return {
        cell: {
            "params": {k: r.get(f"param:{k}") for k in keys},
            "configuration": int(_config_key(r["configuration"]))
            if _has(r.get("configuration"))
            else None,
            "from": ids[cell],
        }
        for cell, (_, r) in best.items()
    }
