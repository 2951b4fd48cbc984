"""What a sweep may spend (the sweep file's ``budget:``) and what it has spent, over all its runs.

Three budgets, each optional: ``hours`` (the wall-clock time the sweep's Tune experiment ran),
``cpu_hours`` and ``gpu_hours`` (the CPUs and GPUs its running trials held, times how long). The
time is charged while a run runs and kept in the sweep's output folder (``budget.json``, written
atomically every few seconds and at the end), so a resumed or requeued run adds to it and the
time between runs is not charged.

When one is spent, the sweep stops as on a preemption (:mod:`sweeps.run.preemption`): no trial
starts, the running ones stop at their last report's checkpoint, and the unfinished trials get the
status ``budget``; the launcher exits with :data:`EXIT_BUDGET`. ``--resume --set budget.hours=N``
with a larger budget continues them; a resume without a larger one stops before Ray starts.

The driver's Tune callback (:class:`sweeps.run.budget_clock.BudgetClock`) ticks the
:class:`Meter` of the run in progress (:func:`charging`) after each of Tune's steps; this module
itself imports no Ray.
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


@dataclass
class Ledger:
    """A sweep's ``budget.json``: what was charged over its runs, the budget of the latest run
    (``limits``) and which budget ran out (``ran_out``, or None)."""

    path: Path
    charged: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KEYS, 0.0))
    runs: list[dict[str, Any]] = field(default_factory=list)
    limits: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(KEYS))
    ran_out: str | None = None

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
        )

    def save(self) -> None:
        data = {
            "charged": self.charged,
            "limits": self.limits,
            "ran_out": self.ran_out,
            "runs": self.runs,
        }
        write_atomic(self.path, json.dumps(data, indent=2) + "\n")

    def set_limits(self, budget: Any) -> None:
        """This run's budget (the sweep file's ``budget``, as ``--set`` left it); a larger one
        clears an earlier run's ``ran_out``."""
        self.limits = {k: getattr(budget, k, None) for k in KEYS}
        self.ran_out = self.spent()

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
    """Charges one run's time to a :class:`Ledger`: :meth:`tick` with the number of running trials
    after each of Tune's steps; :meth:`tick` says (once) when a budget has run out."""

    def __init__(self, ledger: Ledger, rates: dict[str, float]) -> None:
        self.ledger = ledger
        self.rates = rates
        self.run: dict[str, Any] = {}
        self.stopping: str | None = None
        self._last = self._saved = 0.0
        self._running = 0
        self._unsaved = False

    def start(self) -> None:
        self.run = {
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **dict.fromkeys(KEYS, 0.0),
        }
        self.ledger.runs.append(self.run)
        self._last = self._saved = time.monotonic()

    def tick(self, running: float | None = None) -> str | None:
        """Charge the time since the last tick (at the last known number of running trials: the
        trials Tune just started or stopped are counted from the next tick). Returns the budget
        that ran out, the first time one has."""
        now = time.monotonic()
        hours = (now - self._last) / 3600.0
        self._last = now
        spend = {"hours": hours, **{k: hours * self._running * r for k, r in self.rates.items()}}
        for key, value in spend.items():
            self.run[key] += value
            self.ledger.charged[key] += value
        if running is not None:
            self._running = running
        key = self.ledger.spent() if self.stopping is None else None
        if key is not None:
            self.stopping = self.ledger.ran_out = key
        if key is not None or now - self._saved >= SAVE_EVERY:
            self._saved = now
            self._save()
        return key

    def stop(self) -> None:
        self.tick()
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
    """Charge the time of the block (a run of the Tune experiment) to ``meter``'s ledger."""
    global _ACTIVE
    if meter is None:
        yield
        return
    meter.start()
    _ACTIVE = meter
    try:
        yield
    finally:
        _ACTIVE = None
        meter.stop()


def estimate(ledger: Ledger, finished: int, total: int) -> str | None:
    """What the rest of the sweep needs at the rate of its runs so far (trials finished per
    charged hour), or None where no estimate can be made (no run yet, nothing finished)."""
    if finished <= 0 or not ledger.runs or finished >= total:
        return None
    scale = (total - finished) / finished
    needs = ", ".join(
        f"{ledger.charged[k] * scale:.3g} {UNITS[k]}"
        for k in KEYS
        if k == "hours" or ledger.charged[k] > 0
    )
    return (
        f"{finished} of {total} trials finished in {ledger.charged_text()}: the other "
        f"{total - finished} need about {needs} more at that rate"
    )


def budget_lines(ledger: Ledger, finished: int, total: int) -> list[str]:
    """What ``--dry-run`` and the start of a run print about the budget (nothing when the sweep
    has no budget and no charged time)."""
    has_limit = any(ledger.limits.get(k) is not None for k in KEYS)
    if not has_limit and not ledger.runs:
        return []
    lines = [f"budget: {ledger.limits_text()}" if has_limit else "budget: none"]
    if ledger.runs:
        lines.append(f"  charged so far: {ledger.charged_text()}")
    guess = estimate(ledger, finished, total)
    if guess:
        lines.append(f"  estimate: {guess}")
    elif has_limit and not ledger.runs:
        lines.append("  estimate: none before a first run (its charged time gives one)")
    return lines


def report_section(out_dir: Path, statuses: dict[str, int]) -> str | None:
    """results.md's budget section: what was charged, and when the budget ran out, what remains
    and how to continue; None for a sweep that never had a budget."""
    ledger = Ledger.load(out_dir)
    if not ledger.path.exists() or not any(ledger.limits.get(k) for k in KEYS):
        return None
    lines = [f"Budget: {ledger.limits_text()}. Charged: {ledger.charged_text()}."]
    left = statuses.get("budget", 0)
    if left:  # (a budget that ran out as the last trial finished stopped nothing)
        lines.append(
            f"**The budget ran out** ({ledger.ran_out_line()}): {left} trial(s) left with the "
            "status `budget`, stopped at their last checkpoint. A larger budget continues them: "
            "`--resume --set budget.hours=...` (or `budget.cpu_hours`, `budget.gpu_hours`)."
        )
    return "\n\n".join(lines)


def finished_trials(out_dir: Path) -> int:
    """How many trials an earlier run's results.csv has finished (0 without one)."""
    import csv

    from sweeps.layout import RESULTS_CSV
    from sweeps.report.results import FINISHED

    path = Path(out_dir) / RESULTS_CSV
    if not path.exists():
        return 0
    with path.open(newline="") as f:
        return sum(1 for row in csv.DictReader(f) if row.get("status") in FINISHED)


def launch_lines(out_dir: Path, budget: Any, total: int) -> list[str]:
    """The budget lines the launcher prints before it starts (and ``--dry-run`` prints): the
    budget, what earlier runs charged, an estimate of what the rest needs where one can be made."""
    ledger = Ledger.load(out_dir)
    ledger.set_limits(budget)
    return budget_lines(ledger, finished_trials(out_dir), total)


def budget_meter(sweep: Any, out_dir: Path, resume: bool, command: str) -> Meter | None:
    """The meter of this run, its ledger holding the sweep file's budget; None (and a line
    saying why) when a resumed sweep's budget is already spent: nothing may start."""
    ledger = Ledger.load(out_dir)
    ledger.set_limits(sweep.spec.budget)
    if resume and ledger.ran_out:
        print(f"budget: no trial starts. {ledger.extend_hint(command)}")
        return None
    return Meter(ledger, trial_rates(sweep.spec.resources))
