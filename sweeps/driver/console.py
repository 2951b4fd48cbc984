"""What the console shows while a sweep runs: a trial table (grid columns, status, the metric,
step, training time; no config dumps) and a progress line (finished / running / pending / failed,
elapsed, ETA). A Tune ``Callback`` on the driver; Tune's own reporter is off (``verbose=0``).

The table names a trial's state as results.csv's ``status`` column does (``done``, ``stopped``,
``converged``, ``error``: :func:`sweeps.report.results.trial_status`), and one that has not ended
``running``, ``pending`` or ``waiting`` (at a rung). When the sweep is stopped from outside (a
preemption: :mod:`.preemption`) or by its budget (:mod:`.budget`), Tune ends the running trials as
if finished; the last table and line call them ``preempted`` or ``budget`` instead, as results.csv
does."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

from ray.tune import Callback

from sweeps.driver import budget, preemption
from sweeps.layout import finished_report
from sweeps.report.results import last_report, trial_status
from sweeps.schedulers.lost_nodes import failures_this_run, move_line, moves
from sweeps.schedulers.placement import held_before_start

#: Tune's states of a trial that has not ended, as the table names them
LIVE_STATES = {"RUNNING": "running", "PENDING": "pending", "PAUSED": "waiting"}


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _finished_on_disk(trial_dir: str | None, max_steps: int | None) -> bool:
    """Whether the last report in the trial's own ``result.json`` ended it."""
    return finished_report(last_report(trial_dir) if trial_dir else {}, max_steps)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


class SweepConsole(Callback):
    """Prints the table every ``every`` seconds (and when a trial ends), the progress line more often.

    Args:
        total: trials the sweep will run.
        columns: the flat config keys to show (grid and sampled values), in order.
        metric, mode: the metric optimised ("max" or "min"): its column, and the sort of finished trials.
        every: seconds between tables.
        max_rows: rows of the table: running trials first, then the best finished ones.
        max_steps: each cell's ``trainer.max_steps`` (by cell name), which tells a trial that ran
            its steps (``done``) from one the scheduler stopped early (``stopped``).
    """

    def __init__(
        self,
        total: int,
        columns: list[str],
        metric: str,
        mode: str,
        every: float = 30.0,
        max_rows: int = 20,
        out: TextIO | None = None,
        max_steps: Mapping[str, int | None] | None = None,
    ) -> None:
        self.total = total
        self.columns = columns
        self.metric = metric
        self.mode = mode
        self.every = every
        self.max_rows = max_rows
        self.out = out
        self.max_steps = dict(max_steps or {})
        self._start = time.monotonic()
        self._last_table = 0.0
        self._last_line = 0.0
        self._last_counts: Counter = Counter()
        self._ended: set[str] = set()  # trials that ended on their own (not stopped with the sweep)
        self._earlier: set[str] = set()  # finished in an earlier run; Tune runs them again
        self._seen_first_step = False

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["out"] = None
        return state

    def setup(self, **info) -> None:
        """At the start of every run, a resumed one included: the clocks start now."""
        self._start = time.monotonic()
        self._last_table = self._last_line = 0.0
        self._ended, self._earlier, self._seen_first_step = set(), set(), False

    def on_step_begin(self, iteration: int, trials: list, **info) -> None:
        if not self._seen_first_step:
            self._seen_first_step = True
            self._restored(trials)

    def _restored(self, trials: list) -> None:
        """At a run's start (a resumed one: Tune hands the callbacks the trials as its saved state
        has them): the trials an earlier run ended, and those it finished after Tune's last save
        (a killed launcher), which Tune has as pending or running and runs again, and which report
        their earlier result at once (:func:`sweeps.trial.lifecycle.report_earlier_finish`)."""
        self._ended |= {t.trial_id for t in trials if t.status in ("TERMINATED", "ERROR")}
        steps = getattr(self, "max_steps", {})
        self._earlier = {
            t.trial_id
            for t in trials
            if t.status in LIVE_STATES
            and _finished_on_disk(getattr(t, "path", None), steps.get(t.config.get("cell")))
        }

    @staticmethod
    def stop_reason() -> str | None:
        """``preempted`` or ``budget`` while the sweep is being stopped so, else None."""

        meter = budget.active()
        if preemption.received():
            return "preempted"
        return "budget" if meter is not None and meter.stopping else None

    def _held(self, trials: list) -> dict[str, str]:
        """At the run's end, the trials the sweep's stop ended rather than ending on their own
        (Tune calls them TERMINATED): id -> the status results.csv gives them (``unfinished``
        after a Ctrl-C)."""
        reason = self.stop_reason() or "unfinished"
        return {
            t.trial_id: reason
            for t in trials
            if t.status in ("TERMINATED", "PENDING", "PAUSED") and t.trial_id not in self._ended
        }

    def state(self, trial: Any) -> str:
        """The trial's state as the table shows it: results.csv's status once it has ended."""
        if trial.status == "PAUSED" and trial.trial_id in held_before_start:
            return "pending"  # held before it starts, not waiting at a rung
        if trial.status in LIVE_STATES:
            return LIVE_STATES[trial.status]
        steps = getattr(self, "max_steps", {}).get(trial.config.get("cell"))  # older pickles: none
        return trial_status(trial.status, trial.last_result, steps)

    def _print(self, text: str) -> None:
        print(text, file=self.out or sys.stdout, flush=True)

    def progress_line(self, trials: list, held: dict[str, str] | None = None) -> str:
        held = held or {}
        earlier = getattr(self, "_earlier", set())  # older pickles: none

        def status(t: Any) -> str:
            if held:
                return held.get(t.trial_id, t.status)
            if earlier and t.status in LIVE_STATES and t.trial_id in earlier:
                return "TERMINATED"  # finished after Tune's last save: it re-reports at once
            if t.status == "PAUSED" and t.trial_id in held_before_start:
                return "PENDING"  # held before it starts (placement), not waiting at a rung
            return t.status

        counts = Counter(status(t) for t in trials)
        finished = counts.get("TERMINATED", 0)
        failed = counts.get("ERROR", 0)
        running = counts.get("RUNNING", 0)
        paused = counts.get(
            "PAUSED", 0
        )  # waiting at a rung (early_terminate pareto, promotion: wait)
        stopped = {
            r: counts.get(r, 0) for r in ("preempted", "budget", "unfinished") if counts.get(r)
        }
        pending = self.total - finished - failed - running - paused - sum(stopped.values())
        if stopped and pending > 0:  # never started, and will not be in this run: as results.csv
            reason = next(iter(stopped))
            stopped[reason], pending = stopped[reason] + pending, 0
        elapsed = time.monotonic() - self._start
        done = finished + failed
        eta = self._eta(trials, running, pending + paused)
        waiting = f"{paused} waiting at a rung, " if paused else ""
        held_text = "".join(f", {n} {r}" for r, n in stopped.items())
        return (
            f"[{self.total} trials] {finished} finished, {running} running, {waiting}{pending} pending, {failed} failed"
            f"{held_text} | elapsed {_duration(elapsed)}, ETA {eta if done < self.total else '0m00s'}"
        )

    def _eta(self, trials: list, running: int, pending: int) -> str:
        """Trials still to run x the mean duration of finished ones / the trials running at once."""
        durations = [
            (t.last_result or {}).get("time_total_s") for t in trials if t.status == "TERMINATED"
        ]
        durations = [d for d in durations if d]
        if not durations:
            return "?"
        mean = sum(durations) / len(durations)
        return _duration(mean * (running + pending) / max(1, running))

    def table(self, trials: list, held: dict[str, str] | None = None) -> str:
        held = held or {}
        sign = -1.0 if self.mode == "max" else 1.0

        def metric_of(t) -> float | None:
            return (t.last_result or {}).get(self.metric)

        running = [t for t in trials if t.status == "RUNNING"]
        ended = [
            t for t in trials if t.status in ("TERMINATED", "ERROR") and metric_of(t) is not None
        ]
        ended.sort(key=lambda t: sign * metric_of(t))
        shown = (running + ended)[: self.max_rows]
        header = ["trial", *self.columns, "status", self.metric, "step", "train_s"]
        rows = [header]
        for t in shown:
            r = t.last_result or {}
            rows.append(
                [
                    t.trial_id,
                    *(_cell(t.config.get(c)) for c in self.columns),
                    held.get(t.trial_id) or self.state(t),
                    _cell(r.get(self.metric)),
                    _cell(r.get("step")),
                    _cell(r.get("train_time_s")),
                ]
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        hidden = len(running) + len(ended) - len(shown)
        if hidden > 0:
            lines.append(f"... {hidden} more (running first, then finished ones by {self.metric})")
        return "\n".join(lines)

    def on_step_end(self, iteration: int, trials: list, **info) -> None:
        now = time.monotonic()
        if now - self._last_table >= self.every:
            self._last_table = self._last_line = now
            if any(t.status != "PENDING" for t in trials):
                self._print(self.table(trials))
            self._print(self.progress_line(trials))
        elif now - self._last_line >= min(10.0, self.every):
            counts = Counter(t.status for t in trials)
            if counts != self._last_counts:  # between tables, a line only when something changed
                self._last_counts, self._last_line = counts, now
                self._print(self.progress_line(trials))

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        self._ended.add(trial.trial_id)
        self._print(
            f"trial {trial.trial_id} ({trial.config.get('cell')} seed={trial.config.get('seed')}) finished: "
            f"{self.metric}={_cell((trial.last_result or {}).get(self.metric))}"
        )

    def on_trial_recover(self, iteration: int, trials: list, trial, **info) -> None:
        """A trial Tune requeued: it lost its node (a move), or it failed and is retried."""

        shown = getattr(self, "_moves_shown", {})
        if len(moves(trial)) > shown.get(trial.trial_id, 0):
            shown[trial.trial_id] = len(moves(trial))
            self._moves_shown = shown
            self._print(move_line(trial))
        else:
            self._print(
                f"trial {trial.trial_id} ({trial.config.get('cell')} seed={trial.config.get('seed')}) "
                f"failed; retried from its last checkpoint (failure {failures_this_run(trial)} of "
                f"{trial.max_failures} allowed in this run)"
            )

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        self._ended.add(trial.trial_id)
        self._print(
            f"trial {trial.trial_id} ({trial.config.get('cell')} seed={trial.config.get('seed')}) failed"
        )

    def on_experiment_end(self, trials: list, **info) -> None:
        if not self._seen_first_step:  # no step: a resume of a sweep whose every trial had ended
            self._seen_first_step = True
            self._restored(trials)
        if trials:
            held = self._held(trials)
            self._print(self.table(trials, held))
            self._print(self.progress_line(trials, held))


#: Tune's results reader (``ExperimentAnalysis``), which warns of trials it finds no metrics for
ANALYSIS_LOGGER = "ray.tune.analysis.experiment_analysis"
#: its words for a trial that has no result file yet: it had not reported
NOT_REPORTED = "were not found at"


class UnreportedTrials(logging.Filter):
    """Drops Tune's "Failed to fetch metrics for N trial(s)" warning (shown twice, with a
    ``FileNotFoundError`` per trial) where every trial it lists had not reported yet: after a stop,
    one that had just started. results.csv and the console's table list such a trial all the same
    (``unfinished``, ``budget`` or ``preempted``, no figures). A warning naming any other failure
    passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if not text.startswith("Failed to fetch metrics"):
            return True
        listed = text.splitlines()[1:]
        return not listed or not all(NOT_REPORTED in line for line in listed)


#: Tune's run loop, which ends a stopped run with its own way to resume it
RUN_LOGGER = "ray.tune.tune"
#: the start of that warning ("... saved.\nResume experiment with: Tuner.restore(path=...)")
INTERRUPTED = "Experiment has been interrupted"


#: the start of Tune's warning on SIGINT ("... ending Ray Tune run. ... Press CTRL+C ... to skip")
STOP_SIGNAL = "Stop signal received"


class TunersResumeAdvice(logging.Filter):
    """Drops Tune's "Experiment has been interrupted, but the most recent state was saved. Resume
    experiment with: Tuner.restore(...)": a stopped launch prints the command that continues the
    sweep (``--resume``), and ``Tuner.restore`` alone would not (it knows nothing of the plan, the
    stages after training, the results). Drops Tune's "Stop signal received (e.g. via
    SIGINT/Ctrl+C)" too where the launcher sent that signal itself (a preemption, a spent budget,
    each said in its own line): no one pressed Ctrl-C. After a real Ctrl-C it stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text.startswith(STOP_SIGNAL):
            return not preemption.launcher_stopped()
        return not text.startswith(INTERRUPTED)


#: Tune's lines about its own bookkeeping that ask nothing of a user of the launcher, by logger:
#: the experiment-state snapshot that the launch's checkpoints force after a burst of reports (what
#: keeps ``--resume`` exact; a warning about its cost, milliseconds on local storage); a paused
#: trial's result file not yet copied to storage as it resumes (its log continues where it was);
#: the run loop's "Wrote the latest version of all result files ..." (the launch says what it wrote)
#: and its "Trials did not complete: [run_trial_...]" (an ERROR line after every stop: the launch
#: counts the unfinished trials, lists each failed one with its error and says how to continue);
#: the controller's "Restoring the run from the latest experiment state file: ..." (the launch says
#: what it resumes)
ROUTINE = {
    "ray.tune.execution.experiment_state": ("Experiment state snapshotting has been triggered",),
    "ray.tune.logger.logger": ("Remote file not found",),
    RUN_LOGGER: ("Wrote the latest version of all result files", "Trials did not complete"),
    "ray.tune.execution.tune_controller": ("Restoring the run from the latest experiment state",),
}


class Routine(logging.Filter):
    """Drops the records that start with one of ``starts`` (:data:`ROUTINE`)."""

    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.starts)


#: Ray's driver-side logger of errors in tasks whose result no one read
UNHANDLED_LOGGER = "ray._private.worker"


class StoppedTrialErrors(logging.Filter):
    """Drops Ray's "Unhandled error ... ActorDiedError" where a trial's process was killed with
    the result of its training call unread: a second Ctrl-C makes Tune stop at once, and each
    member of a fused group running then printed its traceback (about 40 lines a group) after
    Tune's own stop line. Tune reads every result it waits for, so no other failure ends up
    here; the launch says what the stop left (``unfinished`` rows, the ``--resume`` command)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        died = "ActorDiedError" in text or "The actor died unexpectedly" in text
        return not (text.startswith("Unhandled error") and died)


def quiet_stopped_trials() -> None:
    """:class:`StoppedTrialErrors` on Ray's logger, for the rest of the process (once): Ray
    reports an unread result when its reference is collected, which can be after the Tune run,
    even at the process's exit."""
    logger = logging.getLogger(UNHANDLED_LOGGER)
    if not any(isinstance(f, StoppedTrialErrors) for f in logger.filters):
        logger.addFilter(StoppedTrialErrors())


#: Optuna's ``tell``, whose INFO line a resumed trial's repeated last report brings: the searcher
#: tells a trial again on purpose (``skip_if_finished``), and the first telling stands
OPTUNA_TELL_LOGGER = "optuna.study._tell"
OPTUNA_SKIPPED = "Skipped telling trial"


@contextlib.contextmanager
def quiet_unreported() -> Iterator[None]:
    """While Tune runs and its results are read: :class:`UnreportedTrials` on its reader's log,
    :class:`TunersResumeAdvice` on its run loop's, :class:`Routine` on the loggers of
    :data:`ROUTINE`, and on Optuna's ``tell`` (:data:`OPTUNA_SKIPPED`)."""
    filters = [
        (logging.getLogger(ANALYSIS_LOGGER), UnreportedTrials()),
        (logging.getLogger(RUN_LOGGER), TunersResumeAdvice()),
        *((logging.getLogger(name), Routine(starts)) for name, starts in ROUTINE.items()),
        (logging.getLogger(OPTUNA_TELL_LOGGER), Routine((OPTUNA_SKIPPED,))),
    ]
    for logger, quiet in filters:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger, quiet in filters:
            logger.removeFilter(quiet)


#: Tune's choice of console engine: "0" the legacy one, silent at ``verbose=0``; the newer one
#: prints its "Configuration for experiment" box (SearchGenerator, SweepFIFO: the launcher's
#: internals) and a TensorBoard command for a staging folder under /tmp/ray even at ``verbose=0``
NEW_OUTPUT_ENV = "RAY_AIR_NEW_OUTPUT"


@contextlib.contextmanager
def tune_reporter(verbose: int) -> Iterator[None]:
    """Below ``verbose`` 2, Tune prints nothing of its own while the block runs (the launcher's
    console, :class:`SweepConsole`, says what happens); at 2 its own reporter too. The setting is
    the driver's own: set after Ray started, so no trial process sees it."""
    before = os.environ.get(NEW_OUTPUT_ENV)
    if verbose < 2:
        os.environ[NEW_OUTPUT_ENV] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(NEW_OUTPUT_ENV, None)
        else:
            os.environ[NEW_OUTPUT_ENV] = before
