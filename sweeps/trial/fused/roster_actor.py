"""The roster actor (:class:`Roster`): it creates each fused group's actor and tells the groups
which of their members Tune has ended (:mod:`sweeps.trial.fused.roster` says how the driver feeds
it). Its process imports this module and what it imports, and nothing of Tune: one roster runs
beside every fused sweep, so each second of imports here is paid by every launch.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sweeps.trial.fused.group import FusedGroup

#: seconds the roster waits for a group that has answered before to answer again, before taking
#: it for hung (one that has never answered is still starting, and is waited for:
#: :meth:`Roster._answers`)
ALIVE_TIMEOUT_S = 60.0


class Roster:
    """The roster actor (created by :func:`sweeps.trial.fused.roster.start_roster`; one per Tune
    run). An asyncio actor: a member waiting for its group's actor to start holds no thread, so
    any number of members (a GPU's groups of 16, several at once) wait side by side, and the
    groups' own questions (:meth:`ended_members`) are answered meanwhile."""

    def __init__(self, group_class: type = FusedGroup, alive_timeout_s: float = ALIVE_TIMEOUT_S):
        self.group_class = group_class  # what a group's actor runs (a stand-in in tests)
        self.alive_timeout_s = alive_timeout_s
        self.ended: set[tuple[str, int]] = set()
        self.groups: dict[str, Any] = {}
        self.answered: set[str] = set()  # the groups whose actor has answered since it was created
        # two members of a group asking at once get one actor; members of other groups do not
        # wait for it (a group's actor may take a minute to start)
        self._opening: dict[str, asyncio.Lock] = {}

    async def set_ended(self, ended: list[tuple[str, int]]) -> None:
        self.ended = {(g, int(j)) for g, j in ended}

    async def ended_members(self, group: str) -> list[int]:
        return sorted(j for g, j in self.ended if g == group)

    async def open_group(self, name: str, node_id: str, setup: Any) -> Any:
        """The actor of group ``name``: the running one, or a new one on ``node_id`` when there
        is none or it died or failed (it then restarts from its last state)."""
        async with self._opening.setdefault(name, asyncio.Lock()):
            return await self._open(name, node_id, setup)

    async def _open(self, name: str, node_id: str, setup: Any) -> Any:
        import ray

        handle = self.groups.get(name)
        if handle is not None:
            if await self._answers(name, handle):
                return handle
            ray.kill(handle)
            self.answered.discard(name)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        handle = (
            ray.remote(self.group_class)
            .options(
                num_cpus=0,  # its members hold the group's resources, 1/n each
                max_concurrency=4 * setup.size + 8,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            )
            .remote(setup)
        )
        self.groups[name] = handle
        return handle

    async def _answers(self, name: str, handle: Any) -> bool:
        """Whether the group's actor is there to join: it answers, and says it has not failed. An
        actor that has never answered may still be starting (a new process that imports torch and
        Lightning: a minute or more on a loaded node or from a shared filesystem), so it is waited
        for until it answers or Ray says it died (with its node, or before it could start); one
        that answered before and says nothing for :data:`ALIVE_TIMEOUT_S` is taken for hung."""
        timeout = self.alive_timeout_s if name in self.answered else None
        try:
            fine = await asyncio.wait_for(handle.alive.remote(), timeout)
        except Exception:  # noqa: BLE001 -- dead, lost with its node, or not answering
            return False
        self.answered.add(name)
        return bool(fine)

    async def close_group(self, name: str) -> None:
        """A group whose members have all gone: its process ends."""
        import ray

        handle = self.groups.pop(name, None)
        self.answered.discard(name)
        if handle is not None:
            ray.kill(handle)
