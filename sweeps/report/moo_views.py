"""The multi-objective studies of a sweep, read back for its report (:mod:`sweeps.report.moo`) and
plots (:mod:`sweeps.report.moo_plots`): one :class:`StudyView` per (cell, seed) study of the Optuna
journal, its trials as :class:`Point` s (objective values as the search saw them, the timing
stage's ``decode_seconds`` from results.csv beside them, the constraints each broke, the rung
decision that stopped it), and the hypervolume and its history against the training steps spent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeps.layout import OPTUNA_JOURNAL, RESULTS_CSV
from sweeps.report.pareto import hypervolume_2d, pareto_mask, to_minimize


@dataclass
class Point:
    number: int
    params: dict[str, Any]
    values: list[float]
    steps: int
    state: str  # COMPLETE, PRUNED, FAIL
    feasible: bool = True
    broken: list[str] = field(default_factory=list)
    timed: float | None = None  # the timing stage's figure of the second objective
    completed: float = 0.0  # completion time, for the history
    rung: dict | None = None
    trial_id: str | None = None  # Ray's: results.csv's trial_id


@dataclass
class StudyView:
    name: str
    cell: str
    seed: int
    directions: list[str]
    metric_names: list[str]
    points: list[Point]
    baseline: dict | None = None
    constraints: list[str] = field(
        default_factory=list
    )  # every constraint's name, as Optuna holds it

    @property
    def seed_label(self) -> str:
        """``seed <s>``, or for a cell study of configurations judged over seeds (no ``-seed<s>``
        in its name, :mod:`sweeps.search.over_seeds`) what its values are."""
        return f"seed {self.seed}" if self.seed >= 0 else "means over seeds"

    @property
    def finished(self) -> list[Point]:
        return [p for p in self.points if p.state == "COMPLETE"]

    def front(self) -> list[Point]:
        ok = [p for p in self.finished if p.feasible]
        mask = pareto_mask([to_minimize(p.values, self.directions) for p in ok])
        return sorted(
            (p for p, m in zip(ok, mask) if m),
            key=lambda p: p.values[1 if len(p.values) > 1 else 0],
        )


def load_views(sweep_dir: Path) -> list[StudyView]:
    """Every multi-objective study of the sweep's journal, with results.csv's timing figures."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    journal = Path(sweep_dir) / OPTUNA_JOURNAL
    if not journal.exists():
        return []
    storage = JournalStorage(JournalFileBackend(str(journal)))
    views, timed_by = [], {}
    for name in optuna.get_all_study_names(storage):
        study = optuna.load_study(study_name=name, storage=storage)
        if len(study.directions) < 2:
            continue
        # the timing stage's figure of the second objective (decode_seconds, train_step_seconds...)
        figure = (study.metric_names or ["", "decode_seconds"])[1]
        if figure not in timed_by:
            timed_by[figure] = _timed_by_trial(Path(sweep_dir) / RESULTS_CSV, figure)
        timed = timed_by[figure]
        directions = [
            "maximize" if d == optuna.study.StudyDirection.MAXIMIZE else "minimize"
            for d in study.directions
        ]
        points, constraints = [], {}
        for t in study.get_trials(deepcopy=False):
            constraints.update(dict.fromkeys(t.constraints))
            if "duplicate_of" in t.user_attrs:
                continue  # told the outcome of the trial it repeats: no training of its own
            values = list(t.values) if t.values else _last_intermediate(t)
            broken = [name for name, v in t.constraints.items() if v > 0]
            points.append(
                Point(
                    number=t.number,
                    params=dict(t.params),
                    values=values or [],
                    steps=int(t.user_attrs.get("steps") or 0),
                    state=t.state.name,
                    feasible=not broken,
                    broken=broken,
                    timed=timed.get(t.user_attrs.get("ray_trial_id")),
                    completed=t.datetime_complete.timestamp() if t.datetime_complete else math.inf,
                    rung=t.user_attrs.get("rung"),
                    trial_id=t.user_attrs.get("ray_trial_id"),
                )
            )
        slug = name.split("/", 1)[-1].rsplit("-seed", 1)
        views.append(
            StudyView(
                name=name,
                cell=_cell_name(slug[0]),
                seed=int(slug[1]) if len(slug) > 1 else -1,
                directions=directions,
                metric_names=list(study.metric_names or ["objective 1", "objective 2"]),
                points=points,
                baseline=study.user_attrs.get("baseline"),
                constraints=list(constraints),
            )
        )
    return views


def reference_point(view: StudyView) -> tuple[float, float]:
    """The hypervolume's reference (minimised form): a maximised metric at 0 (BLEU 0), a minimised
    one 10 % past the slowest value any trial of the study had (its probe estimate)."""
    ref = []
    for m, d in enumerate(view.directions):
        col = [p.values[m] for p in view.points if len(p.values) > m]
        if d == "maximize":
            ref.append(0.0)
        else:
            ref.append(1.1 * max(col) if col else 1.0)
    return tuple(ref)  # type: ignore[return-value]


def hypervolume(points: Sequence[Point], view: StudyView, ref: Sequence[float]) -> float:
    return hypervolume_2d(
        [to_minimize(p.values, view.directions) for p in points if p.feasible], ref
    )


def history(view: StudyView) -> list[tuple[int, float]]:
    """(training steps spent so far, hypervolume of the feasible finished trials so far), after
    each trial of the study ended (stopped ones add their steps, finished ones their point)."""
    ref = reference_point(view)
    spent, done, out = 0, [], []
    for p in sorted(
        (p for p in view.points if p.state in ("COMPLETE", "PRUNED")), key=lambda p: p.completed
    ):
        spent += p.steps
        if p.state == "COMPLETE":
            done.append(p)
        out.append((spent, hypervolume(done, view, ref)))
    return out


def _timed_by_trial(csv: Path, column: str = "decode_seconds") -> dict[str, float]:
    if not csv.exists():
        return {}
    import pandas as pd

    df = pd.read_csv(csv, dtype={"trial_id": str})
    if column not in df or "trial_id" not in df:
        return {}
    values = pd.to_numeric(df[column], errors="coerce")  # text (a hand edit): not timed
    return {t: float(v) for t, v in zip(df["trial_id"], values) if v == v}


def _last_intermediate(t: Any) -> list[float]:
    curve = t.user_attrs.get("intermediate") or {}
    if not curve:
        return []
    return list(curve[max(curve, key=int)])


def _cell_name(slug: str) -> str:
    return " ".join(part.replace("-", "=", 1) for part in slug.split("_"))
