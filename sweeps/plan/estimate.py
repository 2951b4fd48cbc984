"""What the launcher says about a sweep's budget before it starts (and what ``--dry-run`` says):
the budget, what earlier runs charged and, where one can be made, what the rest needs: the
training at the rate of the trials finished so far, and the stages after it (the timing stage's
models, the held-out evaluations) at the rate of the models they finished so far or, for the
timing stage before any run of it, from the ``timing`` settings' own limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweeps.layout import results_statuses
from sweeps.report.columns import FINISHED, REUSED
from sweeps.report.ledger import KEYS, UNITS, Ledger, hours_figure

#: seconds a fresh timing process takes to start (torch and Lightning imported, the model and
#: its data loaded) on a small CPU machine; the a-priori timing estimate counts one per process
PROCESS_START_S = 5.0


def _needs(charged: dict[str, float], scale: float) -> str:
    return ", ".join(
        f"{hours_figure(charged.get(k, 0.0) * scale)} {UNITS[k]}"
        for k in KEYS
        if k == "hours" or charged.get(k, 0.0) > 0
    )


def estimate(ledger: Ledger, finished: int, total: int, reused: int = 0) -> str | None:
    """What the rest of the sweep's training needs at the rate of its runs so far (trials
    finished per hour charged to training), or None where no estimate can be made (no run yet,
    nothing finished). ``finished`` and ``total`` count the trials the sweep trains; ``reused``,
    those a warm start brought, which took none of its time."""
    if finished <= 0 or not ledger.runs or finished >= total:
        return None
    charged = ledger.stages.get("training") or ledger.charged  # (a ledger without stages)
    besides = f" ({reused} more reused from the warm start)" if reused else ""
    return (
        f"{finished} of {total} trials finished{besides} in {ledger.charged_text()}: the other "
        f"{total - finished} need about {_needs(charged, (total - finished) / finished)} more "
        "of training at that rate"
    )


def timing_upper_seconds(timing: Any, models: int) -> float:
    """About the longest the timing stage takes for ``models`` models on one lane, from the
    ``timing`` settings: ``max_seconds`` per model and timed measure (shared among the fresh
    processes), and each process's start-up and calibration; a fresh process per model for the
    peak memory. A bound of the settings, not a measurement: a model reaching its precision
    sooner takes less."""
    timed = [m for m in timing.measure if m != "memory"]
    seconds = models * len(timed) * timing.max_seconds
    if timing.fresh_process:
        batches = -(-models // timing.models_per_process)
        per_process = PROCESS_START_S + (timing.calibration_seconds if timed else 0.0)
        seconds += batches * timing.processes * per_process if timed else 0.0
        seconds += models * PROCESS_START_S if "memory" in timing.measure else 0.0
    return seconds


def stage_lines(ledger: Ledger, spec: Any, trials: int, evaluations: int) -> list[str]:
    """The estimate lines of the stages after training: ``trials`` models to time, ``evaluations``
    held-out evaluations in all (the sweep's chosen trials and confirm trials)."""
    lines = []
    timed = int(ledger.stages.get("timing", {}).get("models", 0))
    if spec.timing.enabled and trials > timed:
        left = trials - timed
        if timed:
            needs = _needs(ledger.stages["timing"], left / timed)
            lines.append(
                f"  timing stage: about {needs} for the {left} model(s) not yet timed, at the "
                f"rate of the {timed} timed so far"
            )
        else:
            hours = timing_upper_seconds(spec.timing, left) / 3600.0
            lines.append(
                f"  timing stage: at most about {hours_figure(hours)} hours for {left} model(s), "
                "each holding a whole node (or one GPU) while timed (from timing.max_seconds and the "
                "processes' start-ups)"
            )
    done = int(ledger.stages.get("heldout", {}).get("models", 0))
    if spec.heldout.enabled and evaluations > done:
        left = evaluations - done
        if done:
            needs = _needs(ledger.stages["heldout"], left / done)
            lines.append(
                f"  held-out stage: about {needs} for the {left} evaluation(s) left, at the rate "
                f"of the {done} so far"
            )
        else:
            lines.append(
                f"  held-out stage: {left} evaluation(s) of a test split, each holding one "
                "trial's resources; no estimate before a first one"
            )
    return lines


def budget_lines(
    ledger: Ledger, finished: int, total: int, after: list[str] | None = None, reused: int = 0
) -> list[str]:
    """What ``--dry-run`` and the start of a run print about the budget (nothing when the sweep
    has no budget and no charged time); ``after``: the lines of the stages after training;
    ``reused``: :func:`estimate`'s."""
    has_limit = any(ledger.limits.get(k) is not None for k in KEYS)
    if not has_limit and not ledger.runs:
        return []
    lines = [f"budget: {ledger.limits_text()}" if has_limit else "budget: none"]
    if ledger.runs:
        lines.append(f"  charged so far: {ledger.charged_text()}")
        if by_stage := ledger.stages_text():
            lines.append(f"  by stage: {by_stage}")
    if ledger.runs and ledger.ran_out:  # what a --resume would meet: nothing may start
        key = ledger.ran_out
        lines.append(
            f"  spent: {ledger.ran_out_line()}; a --resume stops before any trial starts (exit "
            f"3) unless it brings a larger budget: --set budget.{key}=N, N above "
            f"{hours_figure(ledger.charged[key])}"
        )
    guess = estimate(ledger, finished, total, reused)
    if guess:
        lines.append(f"  estimate: {guess}")
    elif has_limit and not ledger.runs:
        lines.append("  estimate: none of training before a first run (its charged time gives one)")
    return lines + list(after or [])


def finished_trials(out_dir: Path) -> tuple[int, int]:
    """How many trials an earlier run's results.csv has finished, trained by the sweep's runs and
    reused from a warm start (which took none of their time): (0, 0) without one."""
    trained = sum(n for status, n in results_statuses(out_dir).items() if status in FINISHED)
    reused = sum(n for status, n in results_statuses(out_dir, REUSED).items() if status in FINISHED)
    return trained - reused, reused


def launch_lines(out_dir: Path, sweep: Any) -> list[str]:
    """The budget lines the launcher prints before it starts (and ``--dry-run`` prints): the
    budget, what earlier runs charged, estimates of what the rest needs where they can be made."""
    spec = sweep.spec
    ledger = Ledger.load(out_dir)
    ledger.set_limits(spec.budget)
    chosen = sweep.num_trials if spec.heldout.trials == "all" else len(sweep.plans)
    confirm = len(sweep.cells) * len(spec.confirm_seeds or [])
    after = stage_lines(ledger, spec, sweep.num_trials, chosen + confirm)
    if spec.budget.gpu_hours is not None and spec.resources.gpu == 0:
        after.insert(
            0,
            "  gpu_hours: the trials hold no GPU (resources.gpu 0), so training charges none of "
            "it (a timing or held-out stage run on a GPU would); hours or cpu_hours bound a CPU "
            "sweep",
        )
    trained, reused = finished_trials(out_dir)  # the reused are no part of the rate or the rest
    return budget_lines(ledger, trained, sweep.num_trials - reused, after, reused)
