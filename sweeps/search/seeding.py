"""Optuna samplers seeded per trial, so that a resumed study draws what an uninterrupted one would.

A study's sampler seeded once draws its k-th sample from a random state advanced by the k draws
before it: a launch that stops and resumes reopens the study with a sampler seeded anew, and every
draw after the stop differed from the uninterrupted run's (tune_optuna's smoke sweep, stopped by
Ctrl-C and resumed, trained other configurations and reported another best trial). :class:`PerTrial`
builds the sampler for each trial from a seed of that trial's own ordinal instead: the k-th trial
of a study is drawn from the same state whether the study ran through or was resumed.

The ordinal is the trial's number less the trials before it that a stopped driver lost (asked
after Tune last saved its state, so no Ray trial holds them): :meth:`sweeps.search.journal.Journal
.fail_running` marks those FAIL with the attribute :data:`LOST` and asks their configuration again
(Optuna's ``enqueue_trial``), which the resumed launch trains under the lost trial's ordinal.

Optuna documents subclassing ``BaseSampler`` for samplers of one's own; this one delegates every
call to the sampler it built for the trial in hand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

#: the user attribute of an Optuna trial a stopped driver lost; its value says what became of it
LOST = "lost"


def lost_before(study: Any, number: int) -> int:
    """How many of ``study``'s trials numbered below ``number`` were lost to a stopped driver."""
    return sum(
        1
        for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
        if t.number < number and LOST in t.user_attrs
    )


class PerTrial(BaseSampler):
    """The sampler ``make(seed)`` for each trial, ``seed`` being ``seed_of(ordinal)`` (module
    docstring); within one trial every call goes to the one sampler built for it."""

    def __init__(self, make: Callable[[int], BaseSampler], seed_of: Callable[[int], int]) -> None:
        self._make = make
        self._seed_of = seed_of
        self._number: int | None = None
        self._sampler: BaseSampler = make(seed_of(0))

    def for_trial(self, study: Any, trial: FrozenTrial) -> BaseSampler:
        """The sampler of ``trial`` (built when the trial in hand changes)."""
        if trial.number != self._number:
            ordinal = trial.number - lost_before(study, trial.number)
            self._sampler = self._make(self._seed_of(ordinal))
            self._number = trial.number
        return self._sampler

    def before_trial(self, study: Any, trial: FrozenTrial) -> None:
        self.for_trial(study, trial).before_trial(study, trial)

    def infer_relative_search_space(
        self, study: Any, trial: FrozenTrial
    ) -> dict[str, optuna.distributions.BaseDistribution]:
        return self.for_trial(study, trial).infer_relative_search_space(study, trial)

    def sample_relative(
        self,
        study: Any,
        trial: FrozenTrial,
        search_space: dict[str, optuna.distributions.BaseDistribution],
    ) -> dict[str, Any]:
        return self.for_trial(study, trial).sample_relative(study, trial, search_space)

    def sample_independent(
        self,
        study: Any,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: optuna.distributions.BaseDistribution,
    ) -> Any:
        sampler = self.for_trial(study, trial)
        return sampler.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(
        self,
        study: Any,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        # a trial is told after others were asked: the sampler in hand is of its kind, and
        # these samplers' after_trial draws no random number
        self._sampler.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        """Seeds come from the trials' ordinals: nothing to reseed."""
