"""The roster's hold on a fused group's actor, on the shared local Ray: a group's actor that is
still starting is waited for, however long its start takes (the real one imports torch and
Lightning in a new process: on a loaded node that took over a minute, and the roster killed it as
dead, failing the member that had created it); one that answered before and then says nothing is
replaced."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from sweeps.trial.fused import roster as roster_module


def test_a_group_still_starting_is_waited_for_and_one_that_stops_answering_is_replaced(
    local_ray, monkeypatch
):
    import ray

    class StartsSlowly:
        """Stands in for the group's actor (:class:`sweeps.trial.fused.group.FusedGroup`): its start
        takes ``setup.start_s``; after ``hang`` its ``alive`` says nothing."""

        def __init__(self, setup):
            time.sleep(setup.start_s)
            self.silent = False

        def hang(self) -> None:
            self.silent = True

        def alive(self) -> bool:
            while self.silent:
                time.sleep(1)
            return True

    monkeypatch.setattr(roster_module, "FusedGroup", StartsSlowly)
    monkeypatch.setattr(roster_module, "ALIVE_TIMEOUT_S", 0.5)
    roster = roster_module.Roster()
    node = ray.get_runtime_context().get_node_id()
    try:
        first = roster.open_group("g0", node, SimpleNamespace(size=2, start_s=3.0))
        # the second member asks while the actor starts, for longer than ALIVE_TIMEOUT_S: it is
        # handed the same actor, which goes on living
        assert roster.open_group("g0", node, SimpleNamespace(size=2, start_s=3.0)) is first
        assert ray.get(first.alive.remote(), timeout=60) is True

        # an actor that answered before and now says nothing is taken for hung: a new one
        ray.get(first.hang.remote(), timeout=60)
        again = roster.open_group("g0", node, SimpleNamespace(size=2, start_s=0.0))
        assert again is not first
        assert ray.get(again.alive.remote(), timeout=60) is True
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(first.alive.remote(), timeout=60)
        # and one that died is replaced at once
        ray.kill(again)
        last = roster.open_group("g0", node, SimpleNamespace(size=2, start_s=0.0))
        assert last is not again and ray.get(last.alive.remote(), timeout=60) is True
    finally:
        for handle in roster.groups.values():
            ray.kill(handle)
