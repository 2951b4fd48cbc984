"""The sweep's searcher: hands Tune the trials of every (cell, seed) at once.

One Tune experiment holds the whole study. :class:`SweepSearcher` is its Tune ``Searcher``: each
suggestion is one trial of the (cell, seed) with the fewest trials started so far (the longest
expected, :mod:`sweeps.plan.cost`, then grid order break ties), so all cells fill the cluster
together up to ``max_concurrent_trials``, longest first; each (cell, seed) gets ``num_samples`` trials.
A sweep with teachers holds each student unit back until its teacher unit's trials have ended,
and starts the teachers first (:mod:`sweeps.search.teachers`).

With nuisance ``parameters``, each (cell, seed) is its own Optuna study in one durable journal
(``<output>/<name>/optuna.journal``), with its own sampler seed; a suggestion is ``study.ask()``,
a finished trial is ``study.tell()``. Each Optuna trial carries user attributes that lead back to
the run: ``ray_trial_id``, ``wandb_run_id`` and (through :class:`OptunaLinks`) ``checkpoint_path``.
Resume: Tune saves this searcher with its experiment state (:meth:`SweepSearcher.save`), and the
journal holds the studies; on restore, an Optuna trial left RUNNING that Tune never started is
marked FAIL, so the two agree.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
from ray.tune import Callback
from ray.tune.search import Searcher

from sweeps.plan.units import Unit
from sweeps.search.teachers import TeacherBook
from sweeps.spec.search_space import optuna_sampler


class SweepSearcher(Searcher):
    """Trials of every (cell, seed) at once, fewest-started first; Optuna inside each when
    ``space`` is given.

    Args:
        units: the sweep's (cell, seed) units, in grid order.
        num_samples: trials per unit (an Optuna study's budget).
        metric, mode: what Optuna optimises ("max" or "min").
        space: Optuna distributions by flat name, or None for a plain grid.
        journal: the Optuna journal file (needed with ``space``).
        sampler: "tpe" or "random"; ``sampler_seed`` the sweep-wide seed each unit's seed derives from.
        wandb_enabled: whether trials log to W&B (run id = Ray trial id).
    """

    def __init__(
        self,
        units: list[Unit],
        num_samples: int,
        metric: str,
        mode: str,
        space: dict[str, Any] | None = None,
        journal: str | None = None,
        sampler: str = "tpe",
        sampler_seed: int = 0,
        wandb_enabled: bool = False,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        self.units = units
        self.num_samples = num_samples
        self.space = space
        self.journal = journal
        self.sampler = sampler
        self.sampler_seed = sampler_seed
        self.wandb_enabled = wandb_enabled
        self.started = [0] * len(units)
        # Ray trial id -> (unit index, Optuna trial number, Optuna storage trial id)
        self.live: dict[str, tuple[int, int | None, int | None]] = {}
        self._storage = None
        self._studies: dict[int, Any] = {}
        # students wait for their teachers (sweeps.search.teachers); None in a sweep without them
        self.teachers = TeacherBook.of(units, num_samples, metric, mode)

    # -- Tune's Searcher interface -----------------------------------------------------------

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict, **spec
    ) -> bool:
        return True  # the searcher was built with its metric, mode and space

    def suggest(self, trial_id: str) -> dict | None:
        open_units = [i for i, n in enumerate(self.started) if n < self.num_samples]
        if not open_units:
            return Searcher.FINISHED
        book = self.teachers
        if book is not None:  # a student waits for its teacher: "nothing now" if all do
            open_units = [i for i in open_units if not book.waiting(i)]
            if not open_units:
                return None
        # teachers first, then fewest started, then longest first (sweeps.plan.cost), then grid order
        i = min(
            open_units,
            key=lambda j: (
                book is None or not book.teaches(j),
                self.started[j],
                -self.units[j].cost,
                j,
            ),
        )
        unit = self.units[i]
        config = dict(unit.config)
        if book is not None:
            config.update(book.assignment(i))  # the teacher's trial id and checkpoint
        number = storage_id = None
        if self.space:
            study = self._study(i)
            trial = study.ask(self.space)
            trial.set_user_attr("ray_trial_id", trial_id)
            if self.wandb_enabled:
                trial.set_user_attr("wandb_run_id", trial_id)
            for key in ("teacher", "teacher_checkpoint"):  # a student's, as results.csv has it
                if config.get(key):
                    trial.set_user_attr(key, config[key])
            config.update(trial.params)
            number, storage_id = trial.number, trial._trial_id
        self.started[i] += 1
        self.live[trial_id] = (i, number, storage_id)
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """Each report is an intermediate value of the Optuna trial, at its training step: the
        learning curves of ``plot_intermediate_values`` and optuna-dashboard. (Tune hands a
        trial's last report to :meth:`on_trial_complete` only, which records it the same way.)"""
        entry = self.live.get(trial_id)
        value = (result or {}).get(self.metric)
        if entry is None or not self.space or value is None or (result or {}).get("teacher_error"):
            return
        step = int(result.get("step", result.get("training_iteration", 0)))
        try:
            self._get_storage().set_trial_intermediate_value(entry[2], step, float(value))
        except RuntimeError:
            pass  # the Optuna trial already finished

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        """Tell Optuna how the trial ended: COMPLETE with the metric's last value; PRUNED when the
        scheduler stopped it before its last step (Optuna then records its last intermediate
        value, as for its own pruners); FAIL on an error or no result."""
        error = error or bool((result or {}).get("teacher_error"))  # its teacher failed
        if not error and result:
            self.on_trial_result(trial_id, result)
        entry = self.live.pop(trial_id, None)
        if entry is not None and self.teachers is not None:
            self.teachers.note(entry[0], trial_id, result, error)
        if entry is None or not self.space:
            return
        import optuna

        i, number, _ = entry
        study = self._study(i)
        value = (result or {}).get(self.metric)
        max_steps = self.units[i].max_steps
        # skip_if_finished: a trial told before a kill -9 comes back from an older snapshot and
        # reports its earlier result again (sweeps.trial.lifecycle.report_earlier_finish)
        if error or value is None:
            study.tell(number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        elif (
            max_steps is not None
            and int((result or {}).get("step", max_steps)) < max_steps
            and not (result or {}).get("converged")
        ):  # stop_when: a finished trial, COMPLETE
            study.tell(number, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
        else:
            study.tell(number, float(value), skip_if_finished=True)

    def save(self, checkpoint_path: str) -> None:
        teachers = self.teachers.state() if self.teachers is not None else None
        with open(checkpoint_path, "wb") as f:
            pickle.dump({"started": self.started, "live": self.live, "teachers": teachers}, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        self.started, self.live = state["started"], state["live"]
        if self.teachers is not None:  # which teachers are done: none is trained again
            self.teachers.load(state.get("teachers"))
        self._fail_orphans()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_storage"], state["_studies"] = None, {}  # reopened from the journal where needed
        return state

    # -- Optuna --------------------------------------------------------------------------------

    def record(self, trial_id: str, key: str, value: Any) -> None:
        """Set a user attribute on the Optuna trial behind a running Ray trial (no-op otherwise)."""
        entry = self.live.get(trial_id)
        if entry is None or not self.space:
            return
        try:
            self._get_storage().set_trial_user_attr(entry[2], key, value)
        except RuntimeError:
            pass  # the Optuna trial already finished: its attributes are frozen

    def unit_seed(self, i: int, n_trials: int) -> int:
        """Each (cell, seed) samples with its own seed; ``n_trials`` (the study's size when it is
        opened) makes a resumed study draw new samples rather than repeat its first ones."""
        seq = np.random.SeedSequence(
            [self.sampler_seed, self.units[i].index, self.units[i].seed, n_trials]
        )
        return int(seq.generate_state(1)[0])

    def _get_storage(self):
        if self._storage is None:
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            self._storage = JournalStorage(JournalFileBackend(self.journal))
        return self._storage

    def _study(self, i: int):
        if i not in self._studies:
            import optuna

            study = optuna.create_study(
                study_name=self.units[i].name,
                storage=self._get_storage(),
                direction="maximize" if self.mode == "max" else "minimize",
                load_if_exists=True,
            )
            seed = self.unit_seed(i, len(study.trials))
            study.sampler = optuna_sampler(self.sampler, seed)
            self._studies[i] = study
        return self._studies[i]

    def _held_trials(self) -> set:
        """Storage ids of Optuna trials left RUNNING on purpose, besides the live ones (none here)."""
        return set()

    def _fail_orphans(self) -> None:
        """Optuna trials left RUNNING by a driver that died before Tune saved them: FAIL."""
        if not self.space:
            return
        import optuna

        live_ids = {sid for _, _, sid in self.live.values()} | self._held_trials()
        names = set(optuna.get_all_study_names(self._get_storage()))
        for i, unit in enumerate(self.units):
            if unit.name not in names:
                continue
            study = self._study(i)
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
                if t._trial_id not in live_ids:
                    study.tell(t.number, state=optuna.trial.TrialState.FAIL)


class OptunaLinks(Callback):
    """Records each Ray trial's latest checkpoint path on its Optuna trial (``checkpoint_path``)."""

    def __init__(self, searcher: SweepSearcher) -> None:
        self.searcher = searcher

    def on_checkpoint(self, iteration: int, trials: list, trial, checkpoint, **info) -> None:
        from sweeps.layout import checkpoint_path

        self.searcher.record(trial.trial_id, "checkpoint_path", checkpoint_path(checkpoint.path))
