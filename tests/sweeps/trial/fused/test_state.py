"""A fused group's resume states on Tune's storage filesystem: written whole, the newest few kept,
and a restart given the newest one every returning member reached."""

from __future__ import annotations

import pyarrow.fs
import pytest
import torch

from sweeps.trial.fused.state import GroupStore, group_folder


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


@pytest.mark.train  # a fresh process, 2-3 s
def test_the_roster_s_process_never_imports_torch_lightning_or_tune(tmp_path):
    """The roster only creates and tracks groups: importing what it imports (the group's actor
    class) and unpickling a group's setup must not bring in torch or Lightning. They cost every
    fused sweep's roster 4 CPU-seconds and a few hundred MB when the setup lived beside the
    training steps. Nor Tune and pandas: 1.2 s more when the roster's class lived beside the
    driver's Tune callback, and when the trials' logging helpers (the group's) imported Tune for
    a report they do not make."""
    import pickle
    import subprocess
    import sys

    from sweeps.spec.search_schema import StopWhenSpec
    from sweeps.trial.fused.state import GroupSetup

    setup = GroupSetup(
        "g1",
        3,
        "roster",
        pyarrow.fs.LocalFileSystem(),
        str(tmp_path),
        1,
        stop_when=StopWhenSpec(metric="val/bleu", at_least=99.0),
    )
    pickled = tmp_path / "setup.pkl"
    pickled.write_bytes(pickle.dumps(setup))
    code = (
        "import pickle, sys\n"
        "import sweeps.trial.fused.roster_actor\n"
        "from sweeps.trial.fused.group import FusedGroup\n"
        f"setup = pickle.loads(open({str(pickled)!r}, 'rb').read())\n"
        "assert setup.size == 3\n"
        "print(sorted(m for m in ('torch', 'lightning', 'ray.tune', 'pandas') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"the roster's imports bring in {out.stdout.strip()}"
