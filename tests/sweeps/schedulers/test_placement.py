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
from sweeps.schedulers.placement import _groups, placement_order  # noqa: E402


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

    def _set_trial_status(self, trial, status):
        trial.status = status


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


@pytest.mark.parametrize("scheduler", schedulers(), ids=lambda s: type(s).__name__)
def test_while_a_running_group_waits_for_the_searcher_no_other_trial_starts(scheduler):
    """A memory_distill smoke sweep stopped by its budget and resumed on one CPU: g1 had one member
    running and its partner still in the searcher's queue; g5, brought back whole, was PENDING.
    Tune asks the searcher only while no trial is PENDING, so g5 started instead, and g1's and
    g5's first members each held half the CPU for good. g5 is held PAUSED until g1 is whole."""
    g1a = trial("g1a", Trial.RUNNING, group="g1", member="1/2")
    g5a, g5b = trial("g5a", group="g5", member="1/2"), trial("g5b", group="g5", member="2/2")
    lone = trial("lone")
    tune = Controller([g1a, g5a, g5b, lone])
    assert scheduler.choose_trial_to_run(tune) is None
    assert [t.status for t in (g5a, g5b, lone)] == [Trial.PAUSED] * 3, (
        "no trial is left PENDING, so Tune asks the searcher for g1's partner"
    )
    g1b = trial("g1b", group="g1", member="2/2")  # the searcher hands it out
    tune.trials.append(g1b)
    assert scheduler.choose_trial_to_run(tune) is g1b
    g1b.status = Trial.RUNNING
    chosen = scheduler.choose_trial_to_run(tune)
    assert chosen is g5a, "once g1 is whole, the held trials start in order"


def run_like_tune(scheduler, trials, queue, cpus=1.0, steps=50):
    """Tune's loop, as far as placement goes: ask the searcher (``queue``) for a trial while none
    is PENDING; place the scheduler's choice, then every other PENDING trial the free CPU allows,
    the newest first (Tune starts PENDING trials on its own, in an order of its own); a group trains once all its members run, and then
    ends. Returns the trials that ended, or stops where a step changes nothing."""
    share = {t.trial_id: 1 / int(t.config["fused_member"].split("/")[1]) for t in trials + queue}
    tune, ended = Controller(trials), []
    for _ in range(steps):
        before = [(t.trial_id, t.status) for t in tune.trials]
        if queue and not any(t.status == Trial.PENDING for t in tune.trials):
            tune.trials.append(queue.pop(0))
        chosen = scheduler.choose_trial_to_run(tune)
        if chosen is not None:
            chosen.status = Trial.PENDING
        for t in [chosen, *reversed(tune.trials)]:  # the choice, then the rest
            used = sum(share[r.trial_id] for r in tune.trials if r.status == Trial.RUNNING)
            if (
                t is not None
                and t.status == Trial.PENDING
                and used + share[t.trial_id] <= cpus + 1e-9
            ):
                t.status = Trial.RUNNING
        for group, (size, members) in _groups(tune.trials).items():
            running = [m for m in members if m.status == Trial.RUNNING]
            if len(running) == size:
                for m in running:
                    m.status = Trial.TERMINATED
                ended.append(group)
        if [(t.trial_id, t.status) for t in tune.trials] == before and not queue:
            break
    return ended


@pytest.mark.parametrize("scheduler", schedulers(), ids=lambda s: type(s).__name__)
def test_a_resumed_fused_sweep_that_tune_places_on_its_own_runs_to_the_end(scheduler):
    """memory_distill's smoke grid stopped by its budget, resumed on one CPU: g5 was whole in
    Tune, g6 had its first member (its partner was in the searcher's queue), g7's four members
    were still to come. Tune starts PENDING trials on its own; before, it started g5's and g6's
    first members, each held half the CPU, and the sweep waited for good."""
    g5 = [trial(f"g5{m}", group="g5", member=f"{m}/2") for m in (1, 2)]
    g6a = trial("g6a", group="g6", member="1/2")
    queue = [trial("g6b", group="g6", member="2/2")]
    queue += [trial(f"g7{m}", group="g7", member=f"{m}/4") for m in (1, 2, 3, 4)]
    ended = run_like_tune(scheduler, [*g5, g6a], queue)
    assert sorted(ended) == ["g5", "g6", "g7"], ended
