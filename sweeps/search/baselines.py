"""The baseline model of relative constraints (``constraints: [{name: val/bleu, within: 1, of:
{attention: bahdanau}}]``): trained once per (cell, seed), before that unit's search trials, in
the same Tune run (its config: the unit's, with ``set: {model.attention: bahdanau}``). Its metrics
are what the relative constraints of the unit's trials are measured against, and the unit's
Optuna study's ``baseline`` user attribute.

:class:`Baselines` is a gate of the searcher (:mod:`sweeps.search.gates`): its own trials go out
before any search trial, and a unit's samples (a fused group: every member's unit) wait until the
unit's baseline has ended. A baseline trains alone, never in a fused group.
"""

from __future__ import annotations

from typing import Any

from sweeps.search.gates import Gate

RUNNING, FAILED = "running", "failed"


class Baselines(Gate):
    """Args: ``units`` (the sweep's), ``settings``: the baseline's model settings as dotted keys
    (:func:`sweeps.spec.objectives.baseline_of`)."""

    kind = "baselines"

    def __init__(self, units: list[Any], settings: dict[str, Any]) -> None:
        self.units = units
        self.settings = dict(settings)
        # per unit: None (not started), "running", "failed", or the baseline's metrics
        self.states: list[Any] = [None] * len(units)
        self.ids: dict[str, int] = {}  # Ray trial id of a running baseline -> its unit

    def ready(self, unit: int) -> bool:
        return self.states[unit] not in (None, RUNNING)

    def metrics(self, unit: int) -> dict[str, float]:
        """The baseline's metrics of ``unit`` ({} while unknown, or when it failed)."""
        state = self.states[unit]
        return state if isinstance(state, dict) else {}

    def own_trial(self, searcher: Any, trial_id: str) -> dict[str, Any] | None:
        waiting = [i for i, s in enumerate(self.states) if s is None]
        if not waiting:
            return None
        i = min(waiting, key=lambda j: (searcher.started[j], j))
        self.states[i] = RUNNING
        self.ids[trial_id] = i
        return {**self.units[i].config, "set": dict(self.settings)}

    def running(self) -> int:
        return len(self.ids)

    def ended(self, searcher: Any, trial_id: str, result: dict | None, error: bool) -> bool:
        """A baseline ended: its metrics (those the objectives and the relative constraints
        name) become its unit's, and its study's ``baseline`` attribute."""
        if trial_id not in self.ids:
            return False
        i = self.ids.pop(trial_id)
        result = result or {}
        objective = searcher.objective
        names = [c.name for c in objective.constraints if c.of]
        config = self.units[i].config | {"set": self.settings}
        measured = {  # the objectives in their order, then the constraints' (the report's order)
            n: objective.reader.value(config, result, n)
            for n in dict.fromkeys([*objective.names, *names])
        }
        ok = not error and all(measured.get(n) is not None for n in names)
        self.states[i] = (
            {k: float(v) for k, v in measured.items() if v is not None} if ok else FAILED
        )
        searcher.scope.study(i).set_user_attr(
            "baseline",
            {
                "model": self.settings,
                "metrics": self.states[i] if ok else None,
                "steps": result.get("step"),
                "failed": not ok,
            },
        )
        return True

    def state(self) -> dict[str, Any]:
        return {"states": self.states}

    def load(self, state: dict[str, Any] | None) -> None:
        """A baseline that was running when the driver stopped trains again."""
        saved = (state or {}).get("states", self.states)
        self.states = [None if s == RUNNING else s for s in saved]
        self.ids = {}
