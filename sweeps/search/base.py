"""The sweep's searcher: ONE Tune ``Searcher`` put together from parts, each a concept of its own
(:func:`sweeps.search.compose.make_searcher` picks them from the launch's plan):

- the **scope**, with its **objective kind** inside it: what an Optuna trial is and how it is told.
  :class:`~sweeps.search.per_unit.PerUnit`: one Optuna study per (cell, seed), one Optuna trial per
  Ray trial; :class:`~sweeps.search.over_seeds.OverSeeds`: one study per cell, one Optuna trial per
  configuration, told its aggregate once every seed has ended. The objective kind:
  :class:`~sweeps.search.objective.SingleObjective` (one metric) or
  :class:`~sweeps.search.moo.MultiObjective` (a vector, constraints, no retraining of a repeat);
- the **hand-out**: which trial goes next. :class:`~sweeps.search.handout.OneAtATime`: the unit
  (or cell) with the fewest started, longest first (:mod:`sweeps.plan.cost`);
  :class:`~sweeps.search.fused.FusedGroups`: the plan's fused groups whole, their members asked of
  Optuna together; :class:`~sweeps.search.fused.SeedChunks`: a configuration's seeds in fused chunks;
- the **gates** (:mod:`sweeps.search.gates`): students wait for their teachers
  (:mod:`.teachers`), a unit's samples for its baseline model (:mod:`.baselines`);
- a **limit** on the trials running at once that does not count the trials paused at a rung
  (they hold no resources while the others of their rung catch up). Tune's own
  ``ConcurrencyLimiter`` counts them, and would start nothing while every slot's trial waits for
  the trials that fill its rung; so the searcher takes ``max_concurrent_trials`` itself.

A warm start is given through the same parts (:func:`sweeps.search.warm_start.apply_warm_start`).
Resume: Tune saves the searcher with its experiment state (:meth:`SweepSearcher.save`: every part's
state in one file), and the journal holds the studies. A trial that ended in an error runs again
on ``--resume`` (Tune's ``resume_errored``): the searcher takes it back as running, its teacher
gate waits for it again, and a student that failed for want of a teacher is handed out anew once
its teacher has ended (:meth:`SweepSearcher.comeback`, asked by the scheduler before it starts one);
a fused member comes back into its group, once every returning member's teacher has ended.
"""

from __future__ import annotations

import pickle
from typing import Any, NamedTuple

from ray.tune import Callback
from ray.tune.search import Searcher

from sweeps.layout import checkpoint_path
from sweeps.plan.grouping import FUSED_MEMBER, FUSED_WITH
from sweeps.plan.units import Unit
from sweeps.spec import unit_key
from sweeps.trial.teacher import TEACHER_ERROR


class Ticket(NamedTuple):
    """A running Ray trial, as the searcher knows it: its unit (index into the units), and its
    Optuna trial (number and storage id; a configuration's, over seeds), None without Optuna."""

    unit: int
    number: int | None = None
    storage_id: int | None = None


class Draw(NamedTuple):
    """A trial drawn, not yet handed out: its unit, its Optuna trial, the sampled ``params`` and
    what else its config holds (``extra``: fused keys, a configuration's number)."""

    unit: int
    number: int | None = None
    storage_id: int | None = None
    params: dict = {}
    extra: dict = {}

    def adding(self, keys: dict) -> Draw:
        """This draw with ``keys`` added to what its config holds besides its samples."""
        return Draw(self.unit, self.number, self.storage_id, self.params, {**self.extra, **keys})


class Choice(NamedTuple):
    """What a one-at-a-time hand-out may draw next: a unit (per unit) or a cell (over seeds), the
    units its trials belong to, how many it has drawn, how long its trials are expected to take."""

    key: int
    units: list
    drawn: int
    cost: float


class SweepSearcher(Searcher):
    """The sweep's Tune searcher (module docstring).

    Args:
        units: the sweep's (cell, seed) units, in grid order.
        scope: :class:`~sweeps.search.per_unit.PerUnit` or :class:`~sweeps.search.over_seeds.OverSeeds`
            (its ``objective`` is the searcher's).
        handout: :class:`~sweeps.search.handout.OneAtATime`, or a fused one (:mod:`sweeps.search.fused`).
        gates: :class:`~sweeps.search.gates.Gate` s (teachers, baselines).
        wandb_enabled: whether trials log to W&B (run id = Ray trial id).
    """

    def __init__(
        self,
        units: list[Unit],
        scope: Any,
        handout: Any,
        gates: list[Any] | tuple = (),
        wandb_enabled: bool = False,
    ) -> None:
        super().__init__(metric=scope.objective.metric, mode=scope.objective.mode)
        self.units = list(units)
        self.scope = scope
        self.handout = handout
        self.gates = [g for g in gates if g is not None]
        self.wandb_enabled = wandb_enabled
        self.started = [0] * len(units)  # trials handed out (or reused) per unit
        self.live: dict[str, Ticket] = {}
        self.trial_configs: dict[str, dict[str, Any]] = {}  # a live trial's config
        self.limit = 0  # the most trials running at once, paused ones not counted; 0: none
        # the rung rules' state (sweeps.schedulers), which they hold too; saved here
        self.rung_state: dict[Any, Any] = {}
        #: each unit's ASHA (sweeps.schedulers.per_unit): Tune saves no scheduler, so its rungs
        #: are saved here, restored in place (the scheduler holds this very dict)
        self.unit_schedulers: dict[Any, Any] = {}
        self.rung_log: dict[str, dict] = {}  # the Pareto rule's decisions, by trial id
        self.errored: dict[str, tuple[Ticket, dict]] = {}  # ended in an error: back on --resume
        self.untaught: set[str] = set()  # errored for want of a teacher (teacher_error)
        self.returning: dict[str, int] = {}  # such trials on --resume, waiting for a teacher
        self.returning_group: dict[str, dict] = {}  # a returning fused member's group keys
        self.reused_count = 0  # trials a warm start reuses (sweeps.search.warm_start)

    # -- the parts -----------------------------------------------------------------------------

    @property
    def objective(self) -> Any:
        return self.scope.objective

    @property
    def reader(self) -> Any:
        """The multi-objective kind's reader of a report's objectives (the Pareto rung rule's)."""
        return self.objective.reader

    def gate(self, kind: str) -> Any:
        return next((g for g in self.gates if g.kind == kind), None)

    @property
    def teachers(self) -> Any:
        """The teacher book (:mod:`sweeps.search.teachers`), or None in a sweep without teachers."""
        return self.gate("teachers")

    def ready(self, unit: int) -> bool:
        return all(g.ready(unit) for g in self.gates)

    def first(self, unit: int) -> bool:
        return any(g.first(unit) for g in self.gates)

    def samples_left(self, key: Any) -> bool:
        """Whether this searcher will start more trials of the (cell, seed) ``key``."""
        return any(
            unit_key(u.config) == tuple(key) and self.started[i] < self.scope.budget
            for i, u in enumerate(self.units)
        )

    def running(self) -> int:
        """Trials running now, the gates' own included, those paused at a rung not."""
        paused = self.scope.paused(self.rung_state) & set(self.live)
        return len(self.live) + sum(g.running() for g in self.gates) - len(paused)

    # -- Tune's Searcher interface -------------------------------------------------------------

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict, **spec
    ) -> bool:
        return True  # the searcher was built with its metric, mode and space

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        """Cap the trials running at once here (module docstring), not in Tune's limiter."""
        self.limit = int(max_concurrent or 0)
        return True

    def suggest(self, trial_id: str) -> dict | None:
        if self.limit and self.running() >= self.limit:
            return None  # asked again when a trial ends or pauses
        for gate in self.gates:  # a gate's own trials first (a unit's baseline)
            config = gate.own_trial(self, trial_id)
            if config is not None:
                return config
        draw = self.handout.next(self)
        if draw is None or draw is Searcher.FINISHED:
            return draw
        return self._issue(trial_id, draw)

    def _issue(self, trial_id: str, draw: Draw, count: bool = True) -> dict[str, Any]:
        """Hand out ``draw`` as Ray trial ``trial_id``: its config (the unit's, what the gates
        add, the samples and the hand-out's keys), recorded on its Optuna trial."""
        config = dict(self.units[draw.unit].config)
        for gate in self.gates:
            config.update(gate.assignment(draw.unit))  # a student's teacher
        config.update(draw.params)
        config.update(draw.extra)
        self.scope.issued(self, trial_id, draw, config)
        if count:
            self.started[draw.unit] += 1
        self.live[trial_id] = Ticket(draw.unit, draw.number, draw.storage_id)
        self.trial_configs[trial_id] = config
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """A report: the Optuna trial's intermediate value (the scope's and objective's way)."""
        ticket = self.live.get(trial_id)
        if ticket is None or not result or result.get(TEACHER_ERROR):
            return
        self.scope.reported(self, trial_id, ticket, result)

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        """A trial ended: the gates note it (a teacher's outcome), the scope tells Optuna."""
        for gate in self.gates:
            if gate.ended(self, trial_id, result, error):
                return  # one of the gate's own trials
        error = error or bool((result or {}).get(TEACHER_ERROR))  # its teacher failed
        if not error and result:
            self.on_trial_result(trial_id, result)
        ticket = self.live.pop(trial_id, None)
        config = self.trial_configs.pop(trial_id, {})
        if ticket is None:
            return
        if error:
            self.errored[trial_id] = (ticket, config)
            if config.get(TEACHER_ERROR):
                self.untaught.add(trial_id)
        for gate in self.gates:
            gate.note(ticket.unit, trial_id, result, error)
        self.scope.ended(self, trial_id, ticket, config, result, error)

    def comeback(self, trial_id: str) -> dict[str, Any] | bool | None:
        """Asked by the scheduler before it starts a trial: None for a trial to start as it is;
        for a student that failed for want of a teacher and runs again on ``--resume``, False
        while its teacher unit has not ended, then its new config (its teacher, a new sample). A
        fused member comes back into its group (the same name and place), and only once the
        teachers of every member coming back into that group have ended: the group waits for
        its members, and a member started early would hold its resources while it waits."""
        unit = self.returning.get(trial_id)
        if unit is None:
            return None
        keys = self.returning_group.get(trial_id, {})
        mates = [
            t
            for t, mine in self.returning_group.items()
            if keys and mine.get(FUSED_WITH) == keys.get(FUSED_WITH)
        ]
        if not all(self.ready(self.returning[t]) for t in [trial_id, *mates]):
            return False
        del self.returning[trial_id]
        self.returning_group.pop(trial_id, None)
        self.untaught.discard(trial_id)
        return self._issue(trial_id, self.scope.draw(self, unit).adding(keys), count=False)

    def save(self, checkpoint_path: str) -> None:
        state = {
            "started": self.started,
            "live": dict(self.live),
            "trial_configs": self.trial_configs,
            "errored": self.errored,
            "untaught": self.untaught,
            "returning": self.returning,
            "returning_group": self.returning_group,
            "rung_state": self.rung_state,
            "rung_log": self.rung_log,
            "unit_schedulers": self.unit_schedulers,
            "scope": self.scope.state(),
            "handout": self.handout.state(),
            "gates": {g.kind: g.state() for g in self.gates},
        }
        with open(checkpoint_path, "wb") as f:
            pickle.dump(state, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        self.started, self.live = state["started"], dict(state["live"])
        self.trial_configs = state["trial_configs"]
        self.untaught, self.returning = state["untaught"], state["returning"]
        self.returning_group = state.get("returning_group", {})  # absent in older states
        # in place: the rung rules hold these very dicts (both came out of one tuner.pkl)
        for key, saved in state["rung_state"].items():
            mine = self.rung_state.get(key)
            if isinstance(mine, dict) and isinstance(saved, dict):
                mine.clear()
                mine.update(saved)
            else:
                self.rung_state[key] = saved
        self.rung_log.clear()
        self.rung_log.update(state["rung_log"])
        schedulers = self.__dict__.setdefault("unit_schedulers", {})  # a searcher pickled before
        schedulers.clear()
        schedulers.update(state.get("unit_schedulers", {}))  # absent in older states
        self.scope.load(state["scope"])
        self.handout.load(state["handout"])
        for gate in self.gates:
            gate.load(state["gates"].get(gate.kind))
        self._take_back_errored(state["errored"])
        self.scope.restored(self)

    def _take_back_errored(self, errored: dict[str, tuple[Ticket, dict]]) -> None:
        """The launcher resumes errored trials (``resume_errored``): each runs again, as the trial
        it was, but for a student that failed for want of a teacher, which waits to be handed out
        anew (:meth:`comeback`), into its fused group if it had one. A teacher that runs again
        is waited for again."""
        self.errored = {}
        for trial_id, (ticket, config) in errored.items():
            if trial_id in self.untaught:
                self.returning[trial_id] = ticket.unit
                group = {k: config[k] for k in (FUSED_WITH, FUSED_MEMBER) if k in config}
                if group:
                    self.returning_group[trial_id] = group
            else:  # as the trial it was; told to Optuna as a retry (the scope's way)
                self.live[trial_id] = self.scope.retried(self, trial_id, ticket, config)
                self.trial_configs[trial_id] = config
            for gate in self.gates:
                gate.reopen(ticket.unit, trial_id)

    # -- Optuna --------------------------------------------------------------------------------

    def record(self, trial_id: str, key: str, value: Any) -> None:
        """Set a user attribute on the Optuna trial behind a running Ray trial (no-op otherwise)."""
        ticket = self.live.get(trial_id)
        if ticket is not None and ticket.storage_id is not None:
            self.scope.record(self, ticket, key, value)


class OptunaLinks(Callback):
    """Records each Ray trial's latest checkpoint path on its Optuna trial (``checkpoint_path``)."""

    def __init__(self, searcher: SweepSearcher) -> None:
        self.searcher = searcher

    def on_checkpoint(self, iteration: int, trials: list, trial, checkpoint, **info) -> None:
        self.searcher.record(trial.trial_id, "checkpoint_path", checkpoint_path(checkpoint.path))
