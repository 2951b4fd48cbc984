"""The order Tune starts waiting trials in, with fused groups kept whole (a resume brought back
the first members of two groups before their partners, and on one CPU each group waited for a
member that could never start)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("ray")

from ray.tune.experiment import Trial  # noqa: E402

from sweeps.schedulers.config_rungs import ConfigRungs  # noqa: E402
from sweeps.schedulers.per_unit import PerUnitScheduler, SweepFIFO  # noqa: E402
from sweeps.schedulers.placement import placement_order  # noqa: E402


def trial(tid, status=Trial.PENDING, group=None, member=None):
    config = {"cell": "c", "seed": 0}
    if group:
        config |= {"fused_with": group, "fused_member": member}
    return SimpleNamespace(trial_id=tid, status=status, config=config)


class Controller:
    def __init__(self, trials):
        self.trials = trials

    def get_trials(self):
        return self.trials


def schedulers():
    return [
        SweepFIFO(),
        PerUnitScheduler(lambda key: SweepFIFO(), "val/bleu", "max"),
        ConfigRungs("val/bleu", "max", 2, 1, 3, 3, 30, {}),
    ]


@pytest.mark.parametrize("scheduler", schedulers(), ids=lambda s: type(s).__name__)
def test_a_resumed_sweep_starts_whole_groups_before_a_group_the_searcher_still_holds(scheduler):
    """The state of a wmt17 smoke sweep stopped by Ctrl-C: g1 had one of its two members in Tune
    (the other was still in the searcher's queue), g2 both. Restored, each is PENDING."""
    done = trial("base", Trial.TERMINATED)
    g1a = trial("g1a", group="g1", member="1/2")
    g2a, g2b = trial("g2a", group="g2", member="1/2"), trial("g2b", group="g2", member="2/2")
    tune = Controller([done, g1a, g2a, g2b])
    started = []
    while (chosen := scheduler.choose_trial_to_run(tune)) is not None:
        chosen.status = Trial.RUNNING  # placed: it holds half a CPU
        started.append(chosen.trial_id)
        if len(started) == 2:
            break  # one CPU: both halves are held
    assert started == ["g2a", "g2b"], "g2 trains whole; g1's member waits for the CPU"
    g2a.status = g2b.status = Trial.TERMINATED
    assert scheduler.choose_trial_to_run(tune) is g1a  # then the searcher hands out its partner


def test_a_partly_running_group_is_completed_first_and_creation_order_is_kept_otherwise():
    lone = trial("lone")
    g3a = trial("g3a", group="g3", member="1/3")  # g3's third member is not in Tune yet
    g3b = trial("g3b", group="g3", member="2/3")
    g4a, g4b = trial("g4a", group="g4", member="1/2"), trial("g4b", group="g4", member="2/2")
    g5a = trial("g5a", Trial.RUNNING, group="g5", member="1/2")
    g5b = trial("g5b", group="g5", member="2/2")
    order = placement_order([g3a, lone, g4a, g3b, g5a, g4b, g5b])
    assert [t.trial_id for t in order] == ["g5a", "g5b", "lone", "g4a", "g4b", "g3a", "g3b"]
