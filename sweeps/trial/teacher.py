"""A student trial whose teacher failed: it ends at once, with the reason.

The searcher (:mod:`sweeps.search.teachers`) gives such a trial ``teacher_error`` in its config
instead of a checkpoint. The trainable reports that reason once (with the sweep's metric as NaN,
so Tune and its schedulers take the report, and the searcher tells Optuna FAIL) and returns: no
model is built, nothing is retried, no W&B run is made. Its results row says ``error`` with the
reason (:func:`sweeps.report.results.row_from_result`).
"""

from __future__ import annotations

from typing import Any

#: the config key, the report's key and the results row's reason
TEACHER_ERROR = "teacher_error"


def end_without_teacher(config: dict[str, Any], metric: str) -> bool:
    """Report the trial's ``teacher_error`` and return True (the trainable returns), or False
    for a trial that may train."""
    reason = config.get(TEACHER_ERROR)
    if not reason:
        return False
    from ray import tune

    print(f"[trial] not trained: {reason}", flush=True)
    tune.report({metric: float("nan"), TEACHER_ERROR: str(reason), "step": 0})
    return True
