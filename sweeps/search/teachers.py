"""Students held back until their teacher is done, inside the sweep's one Tune run.

A sweep whose cells name teachers (:mod:`sweeps.spec.teachers`) still runs as one Tune
experiment. :class:`TeacherBook` is a gate of its searcher (:mod:`sweeps.search.gates`): a student
unit (cell, seed) is not handed out while its teacher unit has trials left to start or finish
(``suggest`` returns None: "nothing now", and Tune asks again when a trial ends), so the other
cells fill the free CPUs and GPUs meanwhile; teacher units are handed out before all others. A
fused group of students goes out when every member's teacher unit has ended; each member gets its
own teacher. When every trial of the teacher unit has ended, each student trial gets in its config
the chosen teacher's trial id (``teacher``) and its final checkpoint (``teacher_checkpoint``),
which the trial writes into its plan as ``model.teacher_checkpoint``. If no teacher trial
finished with the sweep's metric, the student gets ``teacher_error`` instead, a one-line reason,
and fails at once with it (its results row: ``error``).

The book is part of the searcher's saved state, so a resumed sweep knows which teachers are done
and trains none of them again; the checkpoints and errors come from :class:`TeacherLinks`, a Tune
callback (Tune hands a searcher neither), and from the rows a warm start reuses
(:meth:`TeacherBook.adopt`). A teacher trial that failed runs again on ``--resume``
(:meth:`TeacherBook.reopen`): its students wait for it once more, and a student that failed for
want of it is handed out again, with a new config, once it has ended
(:meth:`sweeps.search.base.SweepSearcher.comeback`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray import cloudpickle
from ray.tune import Callback

from sweeps.layout import checkpoint_path
from sweeps.search.gates import Gate
from sweeps.spec.teachers import best_scored


class TeacherBook(Gate):
    """Which units teach which, and what each teacher trial left.

    Args:
        teacher_of: per unit (the sweep's plans' order) the index of its teacher unit, or None.
        labels: per unit a readable name (``<cell> seed=<n>``), for the reasons given.
        samples: trials per unit (every one must end before its students start).
        metric, mode: what ``pick: best`` maximises ("max") or minimises ("min").
    """

    def __init__(
        self, teacher_of: list[int | None], labels: list[str], samples: int, metric: str, mode: str
    ) -> None:
        self.teacher_of = teacher_of
        self.labels = labels
        self.samples = samples
        self.metric, self.mode = metric, mode
        self.teaching = {t for t in teacher_of if t is not None}
        #: teacher unit -> trial id -> (the metric's last value or None, failed)
        self.outcomes: dict[int, dict[str, tuple[float | None, bool]]] = {}
        #: trial id -> its latest checkpoint file; trial id -> the last line of its error
        self.checkpoints: dict[str, str] = {}
        self.errors: dict[str, str] = {}

    kind = "teachers"

    @classmethod
    def of(cls, units: list[Any], samples: int, metric: str, mode: str) -> TeacherBook | None:
        """The book of ``units`` (:class:`sweeps.plan.units.Unit`), None when no unit has a teacher."""
        teacher_of = [getattr(u, "teacher", None) for u in units]
        if all(t is None for t in teacher_of):
            return None
        labels = [f"{u.config.get('cell')} seed={u.seed}" for u in units]
        return cls(teacher_of, labels, samples, metric, mode)

    # -- what the searcher asks --------------------------------------------------------------

    def teaches(self, unit: int) -> bool:
        return unit in self.teaching

    def first(self, unit: int) -> bool:
        return self.teaches(unit)

    def ready(self, unit: int) -> bool:
        return not self.waiting(unit)

    def waiting(self, unit: int) -> bool:
        """Whether ``unit``'s trials must wait: its teacher unit has trials that did not end."""
        teacher = self.teacher_of[unit]
        return teacher is not None and len(self.outcomes.get(teacher, {})) < self.samples

    def assignment(self, unit: int) -> dict[str, Any]:
        """What a student trial of ``unit`` adds to its config: ``teacher`` and
        ``teacher_checkpoint``, or ``teacher_error`` (with ``teacher`` when one was chosen)."""
        teacher = self.teacher_of[unit]
        if teacher is None:
            return {}
        ended = self.outcomes.get(teacher, {})
        scored = [(tid, v) for tid, (v, failed) in ended.items() if not failed and v is not None]
        label = self.labels[teacher]
        if not scored:
            failed = next(iter(ended), None)
            why = self.errors.get(failed) or "it reported no " + self.metric
            return {
                "teacher": failed,
                "teacher_error": f"its teacher ({label}) failed: trial {failed}: {why}",
            }
        best = best_scored(scored, self.mode)
        checkpoint = self.checkpoints.get(best)
        if not checkpoint:
            return {
                "teacher": best,
                "teacher_error": f"its teacher ({label}) trial {best} left no checkpoint",
            }
        return {"teacher": best, "teacher_checkpoint": checkpoint}

    # -- what Tune and a warm start tell it --------------------------------------------------

    def note(self, unit: int, trial_id: str, result: dict | None, error: bool) -> None:
        """A trial of ``unit`` ended (Tune's ``on_trial_complete``)."""
        if unit not in self.teaching:
            return
        value = (result or {}).get(self.metric)
        self.outcomes.setdefault(unit, {})[trial_id] = (
            None if value is None else float(value),
            bool(error),
        )

    def reopen(self, unit: int, trial_id: str) -> None:
        """A teacher trial that failed runs again (``--resume``): its students wait for it."""
        if unit in self.teaching:
            self.outcomes.get(unit, {}).pop(trial_id, None)
            self.errors.pop(trial_id, None)

    def adopt(self, reused: dict[int, list[dict[str, Any]]]) -> None:
        """The trials a warm start reuses (per unit, their results rows), as ended teacher trials."""
        for unit, rows in reused.items():
            for row in rows:
                if unit in self.teaching and row.get("checkpoint"):
                    self.checkpoints[str(row["trial_id"])] = str(row["checkpoint"])
                self.note(unit, str(row["trial_id"]), row, error=False)

    def state(self) -> dict[str, Any]:
        return {"outcomes": self.outcomes, "checkpoints": self.checkpoints, "errors": self.errors}

    def load(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.outcomes = state.get("outcomes", {})
        self.checkpoints = state.get("checkpoints", {})
        self.errors = state.get("errors", {})


class TeacherLinks(Callback):
    """Records what Tune tells callbacks but not searchers, for the trials of teacher units: each
    one's latest checkpoint file and, when it fails, the last line of its error."""

    def __init__(self, searcher: Any) -> None:
        self.searcher = searcher

    def _book_of(self, trial) -> TeacherBook | None:
        book = getattr(self.searcher, "teachers", None)
        entry = getattr(self.searcher, "live", {}).get(trial.trial_id)
        if book is None or entry is None or not book.teaches(entry[0]):
            return None
        return book

    def on_checkpoint(self, iteration: int, trials: list, trial, checkpoint, **info) -> None:
        book = self._book_of(trial)
        if book is not None:
            book.checkpoints[trial.trial_id] = checkpoint_path(checkpoint.path)

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        book = getattr(self.searcher, "teachers", None)
        if book is not None:
            book.errors[trial.trial_id] = last_error_line(trial)


def last_error_line(trial) -> str:
    """The last line of a failed trial's error, as results.csv's ``error`` column shows it. Read
    from the driver's own copy (Tune writes it there first; the storage copy follows later)."""
    error = None
    try:
        if trial.pickled_error_file and Path(trial.pickled_error_file).is_file():
            with open(trial.pickled_error_file, "rb") as f:
                error = cloudpickle.load(f)
        elif trial.error_file and Path(trial.error_file).is_file():
            error = Path(trial.error_file).read_text()
    except Exception:  # noqa: BLE001 -- a reason we cannot read is said, not raised
        error = None
    lines = [line for line in str(error or "").strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "it failed")[:300]


def teacher_callbacks(searcher: Any) -> list[Callback]:
    """The callbacks a searcher with students needs (none for one without)."""
    return [TeacherLinks(searcher)] if getattr(searcher, "teachers", None) is not None else []
