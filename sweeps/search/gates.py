"""What a gate of the searcher (:class:`sweeps.search.base.SweepSearcher`) may do: hold a unit's
trials back until something else has happened, send some units first, add to a trial's config,
and run trials of its own before the search's.

Two gates exist: the teachers (:class:`sweeps.search.teachers.TeacherBook`: a student unit waits
until its teacher unit's trials have ended, and gets the chosen teacher's checkpoint) and the
baselines of relative constraints (:class:`sweeps.search.baselines.Baselines`: a unit's samples
wait for its baseline model). Both hold back fused groups the same way: a group goes out when
every member's unit is ready.
"""

from __future__ import annotations

from typing import Any


class Gate:
    """The gate that holds nothing back; each gate overrides what it does."""

    #: how the searcher finds it (``searcher.gate(kind)``)
    kind = ""

    def ready(self, unit: int) -> bool:
        """Whether ``unit``'s trials may start now."""
        return True

    def first(self, unit: int) -> bool:
        """Whether ``unit``'s trials go out before the others'."""
        return False

    def assignment(self, unit: int) -> dict[str, Any]:
        """What a trial of ``unit`` adds to its config when it is handed out."""
        return {}

    def own_trial(self, searcher: Any, trial_id: str) -> dict[str, Any] | None:
        """A trial of the gate's own to start now (its config), or None."""
        return None

    def ended(self, searcher: Any, trial_id: str, result: dict | None, error: bool) -> bool:
        """Whether ``trial_id`` was one of the gate's own trials (it has ended)."""
        return False

    def running(self) -> int:
        """How many of the gate's own trials are running."""
        return 0

    def note(self, unit: int, trial_id: str, result: dict | None, error: bool) -> None:
        """A trial of ``unit`` ended (for good, in this run)."""

    def reopen(self, unit: int, trial_id: str) -> None:
        """A trial of ``unit`` that failed will run again (``--resume``)."""

    def adopt(self, reused: dict[int, list[dict[str, Any]]]) -> None:
        """The trials a warm start reuses (per unit, their results rows), as ended trials."""

    def state(self) -> dict[str, Any]:
        return {}

    def load(self, state: dict[str, Any] | None) -> None:
        pass
