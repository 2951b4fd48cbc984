"""A fused group's resume states on Tune's storage filesystem: written whole, the newest few kept,
and a restart given the newest one every returning member reached."""

from __future__ import annotations

import pyarrow.fs
import torch

from sweeps.fusion.state import GroupStore, group_folder


def test_states_are_kept_newest_few_and_chosen_by_step_and_members(tmp_path):
    folder = group_folder(str(tmp_path / "exp"), "cell#3/2")
    assert folder.endswith("/exp/fused/cell_3_2")
    store = GroupStore(pyarrow.fs.LocalFileSystem(), folder, keep=3)
    assert store.states() == [] and store.load(100, {0}) is None
    for step, members in ((10, [0, 1, 2]), (20, [0, 1, 2]), (30, [0, 2]), (40, [0, 2])):
        store.save(step, members, {"step": step, "weights": torch.full((2,), float(step))})
    assert [s.step for s in store.states()] == [20, 30, 40], "the oldest went"
    assert not list((tmp_path / "exp").rglob("*.partial")), "no half-written state left"
    found, state = store.load(35, {0, 2})
    assert found.step == 30 and state["weights"].tolist() == [30.0, 30.0]
    # member 1 left after step 20: a restart that needs it goes back to the state that holds it
    found, _ = store.load(40, {0, 1})
    assert found.step == 20 and found.members == (0, 1, 2)
    assert store.load(15, {0}) is None, "nothing at or before step 15 any more"
    store.remove()
    assert store.states() == [] and not (tmp_path / "exp" / "fused" / "cell_3_2").exists()
