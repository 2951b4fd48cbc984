"""The Optuna journal a sweep's studies live in (``<output>/<name>/optuna.journal``), opened once
per driver: its studies by name, and the writes the searcher makes on a trial by its storage id
(a user attribute, an intermediate value), which an Optuna trial already told refuses.

Each Optuna trial carries user attributes that lead back to the run: ``ray_trial_id``,
``wandb_run_id`` and (through :class:`sweeps.search.base.OptunaLinks`) ``checkpoint_path``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from sweeps.search.seeding import LOST


class Journal:
    """The journal file ``path`` (None: a sweep without ``parameters``, no Optuna at all)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._storage: Any = None
        self._studies: dict[str, Any] = {}

    def __bool__(self) -> bool:
        return self.path is not None

    def __getstate__(self) -> dict:
        # Tune pickles the searcher: the storage and the studies are reopened from the file
        return {"path": self.path, "_storage": None, "_studies": {}}

    @property
    def storage(self) -> Any:
        if self._storage is None:
            self._storage = JournalStorage(JournalFileBackend(self.path))
        return self._storage

    def study(self, name: str, create: Callable[[Any, str], Any]) -> Any:
        """The study ``name``, made by ``create(storage, name)`` the first time it is asked for."""
        if name not in self._studies:
            # Optuna's INFO line per study ("A new study created in Journal with name: ...") cut
            # into the progress table; the launch names the studies once at its end
            level = optuna.logging.get_verbosity()
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            try:
                self._studies[name] = create(self.storage, name)
            finally:
                optuna.logging.set_verbosity(level)
        return self._studies[name]

    def names(self) -> set[str]:
        """The names of the studies the journal holds."""
        return set(optuna.get_all_study_names(self.storage))

    def set_attr(self, storage_id: int, key: str, value: Any) -> bool:
        """Set a user attribute on a trial; False when Optuna refuses (the trial was told)."""
        try:
            self.storage.set_trial_user_attr(storage_id, key, value)
        except RuntimeError:
            return False
        return True

    def set_intermediate(self, storage_id: int, step: int, value: float) -> None:
        try:
            self.storage.set_trial_intermediate_value(storage_id, step, value)
        except RuntimeError:
            pass  # the Optuna trial already finished

    def trial(self, storage_id: int) -> Any:
        return self.storage.get_trial(storage_id)

    def fail_running(self, study: Any, keep: set[int]) -> None:
        """The RUNNING trials of ``study`` whose storage ids are not in ``keep`` were asked by a
        driver that stopped before Tune saved them: no Ray trial holds them, and none will finish
        them. Each is marked FAIL with the attribute ``lost`` saying so, and its configuration is
        asked again (``enqueue_trial``): the resumed launch trains what the stopped one drew, as
        the trial of the lost one's ordinal (:mod:`sweeps.search.seeding`)."""
        running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        for t in running:
            if t._trial_id in keep:
                continue
            self.set_attr(
                t._trial_id,
                LOST,
                "asked by a launch that stopped before Ray Tune saved it: trained again by the "
                "resumed launch as a later trial of the same configuration",
            )
            study.tell(t.number, state=optuna.trial.TrialState.FAIL)
            study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
