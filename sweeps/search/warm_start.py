"""A new searcher given what a warm start brings (:mod:`sweeps.plan.warm_start` decides what that is),
through the same parts whatever the searcher is made of (:mod:`sweeps.search.base`): the reused
trials counted as started in their units, the gates told of them (a reused teacher teaches its
students), and each Optuna study told the earlier finished trials of its unit or cell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from sweeps.plan.warm_start import WarmStart, fits


def tell_earlier(study: Any, trials: list[Any], space: dict[str, Any], source: Path) -> int:
    """Add the earlier finished ``trials`` to a new, empty ``study`` (``add_trial``), those whose
    parameters are exactly the new ``space``'s names and lie inside its distributions and, when
    COMPLETE, have one value per direction of ``study`` (a multi-objective study's vector, with the
    trial's constraints for the samplers that read them). Returns how many were told."""
    told, n = 0, len(study.directions)
    for t in trials:
        if not fits(t, space):
            continue
        complete = t.state == optuna.trial.TrialState.COMPLETE
        if complete and len(t.values or []) != n:
            continue  # another number of objectives: not this study's kind of result
        study.add_trial(
            optuna.trial.create_trial(
                params=t.params,
                distributions=space,
                values=list(t.values) if complete else None,
                state=t.state,
                intermediate_values=dict(t.intermediate_values),
                user_attrs={**t.user_attrs, "warm_start_from": str(source)},
                constraints=_constraints(t),
            )
        )
        told += 1
    return told


def _constraints(trial: Any) -> dict[str, float] | None:
    try:
        found = trial.constraints
    except (AttributeError, KeyError, TypeError):
        return None
    return dict(found) if isinstance(found, dict) and found else None


def apply_warm_start(searcher: Any, warm: WarmStart | None) -> None:
    """Give a new searcher what the earlier sweep knows, through its parts: the reused trials
    count as started in their units, the gates take them as ended (a reused teacher teaches),
    every Optuna study of the scope is opened and told the earlier trials of its unit (or cell),
    and a configuration reused whole is the scope's (over seeds). Sets ``searcher.reused_count``."""
    searcher.reused_count = 0
    if warm is None:
        return
    for i, rows in warm.reused.items():
        searcher.started[i] += len(rows)
    searcher.reused_count = warm.reused_count
    for gate in searcher.gates:
        gate.adopt(warm.reused)
    scope = searcher.scope
    if not scope.space or not warm.told:
        return
    for study, name in scope.studies():
        suffix = name.split("/", 1)[-1]
        earlier, names = warm.told.get(suffix), warm.names.get(suffix)
        if names and study.metric_names and list(names) != list(study.metric_names):
            continue  # a multi-objective study of other objectives: its values mean other things
        if earlier and not study.trials:
            tell_earlier(study, earlier, scope.space, warm.folder)
    scope.adopt(warm)
