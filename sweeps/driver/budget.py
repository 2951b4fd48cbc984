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

The launcher's stages (:mod:`sweeps.stages.setup`) and the driver's Tune callback
(:class:`sweeps.driver.budget_clock.BudgetClock`, after each of Tune's steps) tick the
:class:`Meter` of the launch (:func:`charging`); this module itself imports no Ray.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sweeps.errors import LaunchError
from sweeps.layout import BUDGET_FILE, write_atomic

#: the launcher's exit status when a budget ran out with trials left
EXIT_BUDGET = 3
#: the budgets, in the order they are checked and shown
KEYS = ("hours", "cpu_hours", "gpu_hours")
UNITS = {"hours": "hours", "cpu_hours": "CPU-hours", "gpu_hours": "GPU-hours"}
#: seconds between writes of the ledger while a run runs
SAVE_EVERY = 10.0
#: the stages of a launch, in order, as the ledger names them
STAGES = ("setup", "training", "timing", "confirm", "heldout", "reports")
#: the stages after training that measure the trained models, in words
AFTER_TRAINING = {"timing": "timing stage", "heldout": "held-out stage"}


@dataclass
class Ledger:
    """A sweep's ``budget.json``: what was charged over its runs, the budget of the latest run
    (``limits``) and which budget ran out (``ran_out``, or None)."""

    path: Path
    charged: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KEYS, 0.0))
    runs: list[dict[str, Any]] = field(default_factory=list)
    limits: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(KEYS))
    ran_out: str | None = None
    #: the charge by stage over the runs (``{"timing": {"hours": .., "cpu_hours": .., ..,
    #: "models": n}}``: ``models`` counts what the stage finished, for the estimates)
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    #: the stage the sweep was in when ``ran_out`` ran out
    stopped_in: str | None = None

    @classmethod
    def load(cls, out_dir: Path) -> Ledger:
        """The ledger of the sweep whose output folder is ``out_dir`` (empty when it has none)."""
        path = Path(out_dir) / BUDGET_FILE
        if not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            raise LaunchError(
                f"{path} does not read as the sweep's budget ledger ({exc}): restore it from a "
                "backup, or delete it to charge the sweep's time from zero"
            ) from None
        return cls(
            path,
            {k: float(data.get("charged", {}).get(k, 0.0)) for k in KEYS},
            list(data.get("runs", [])),
            {k: data.get("limits", {}).get(k) for k in KEYS},
            data.get("ran_out"),
            {k: dict(v) for k, v in data.get("stages", {}).items()},
            data.get("stopped_in"),
        )

    def save(self) -> None:
        data = {
            "charged": self.charged,
            "limits": self.limits,
            "ran_out": self.ran_out,
            "stopped_in": self.stopped_in,
            "stages": self.stages,
            "runs": self.runs,
        }
        write_atomic(self.path, json.dumps(data, indent=2) + "\n")

    def set_limits(self, budget: Any) -> None:
        """This run's budget (the sweep file's ``budget``, as ``--set`` left it); a larger one
        clears an earlier run's ``ran_out``."""
        self.limits = {k: getattr(budget, k, None) for k in KEYS}
        self.ran_out = self.spent()
        if self.ran_out is None:
            self.stopped_in = None

    def spent(self) -> str | None:
        """The first budget charged to its limit, or None."""
        for key in KEYS:
            limit = self.limits.get(key)
            if limit is not None and self.charged[key] >= limit:
                return key
        return None

    def charged_text(self) -> str:
        """``0.051 hours over 2 runs, 0.102 CPU-hours, 0 GPU-hours``."""
        runs = len(self.runs)
        parts = [f"{self.charged['hours']:.3g} hours over {runs} run{'s' if runs != 1 else ''}"]
        parts += [f"{self.charged[k]:.3g} {UNITS[k]}" for k in KEYS[1:]]
        return ", ".join(parts)

    def stages_text(self) -> str:
        """``setup 0.001 hours; training 0.04 hours, 0.08 CPU-hours; timing 0.01 hours, 0.02
        CPU-hours`` (empty for a ledger written before stages were kept)."""
        parts = []
        for stage in [s for s in STAGES if s in self.stages] + sorted(
            set(self.stages) - set(STAGES)
        ):
            got = self.stages[stage]
            figures = [f"{got.get('hours', 0.0):.3g} hours"]
            figures += [f"{got[k]:.3g} {UNITS[k]}" for k in KEYS[1:] if got.get(k)]
            parts.append(f"{stage} {', '.join(figures)}")
        return "; ".join(parts)

    def limits_text(self) -> str:
        """``hours 0.05 (0.051 charged), cpu_hours none``."""
        return ", ".join(
            f"{k} {self.limits[k]:g} ({self.charged[k]:.3g} charged)"
            if self.limits.get(k) is not None
            else f"{k} none"
            for k in KEYS
        )

    def ran_out_line(self) -> str:
        key = self.ran_out or self.spent()
        if key is None or self.limits.get(key) is None:
            return f"charged {self.charged_text()}"
        return (
            f"the {key} budget ran out: {self.charged[key]:.3g} of {self.limits[key]:g} {UNITS[key]} "
            f"charged"
        )

    def extend_hint(self, command: str) -> str:
        """What ran out, and the command that continues with a larger budget."""
        key = self.ran_out or "hours"
        limit = self.limits.get(key) or 0.0
        return (
            f"{self.ran_out_line()}; finished trials and checkpoints are kept. A larger budget "
            f"continues the sweep (any {key} above the {self.charged[key]:.3g} charged):\n"
            f"  {command} --resume --set budget.{key}={max(2 * limit, 1.5 * self.charged[key]):.3g}"
        )


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
    the CPUs and GPUs a later stage's processes hold; each says (once) when a budget ran out."""

    def __init__(self, ledger: Ledger, rates: dict[str, float]) -> None:
        self.ledger = ledger
        self.rates = rates
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
        """``done`` more models finished by the stage (timed, evaluated): the estimates' rate."""
        charged = self.ledger.stages.setdefault(self.stage, {})
        charged["models"] = charged.get("models", 0) + done

    def tick(self, running: float | None = None) -> str | None:
        """Charge the time since the last tick (at the last known number of running trials: the
        trials Tune just started or stopped are counted from the next tick). Returns the budget
        that ran out, the first time one has."""
        held = None if running is None else {k: running * r for k, r in self.rates.items()}
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


def report_section(out_dir: Path, statuses: dict[str, int]) -> str | None:
    """results.md's budget section: what was charged, and when the budget ran out, what remains
    and how to continue; None for a sweep that never had a budget."""
    ledger = Ledger.load(out_dir)
    if not ledger.path.exists() or not any(ledger.limits.get(k) for k in KEYS):
        return None
    by_stage = ledger.stages_text()
    lines = [
        f"Budget: {ledger.limits_text()}. Charged: {ledger.charged_text()}"
        + (f" (by stage: {by_stage})." if by_stage else ".")
    ]
    left = statuses.get("budget", 0)
    if left:  # (a budget that ran out as the last trial finished stopped nothing)
        lines.append(
            f"**The budget ran out** ({ledger.ran_out_line()}): {left} trial(s) left with the "
            "status `budget`, stopped at their last checkpoint. A larger budget continues them: "
            "`--resume --set budget.hours=...` (or `budget.cpu_hours`, `budget.gpu_hours`)."
        )
    elif ledger.ran_out and ledger.stopped_in in AFTER_TRAINING:
        lines.append(
            f"**The budget ran out** in the {AFTER_TRAINING[ledger.stopped_in]} "
            f"({ledger.ran_out_line()}): its running processes were ended and the models it had "
            f"not finished are left out (their rows say so). A larger budget finishes them, "
            "nothing done twice: `--resume --set budget.hours=...` (or `budget.cpu_hours`, "
            "`budget.gpu_hours`)."
        )
    return "\n\n".join(lines)


def budget_meter(sweep: Any, out_dir: Path, resume: bool, command: str) -> Meter | None:
    """The meter of this run, its ledger holding the sweep file's budget; None (and a line
    saying why) when a resumed sweep's budget is already spent: nothing may start."""
    ledger = Ledger.load(out_dir)
    ledger.set_limits(sweep.spec.budget)
    if resume and ledger.ran_out:
        print(f"budget: no trial starts. {ledger.extend_hint(command)}")
        return None
    return Meter(ledger, trial_rates(sweep.spec.resources))
