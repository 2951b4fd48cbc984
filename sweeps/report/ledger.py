"""A sweep's budget ledger, ``budget.json`` in its output folder: what its launches charged (wall
hours, CPU-hours, GPU-hours, in all and by stage), the budget of the latest launch and which budget
ran out; and results.md's budget section (:func:`report_section`). The launch's meter that charges
it is the driver's (:mod:`sweeps.driver.budget`); the estimates ``--dry-run`` prints from it are the
plan's (:mod:`sweeps.plan.estimate`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeps.errors import LaunchError
from sweeps.layout import BUDGET_FILE, write_atomic

#: the budgets, in the order they are checked and shown
KEYS = ("hours", "cpu_hours", "gpu_hours")
UNITS = {"hours": "hours", "cpu_hours": "CPU-hours", "gpu_hours": "GPU-hours"}


def hours_figure(hours: float) -> str:
    """Hours (CPU-, GPU-hours) as printed: three significant figures, never in exponent form (a
    stage of a hundredth of a second is ``<0.0001``, not ``2.92e-06``; 1,234 hours is ``1,234``)."""
    if 0 < hours < 1e-4:
        return "<0.0001"
    return f"{hours:,.0f}" if hours >= 999.5 else f"{hours:.3g}"


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
        parts = [
            f"{hours_figure(self.charged['hours'])} hours over {runs} run{'s' if runs != 1 else ''}"
        ]
        parts += [f"{hours_figure(self.charged[k])} {UNITS[k]}" for k in KEYS[1:]]
        return ", ".join(parts)

    def stages_text(self) -> str:
        """``setup 0.001 hours; training 0.04 hours, 0.08 CPU-hours; timing 0.01 hours, 0.02
        CPU-hours`` (empty for a ledger written before stages were kept)."""
        parts = []
        for stage in [s for s in STAGES if s in self.stages] + sorted(
            set(self.stages) - set(STAGES)
        ):
            got = self.stages[stage]
            figures = [f"{hours_figure(got.get('hours', 0.0))} hours"]
            figures += [f"{hours_figure(got[k])} {UNITS[k]}" for k in KEYS[1:] if got.get(k)]
            parts.append(f"{stage} {', '.join(figures)}")
        return "; ".join(parts)

    def limits_text(self) -> str:
        """``hours 0.05 (0.051 charged), cpu_hours none``."""
        return ", ".join(
            f"{k} {self.limits[k]:,g} ({hours_figure(self.charged[k])} charged)"
            if self.limits.get(k) is not None
            else f"{k} none"
            for k in KEYS
        )

    def ran_out_line(self) -> str:
        key = self.ran_out or self.spent()
        if key is None or self.limits.get(key) is None:
            return f"charged {self.charged_text()}"
        charged = hours_figure(self.charged[key])
        return f"the {key} budget ran out: {charged} of {self.limits[key]:,g} {UNITS[key]} charged"

    def extend_hint(self, command: str) -> str:
        """What ran out, and the command that continues with a larger budget."""
        key = self.ran_out or "hours"
        limit, charged = self.limits.get(key) or 0.0, self.charged[key]
        return (
            f"{self.ran_out_line()}; finished trials and checkpoints are kept. A larger budget "
            f"continues the sweep (any {key} above the {hours_figure(charged)} charged):\n"
            f"  {command} --resume --set budget.{key}={_plain(max(2 * limit, 1.5 * charged))}"
        )


def _plain(value: float) -> str:
    """Three significant figures as YAML reads a number (``2000``, ``0.00015``; ``2e+03`` would be
    text to YAML)."""
    return f"{float(f'{value:.3g}'):.10f}".rstrip("0").rstrip(".")


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
            f"**The budget ran out** in training ({ledger.ran_out_line()}): {left} trial(s) left "
            "with the status `budget`, each stopped at its last checkpoint or before it started. "
            "A larger budget continues them: "
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
