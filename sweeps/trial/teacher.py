"""A student trial whose teacher failed: it fails at once, with the reason.

The searcher (:mod:`sweeps.search.teachers`) gives such a trial ``teacher_error`` in its config
instead of a checkpoint. The trainable reports that reason once (with the sweep's metric as NaN,
so Tune and its schedulers take the report) and raises :class:`~sweeps.errors.TeacherFailed`: no
model is built, the searcher tells Optuna FAIL. Its results row says ``error`` with the reason
(:func:`sweeps.report.results.row_from_result`), and the launcher opens its W&B run, failed, at
the launch's end (:func:`sweeps.stages.publish.publish_failed`). A failed trial is one that
``--resume`` runs again: once the teacher has run again and ended, the searcher hands the student
out anew, with its teacher (:meth:`sweeps.search.base.SweepSearcher.comeback`).
"""

from __future__ import annotations

from typing import Any

from ray import tune

from sweeps.errors import TeacherFailed

#: the config key, the report's key and the results row's reason
TEACHER_ERROR = "teacher_error"


def end_without_teacher(config: dict[str, Any], metric: str) -> None:
    """For a trial whose config holds ``teacher_error``: report it and raise
    :class:`~sweeps.errors.TeacherFailed` with it. A trial that may train passes."""
    reason = config.get(TEACHER_ERROR)
    if not reason:
        return
    print(f"[trial] not trained: {reason}", flush=True)
    tune.report({metric: float("nan"), TEACHER_ERROR: str(reason), "step": 0})
    raise TeacherFailed(str(reason))
