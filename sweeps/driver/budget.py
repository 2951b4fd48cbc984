"""What a sweep may spend (the sweep file's ``budget:``) and what it has spent, over all its runs.

Three budgets, each optional: ``hours`` (the wall-clock time the sweep's launches ran, every stage
of them: setup, training, timing, held-out evaluation, reports), ``cpu_hours`` and ``gpu_hours``
(the CPUs and GPUs held, times how long: the running trials', and the timing and held-out stages'
processes as placed). The time is charged while a launch runs and kept in the sweep's output
folder (``budget.json``, written atomically every few seconds and at the end), by stage as well as
in all, so a resumed or requeued run adds to it and the time between runs is not charged.

When one is spent, the sweep stops as on a preemption (:mod:`sweeps.driver.preemption`): no trial
starts, the running ones stop at their last report's checkpoint, and the unfinished trials get the
status ``budget``; spent in the timing or held-out stage, that stage ends its running processes
and the models it had not finished are left for later. The launcher exits with
:data:`EXIT_BUDGET`. ``--resume --set budget.hours=N`` with a larger budget continues; a resume
without a larger one stops before Ray starts.

The launcher's stages (:mod:`sweeps.stages.pipeline`) and the driver's Tune callback
(:class:`sweeps.driver.budget_clock.BudgetClock`, after each of Tune's steps) tick the
:class:`Meter` of the launch (:func:`charging`); this module itself imports no Ray.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sweeps.plan.fusion import member_share
from sweeps.report.ledger import KEYS, STAGES, Ledger  # noqa: F401 (importable here too)

#: the launcher's exit status when a budget ran out with trials left
EXIT_BUDGET = 3
#: seconds between writes of the ledger while a run runs
SAVE_EVERY = 10.0


def trial_rates(resources: Any) -> dict[str, float]:
    """CPUs and GPUs one running trial holds (a DDP trial: its driver's CPU and every worker's)."""
    workers = int(getattr(resources, "workers", 1) or 1)
    return {
        "cpu_hours": resources.cpu * workers + (1 if workers > 1 else 0),
        "gpu_hours": (resources.gpu or 0.0) * workers,
    }


class Meter:
    """Charges one launch's time to a :class:`Ledger`, to the stage it is in (:meth:`enter`):
    :meth:`tick` with the number of running trials after each of Tune's steps, :meth:`hold` with
    the CPUs and GPUs a later stage's processes hold; each says (once) when a budget ran out.

    ``rates``: what one trial holds (:func:`trial_rates`; a fused group holds one trial's);
    ``lone_rates``: what a trial that trains alone holds where the plan gives it a share of its
    own beside fused groups (``resources.gpu: auto``: a GPU a group, an eighth of one a trial
    alone), else None (``rates``)."""

    def __init__(self, ledger: Ledger, rates: dict[str, float]) -> None:
        self.ledger = ledger
        self.rates = rates
        self.lone_rates: dict[str, float] | None = None
        self.run: dict[str, Any] = {}
        self.stage = STAGES[0]
        self.stopping: str | None = None
        self._last = self._saved = 0.0
        self._held = {k: 0.0 for k in KEYS[1:]}  # CPUs and GPUs held now
        self._unsaved = False

    @property
    def started(self) -> bool:
        return bool(self.run)

    def start(self) -> None:
        self.run = {
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **dict.fromkeys(KEYS, 0.0),
        }
        self.ledger.runs.append(self.run)
        self._last = self._saved = time.monotonic()

    def enter(self, stage: str) -> str | None:
        """Charge what the last stage held until now, then charge ``stage``, holding nothing yet."""
        ran_out = self.hold(0.0, 0.0)
        self.stage = stage
        return ran_out

    def count(self, done: int = 1) -> None:
        """``done`` more models finished by the stage (timed, evaluated): the estimates' rate.
        Written at once, so that a kill -9 before the next periodic save keeps the count."""
        charged = self.ledger.stages.setdefault(self.stage, {})
        charged["models"] = charged.get("models", 0) + done
        self._save()

    def place(self, resources: Any, lone: dict[str, float] | None = None) -> None:
        """What the launch's trials hold, as placed: ``resources`` a trial (and a fused group),
        ``lone`` a trial alone beside the groups where the plan gives it a share of its own."""
        self.rates = trial_rates(resources)
        self.lone_rates = (
            None if lone is None else {"cpu_hours": lone["cpu"], "gpu_hours": lone["gpu"]}
        )

    def tick_trials(self, configs: Iterable[dict[str, Any]]) -> str | None:
        """:meth:`tick` with the running trials' configs: a member of a fused group of n holds
        1/n of a trial (:func:`sweeps.plan.fusion.member_share`), a trial alone beside the groups
        its own share where the plan gives it one."""
        shares = [member_share(config) for config in configs]
        alone = sum(share == 1.0 for share in shares)
        return self.tick(sum(shares) - alone, alone)

    def tick(self, running: float | None = None, alone: int = 0) -> str | None:
        """Charge the time since the last tick (at the last known number of running trials: the
        trials Tune just started or stopped are counted from the next tick). ``running``: trials
        holding ``rates`` (a fused member 1/n of them); ``alone``: trials holding ``lone_rates``.
        Returns the budget that ran out, the first time one has."""
        lone = self.lone_rates or self.rates
        held = (
            None
            if running is None
            else {k: running * r + alone * lone.get(k, 0.0) for k, r in self.rates.items()}
        )
        return self._charge(held)

    def hold(self, cpus: float, gpus: float) -> str | None:
        """Charge the time since the last tick, then hold ``cpus`` and ``gpus`` from now on (a
        timing or held-out stage's processes, as placed). Returns as :meth:`tick`."""
        return self._charge({"cpu_hours": cpus, "gpu_hours": gpus})

    def _charge(self, held: dict[str, float] | None) -> str | None:
        now = time.monotonic()
        hours = (now - self._last) / 3600.0
        self._last = now
        spend = {"hours": hours, **{k: hours * n for k, n in self._held.items()}}
        stage = self.ledger.stages.setdefault(self.stage, {})
        for key, value in spend.items():
            self.run[key] = self.run.get(key, 0.0) + value
            self.ledger.charged[key] += value
            stage[key] = stage.get(key, 0.0) + value
        if held is not None:
            self._held = {k: float(held.get(k, 0.0)) for k in KEYS[1:]}
        key = self.ledger.spent() if self.stopping is None else None
        if key is not None:
            self.stopping = self.ledger.ran_out = key
            self.ledger.stopped_in = self.stage
        if key is not None or now - self._saved >= SAVE_EVERY:
            self._saved = now
            self._save()
        return key

    def stop(self) -> None:
        self.hold(0.0, 0.0)
        self._save()

    def _save(self) -> None:
        """Write the ledger; a storage that cannot take it (full, read-only) is said once and does
        not stop the sweep (the launcher reports the storage fault itself)."""
        try:
            self.ledger.save()
        except OSError as exc:
            if not self._unsaved:
                print(
                    f"budget: could not write {self.ledger.path} ({exc}); the time is still "
                    "charged in this run",
                    file=sys.stderr,
                    flush=True,
                )
            self._unsaved = True


_ACTIVE: Meter | None = None


def active() -> Meter | None:
    """The meter of the run in progress in this process (the driver), if any."""
    return _ACTIVE


@contextlib.contextmanager
def charging(meter: Meter | None) -> Iterator[None]:
    """Charge the time of the block to ``meter``'s ledger: a whole launch (the launcher's stages),
    or a run of a Tune experiment inside it (which then only ends with no trial running); a Tune
    run outside a launch starts and ends a run of the ledger of its own."""
    global _ACTIVE
    if meter is None:
        yield
        return
    outer = not meter.started
    if outer:
        meter.start()
    previous, _ACTIVE = _ACTIVE, meter
    try:
        yield
    finally:
        _ACTIVE = previous
        if outer:
            meter.stop()
        else:
            meter.tick(0)


def budget_meter(sweep: Any, out_dir: Path, resume: bool, command: str) -> Meter | None:
    """The meter of this run, its ledger holding the sweep file's budget; None (and a line
    saying why) when a resumed sweep's budget is already spent: nothing may start."""
    ledger = Ledger.load(out_dir)
    ledger.set_limits(sweep.spec.budget)
    if resume and ledger.ran_out:
        print(f"budget: no trial starts. {ledger.extend_hint(command)}")
        return None
    return Meter(ledger, trial_rates(sweep.spec.resources))
