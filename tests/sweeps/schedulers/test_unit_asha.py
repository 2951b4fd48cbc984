"""A unit's ASHA ends its rungs at ``max_t``, not its trials: a trial that passed every rung
trains to its own last step. Ray's default stopped every trial at ``max_t``, so a smoke run
(``max_t: 2``) given more steps by ``--set`` ended all its trials, the best included, at their
second report, each PRUNED in its Optuna study. Ray's real scheduler; the trials are stand-ins
holding the one attribute it reads. No cluster."""

from __future__ import annotations

from ray.tune.schedulers import TrialScheduler

from sweeps.schedulers.per_unit import unit_asha


class Trial:
    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id


def test_a_trial_past_max_t_goes_on_and_a_bad_one_still_stops_at_a_rung():
    asha = unit_asha("val/bleu", "max", max_t=2, grace_period=1, reduction_factor=2)
    good, bad = Trial("good"), Trial("bad")
    for trial in (good, bad):
        asha.on_trial_add(None, trial)
    assert asha.on_trial_result(None, good, {"training_iteration": 1, "val/bleu": 90.0}) == (
        TrialScheduler.CONTINUE
    )
    # below the rung's cut (the better half of those that reached it): stopped there
    assert asha.on_trial_result(None, bad, {"training_iteration": 1, "val/bleu": 10.0}) == (
        TrialScheduler.STOP
    )
    for report in (2, 3):  # max_t and past it: the trial's own steps decide
        result = {"training_iteration": report, "val/bleu": 95.0}
        assert asha.on_trial_result(None, good, result) == TrialScheduler.CONTINUE
