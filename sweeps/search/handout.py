"""One trial at a time: the hand-out of a sweep whose trials train alone.

Each suggestion is a trial of the unit (per-unit scope) or cell (over seeds) with the fewest drawn
so far, the longest expected first (:mod:`sweeps.plan.cost`), then grid order, so all cells fill
the cluster together up to ``max_concurrent_trials``, longest first. Units the gates hold back are
passed over (nothing now when all are: Tune asks again when a trial ends), and the units a gate
sends first (teachers) go before the others. Over seeds, what is drawn is a configuration: its
seeds are handed out one after another, before any other configuration.
"""

from __future__ import annotations

from typing import Any

from ray.tune.search import Searcher

from sweeps.search.base import Draw


class OneAtATime:
    """The hand-out of trials that train alone (module docstring)."""

    def __init__(self) -> None:
        self.queue: list[Draw] = []  # drawn, not yet handed out (a configuration's other seeds)

    def next(self, searcher: Any) -> Draw | str | None:
        """The next trial to hand out, None for nothing now, or ``Searcher.FINISHED``."""
        if self.queue:
            return self.queue.pop(0)
        choices = searcher.scope.choices(searcher)
        if not choices:
            return Searcher.FINISHED
        ready = [c for c in choices if all(searcher.ready(u) for u in c.units)]
        if not ready:
            return None
        pick = min(
            ready,
            key=lambda c: (
                not any(searcher.first(u) for u in c.units),
                c.drawn,
                -c.cost,
                c.key,
            ),
        )
        self.queue = self.members(searcher, searcher.scope.draw_choice(searcher, pick.key))
        return self.queue.pop(0)

    def members(self, searcher: Any, draws: list[Draw]) -> list[Draw]:
        """What each trial of a draw adds to its config (nothing here)."""
        return draws

    def queued(self) -> set[int]:
        """Storage ids of the Optuna trials drawn and not yet handed out (they stay RUNNING)."""
        return {d.storage_id for d in self.queue if d.storage_id is not None}

    def state(self) -> dict[str, Any]:
        return {"queue": self.queue}

    def load(self, state: dict[str, Any] | None) -> None:
        self.queue = list((state or {}).get("queue", []))
