"""The driver's side of fused groups: the roster actor and the Tune callback that feeds it.

A group waits for its members before it trains and for each member's acknowledgement before each
validation; a member whose trial Tune has ended (finished, stopped, failed for good), or that Tune
will not start again in this run (a finished member of a resumed sweep), must not be waited for.
Only the driver knows which those are, so :class:`RosterFeed` (a Tune callback) hands the set of
ended members to the roster, and each group asks the roster.

The roster also creates each group's actor (:class:`sweeps.trial.fused.group.FusedGroup`) when the
group's first member asks for it, on that member's node, and hands the same actor to the others.
The roster owns the groups it creates: they end with it, and it ends with the driver (or when the
Tune run is over, :func:`stop_roster`), so no group outlives its sweep.

The actor's class, :class:`~sweeps.trial.fused.roster_actor.Roster`, lives in a module of its
own: the roster's process imports that module alone, not Tune (this one's callback needs it).
"""

from __future__ import annotations

from typing import Any

from ray.tune import Callback

from sweeps.plan.fusion import member_of
from sweeps.trial.fused.roster_actor import Roster

_ACTIVE: dict[str, Any] = {}


def start_roster(name: str, *args: Any) -> Any:
    """Create the roster actor of this Tune run under ``name`` (in the driver); ``args`` go to
    :class:`Roster`."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()  # the driver's node: it lives as long as the run
    handle = (
        ray.remote(Roster)
        .options(
            name=name,
            num_cpus=0,  # an asyncio actor: up to 1,000 calls at once (Ray's default)
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
        )
        .remote(*args)
    )
    _ACTIVE["roster"] = handle
    return handle


def stop_roster() -> None:
    """End the run's roster and every group it created (after the Tune run)."""
    import ray

    handle = _ACTIVE.pop("roster", None)
    if handle is not None:
        ray.kill(handle)


class RosterFeed(Callback):
    """Tells the roster of the run in progress which members Tune has ended. Saved with the
    experiment (Tune keeps a run's callbacks), so it holds nothing of its own: it finds the roster
    :func:`start_roster` made in this process."""

    def __init__(self) -> None:
        self._sent: frozenset = frozenset()

    def on_step_begin(self, iteration: int, trials: list, **info) -> None:
        roster = _ACTIVE.get("roster")
        if roster is None:
            return
        ended = frozenset(
            (found[0], found[1])
            for t in trials
            if t.status in ("TERMINATED", "ERROR") and (found := member_of(t.config or {}))
        )
        if ended != self._sent:
            roster.set_ended.remote(sorted(ended))
            self._sent = ended

    def __getstate__(self) -> dict:
        return {"_sent": frozenset()}  # a resumed run tells its new roster from the start
