"""One launch of a sweep as its stages see it (:mod:`sweeps.stages.pipeline`): what the command line
asked for, what each stage found or made (the Ray connection's fit, the trial settings, the rows
and plans of the trials), whether the launch is stopping, and how a stage that waits on Ray tasks
polls for that (:meth:`Launch.poll`: the budget charged for what the stage holds, the stop
requests checked).

Stage events (a stage beginning; the timing or held-out stage starting work on its next models, or
finishing one) go to the
functions named in :data:`STAGE_CALLBACKS_ENV` (``module.function``, comma-separated, each called
with the event's name): a seam for monitoring and for tests that act at a chosen point of a launch
(``tests/stage_hook.py`` sends a signal there), as Ray Tune's ``RAY_TUNE_CALLBACKS`` is for a run.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeps.driver.budget import Meter
from sweeps.driver.cluster import ClusterFit
from sweeps.driver.preemption import Preemption
from sweeps.layout import OPTUNA_JOURNAL, launch_script, python_command
from sweeps.plan.sweep_plan import Paths, SweepPlan
from sweeps.plan.warm_start import WarmStart
from sweeps.spec import Sweep
from sweeps.storage import StorageGuard
from sweeps.trial.settings import TrialSettings

#: the environment variable naming the functions told of each stage event
STAGE_CALLBACKS_ENV = "SWEEPS_STAGE_CALLBACKS"


def stage_callbacks() -> list[Callable[[str], None]]:
    """The functions :data:`STAGE_CALLBACKS_ENV` names (none when it is unset)."""
    found = []
    for name in filter(None, os.environ.get(STAGE_CALLBACKS_ENV, "").split(",")):
        module, _, function = name.strip().rpartition(".")
        found.append(getattr(importlib.import_module(module), function))
    return found


@dataclass
class Launch:
    """The state of one launch, made by its stages in order (each field says which)."""

    #: what the launch will do, worked out before it started (:mod:`sweeps.plan`)
    plan: SweepPlan
    args: argparse.Namespace
    profile: str | None
    stop: Preemption
    #: W&B's mode for this launch, and the sweep folder's launch lock, held to the end (check_output)
    mode: str = "disabled"
    lock: Any = None
    #: the budget's meter of this launch (start_budget)
    meter: Meter | None = None
    #: what the cluster can hold, and the trials' settings (join_ray)
    fit: ClusterFit | None = None
    settings: TrialSettings | None = None
    #: the watch on the Ray head's GCS, from joining Ray to the reports (join_ray)
    watch: Any = None
    #: the storage's watch for a full or read-only disk
    guard: StorageGuard | None = None
    #: the Tune run's result grid, the trials' rows and {trial id: (plan, folder)} (train)
    grid: Any = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    plans: dict[str, Any] = field(default_factory=dict)
    #: the trials that reported in this launch (train): their W&B runs get results.csv's status
    trained: set[str] = field(default_factory=set)
    #: the trials results.csv no longer reports: an earlier choice's confirm trials (confirm)
    superseded: set[str] = field(default_factory=set)
    #: the trials whose W&B runs got their status with the timing figures (measure)
    published: set[str] = field(default_factory=set)
    #: some work this launch planned was left undone (a stop, a storage fault, a cut Tune run)
    interrupted: bool = False
    #: the first stage a stop cut short or left out
    stopped_in: str | None = None
    #: what the results stage wrote ({"csv": path, "md": path, ...}) and its table
    written: dict[str, Path] = field(default_factory=dict)
    df: Any = None
    listeners: list[Callable[[str], None]] = field(default_factory=stage_callbacks)

    @classmethod
    def begin(
        cls, plan: SweepPlan, args: argparse.Namespace, profile: str | None, stop: Preemption
    ) -> Launch:
        launch = cls(plan, args, profile, stop)
        launch.guard = StorageGuard(plan.storage)
        return launch

    def stop_watch(self) -> None:
        """The launch no longer needs Ray's head: its loss is no longer the launch's end."""
        if self.watch is not None:
            self.watch.stop()
            self.watch = None

    @property
    def sweep(self) -> Sweep:
        return self.plan.sweep

    @property
    def spec(self) -> Any:
        return self.plan.sweep.spec

    @property
    def warm(self) -> WarmStart | None:
        return self.plan.warm

    @property
    def paths(self) -> Paths:
        return self.plan.paths

    @property
    def out_dir(self) -> Path:
        return self.plan.out_dir

    @property
    def journal(self) -> Path | None:
        """The Optuna journal, for a sweep with a search."""
        return self.out_dir / OPTUNA_JOURNAL if self.sweep.has_search else None

    @property
    def launch_cmd(self) -> str:
        return (
            f"{python_command()} {launch_script()} {self.args.spec} --output {self.args.output}"
            + self.ray_args
        )

    @property
    def resume_cmd(self) -> str:
        return (
            f"{python_command()} {launch_script()} {self.args.spec} --resume --output {self.args.output}"
            + self.ray_args
            + self.settings_args
        )

    @property
    def full_cmd(self) -> str:
        """The command as it ran, with its profile and ``--set`` values (the lock's record)."""
        return self.resume_cmd if self.args.resume else self.launch_cmd + self.settings_args

    @property
    def ray_args(self) -> str:
        """``--address`` and ``--num-cpus`` as the launch was given them, or nothing: a resume
        joins the same Ray, or starts one of the same size (the sweep's files keep neither)."""
        address = getattr(self.args, "address", None)
        cpus = getattr(self.args, "num_cpus", None)
        return (f" --address {address}" if address else "") + (
            f" --num-cpus {cpus}" if cpus else ""
        )

    @property
    def settings_args(self) -> str:
        return (f" --profile {self.profile}" if self.profile else "") + "".join(
            f" --set {shlex.quote(o)}" for o in self.args.overrides
        )

    # ---- stopping ------------------------------------------------------------------------------

    def stopped_by(self) -> str | None:
        """Why the launch is stopping: ``preempted`` (a signal), ``budget``, ``interrupted``
        (Ctrl-C), or None (no stop requested)."""
        if self.stop.signal is not None:
            return "preempted"
        if self.meter is not None and self.meter.stopping:
            return "budget"
        return "interrupted" if self.stop.interrupted else None

    def stopping(self) -> bool:
        """Whether the next stage must not start: a stop was requested, or work planned before it
        was left undone (the stages after training need all of it)."""
        return self.interrupted or self.stopped_by() is not None

    def enter(self, stage: str) -> None:
        """Charge the budget from here to ``stage`` (the ledger's name for it)."""
        if self.meter is not None:
            self._said_ran_out(self.meter.enter(stage))

    def poll(self, cpus: float, gpus: float) -> bool:
        """A stage's check between its steps: charge the budget for the ``cpus`` and ``gpus`` its
        processes hold now; True when it must stop (a signal, Ctrl-C, the budget ran out)."""
        if self.meter is not None:
            self._said_ran_out(self.meter.hold(cpus, gpus))
        return self.stopped_by() is not None

    def started(self, event: str) -> None:
        """A stage started work on its next models: told to the stage callbacks as
        ``<event>:start``."""
        self.notify(f"{event}:start")

    def done(self, event: str) -> None:
        """A stage finished one model (``timing``: timed, ``heldout``: evaluated): counted for
        the budget's estimates, and told to the stage callbacks as ``<event>:done``."""
        if self.meter is not None:
            self.meter.count()
        self.notify(f"{event}:done")

    def notify(self, event: str) -> None:
        for listener in self.listeners:
            listener(event)

    def _said_ran_out(self, key: str | None) -> None:
        if key is not None and self.meter is not None:
            print(
                f"\nbudget: {self.meter.ledger.ran_out_line()}; the running stage stops (its "
                f"unfinished work is left for a larger budget: --resume --set budget.{key}=...)",
                file=sys.stderr,
                flush=True,
            )
