"""The roster's hold on a fused group's actor, on the shared local Ray: a group's actor that is
still starting is waited for, however long its start takes (the real one imports torch and
Lightning in a new process: on a loaded node that took over a minute, and the roster killed it as
dead, failing the member that had created it); one that answered before and then says nothing is
replaced; members waiting for a group's start hold nothing, so other groups start meanwhile."""

from __future__ import annotations

import asyncio
import os
import time
from types import SimpleNamespace

import pytest

from sweeps.trial.fused.roster import Roster, start_roster, stop_roster


def starts_slowly() -> type:
    """The stand-in group class, made in a function so that Ray ships the class itself to the
    actor's process (a worker cannot import this test module)."""

    class StartsSlowly:
        """Stands in for the group's actor (:class:`sweeps.trial.fused.group.FusedGroup`): its
        start takes ``setup.start_s``, and lasts until the file ``setup.gate`` is there where one
        is named; after ``hang`` its ``alive`` says nothing."""

        def __init__(self, setup):
            time.sleep(setup.start_s)
            while setup.gate and not os.path.exists(setup.gate):
                time.sleep(0.1)
            self.silent = False

        def hang(self) -> None:
            self.silent = True

        def alive(self) -> bool:
            while self.silent:
                time.sleep(1)
            return True

        def pid(self) -> int:  # which actor: each runs in a process of its own
            return os.getpid()

    return StartsSlowly


def gone(actor) -> bool:
    """Whether ``actor`` stopped answering (Ray says it died) within a minute."""
    import ray

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(actor.alive.remote(), timeout=60)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.2)
    return False


def setup(start_s: float, gate: str = "") -> SimpleNamespace:
    return SimpleNamespace(size=2, start_s=start_s, gate=gate)


def test_a_group_still_starting_is_waited_for_and_one_that_stops_answering_is_replaced(local_ray):
    import ray

    roster = Roster(starts_slowly(), alive_timeout_s=0.5)
    node = ray.get_runtime_context().get_node_id()

    async def scenario() -> None:
        first = await roster.open_group("g0", node, setup(3.0))
        # the second member asks while the actor starts, for longer than the alive timeout: it
        # is handed the same actor, which goes on living
        assert await roster.open_group("g0", node, setup(3.0)) is first
        assert ray.get(first.alive.remote(), timeout=60) is True

        # an actor that answered before and now says nothing is taken for hung: a new one
        ray.get(first.hang.remote(), timeout=60)
        again = await roster.open_group("g0", node, setup(0.0))
        assert again is not first
        assert ray.get(again.alive.remote(), timeout=60) is True
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(first.alive.remote(), timeout=60)
        # and one that died is replaced at once (ray.kill returns before the actor is gone: asked
        # at once, the dying actor could still answer, as it did once on a loaded 2-core VM)
        ray.kill(again)
        assert gone(again), "the killed actor still answers after 60 s"
        last = await roster.open_group("g0", node, setup(0.0))
        assert last is not again and ray.get(last.alive.remote(), timeout=60) is True

    try:
        asyncio.run(scenario())
    finally:
        for handle in roster.groups.values():
            ray.kill(handle)


def test_members_waiting_for_a_group_that_starts_do_not_hold_up_other_groups(local_ray, tmp_path):
    """A GPU's groups have up to 16 members, and several groups start at once: 40 members of one
    group asking while it starts (the threaded roster had 16 threads, and each waiting member held
    one) do not keep a member of another group from its group's actor."""
    import ray

    gate = tmp_path / "g0-may-start"  # g0's actor starts only once g1's has been handed out
    roster = start_roster("test-roster-many-waiting", starts_slowly())
    node = ray.get_runtime_context().get_node_id()
    try:
        first = ray.get(roster.open_group.remote("g0", node, setup(0.0, str(gate))), timeout=60)
        waiting = [roster.open_group.remote("g0", node, setup(0.0, str(gate))) for _ in range(40)]
        other = ray.get(roster.open_group.remote("g1", node, setup(0.0)), timeout=60)
        assert ray.wait(waiting, timeout=0)[0] == []  # g0's members still wait for its start
        gate.touch()
        handed = ray.get(waiting, timeout=120)
        g0 = ray.get(first.pid.remote(), timeout=60)
        assert ray.get(other.pid.remote(), timeout=60) != g0
        assert set(ray.get([h.pid.remote() for h in handed], timeout=60)) == {g0}
        assert ray.get(roster.ended_members.remote("g0"), timeout=60) == []
    finally:
        stop_roster()
