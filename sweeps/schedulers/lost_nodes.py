"""A trial whose node is lost (a spot node reclaimed, a machine that died, a node drained for
preemption) moves: it continues from its last checkpoint on another node, and the move is not a
failure, so it is not charged against ``failure.max_failures``.

Ray Tune counts every death of a trial's actor as a failure, except where Ray marks the node
*preempted* (drained by an autoscaler for preemption, ``RayActorError.preempted``). A node that
simply disappears is not marked so, and with ``max_failures: 0`` the trial would end in ``error``.
Tune decides in ``Trial.handle_error`` (which counts) and ``Trial.should_recover`` (which compares
the count with ``max_failures``), before any callback hears of the failure; so the driver hands
Tune its trials as :class:`MovableTrial`, a ``Trial`` whose ``handle_error`` records a lost node
as a move instead of counting it. Tune then requeues the trial as for a retry, and it restores
from its checkpoint wherever Ray places it. Every trial passes through the scheduler's
``on_trial_add`` (new trials and those read back by ``--resume`` alike), which is where
:func:`adopt` is called (:mod:`sweeps.schedulers.per_unit`).

The same class keeps Tune from retrying a failure that a retry would only repeat
(:class:`~sweeps.errors.NotRetried`: a student whose teacher failed, float16 mixed precision on a
CPU): its ``should_recover`` says no for it, so the trial ends in ``error`` at once and
``failure.max_failures`` is left to the failures a retry can get past.

The moves are kept on the trial (``sweep_moves``, a list of ``{"why", "step"}``), so they are
saved with the experiment's state and read back by the results (:mod:`sweeps.report.results`:
the ``moved`` and ``moved_why`` columns) and the console (:mod:`sweeps.driver.console`).

``failure.max_failures`` counts the failures of each run of the sweep. Tune keeps a trial's
count and its ``max_failures`` in the state a ``--resume`` reads back, and the restored run's own
settings: a trial that ended in ``error`` after its retries got one attempt on ``--resume``, none
retried, and a larger ``--set failure.max_failures`` was not read. The driver names the run's
allowance while Tune runs (:func:`failures_allowed`); :func:`adopt` gives it to each trial with
the count it arrived with, and ``should_recover`` counts from there.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from ray.exceptions import NodeDiedError, RayActorError, RayTaskError
from ray.tune.experiment import Trial

from sweeps.errors import NotRetried

#: the trial attribute that holds its moves (saved with the experiment's state)
MOVES = "sweep_moves"
#: this run's ``failure.max_failures`` (:func:`allow_failures`; None: each trial's own, as Tune
#: made it), in the driver, whose controller adopts the trials
_ALLOWED: list[int | None] = [None]
# Ray's words (the GCS's death cause of an actor whose node died, Ray 2.60)
_NODE_DIED = re.compile(r"its node has died\. Node Id: (?P<node>[0-9a-f]+)")
_NODE_END = re.compile(r"the actor's node was (?P<how>terminated[^\n]*)")


def node_loss(exc: BaseException | None, node_id: str | None = None) -> str | None:
    """Why ``exc`` (what Tune got from a trial) is the loss of the trial's node, in a few words, or
    None when it is a failure of the trial itself. ``node_id`` is the node the trial last
    reported from; it counts as lost when Ray's node table says it is dead or its raylet no
    longer accepts a connection (:func:`_node_answers`)."""
    if isinstance(exc, RayTaskError) and isinstance(exc.cause, RayActorError):
        exc = exc.cause  # e.g. a Ray Train worker's actor, as Tune reads it
    if isinstance(exc, NodeDiedError):
        return "its node died"
    if not isinstance(exc, RayActorError):
        return None
    text = str(exc)
    died = _NODE_DIED.search(text)
    if getattr(exc, "preempted", False):
        node = died.group("node") if died else node_id
        return f"node {node[:8]} was preempted" if node else "its node was preempted"
    if died:
        end = _NODE_END.search(text)
        return f"node {died.group('node')[:8]} was lost" + (
            f" ({end.group('how').strip()})" if end else ""
        )
    if node_id and not _node_answers(node_id):
        return f"node {node_id[:8]} was lost"
    return None  # the process died on a live node (killed, out of memory): a failure


def _node_answers(node_id: str, timeout: float = 2.0) -> bool:
    """Whether the node is alive in Ray's node table and its raylet accepts a connection.

    The table alone is late: when a node's Ray dies with it (a machine gone, its processes
    killed), the driver loses the connection to the trial at once (``ActorUnavailableError``,
    "Connection reset by peer"), while the GCS marks the node dead only after its health checks
    have failed for some seconds; until then a lost node would be counted as the trial's failure.
    """
    import socket

    import ray

    try:
        node = next((n for n in ray.nodes() if n.get("NodeID") == node_id), None)
    except Exception:  # noqa: BLE001 -- cannot tell: count it, as Tune would
        return True
    if node is None or not node.get("Alive"):
        return False
    address, port = node.get("NodeManagerAddress"), node.get("NodeManagerPort")
    if not address or not port:
        return True  # cannot tell
    try:
        with socket.create_connection((address, int(port)), timeout=timeout):
            return True
    except OSError:  # refused (its raylet is gone) or no answer (its machine is)
        return False


def not_retried(exc: BaseException | None) -> bool:
    """Whether ``exc`` (what Tune got from a trial) is a :class:`~sweeps.errors.NotRetried`, raised
    in the trial's own process (where Ray hands it over as a ``RayTaskError`` around it)."""
    cause = exc.cause if isinstance(exc, RayTaskError) else None
    return isinstance(exc, NotRetried) or isinstance(cause, NotRetried)


class MovableTrial(Trial):
    """A Tune trial that moves when its node is lost, rather than failing, and is not retried for
    a failure a retry would repeat (module docstring)."""

    #: the last failure was a :class:`~sweeps.errors.NotRetried` (set by each ``handle_error``)
    sweep_not_retried = False
    #: the failures counted before this run of the sweep (set by :func:`adopt`)
    sweep_failed_before = 0

    def should_recover(self) -> bool:
        if self.sweep_not_retried:
            return False
        return self.max_failures < 0 or failures_this_run(self) <= self.max_failures

    def handle_error(self, exc: BaseException | None = None) -> None:
        self.sweep_not_retried = not_retried(exc)
        last = self.last_result or {}
        why = node_loss(exc, last.get("node_id"))
        if why is None:
            super().handle_error(exc)
            return
        latest = self.run_metadata.checkpoint_manager.latest_checkpoint_result
        step = (latest.metrics or {}).get("step") if latest is not None else None
        setattr(self, MOVES, [*moves(self), {"why": why, "step": step}])
        self.invalidate_json_state()  # the moves are saved with the trial's state
        self.run_metadata.invalidate_cache()


def adopt(trial: Any) -> None:
    """Make a Tune trial a :class:`MovableTrial` (the same object: only its class changes), with
    this run's ``failure.max_failures`` (:func:`allow_failures`)."""
    if type(trial) is Trial:
        trial.__class__ = MovableTrial
    if isinstance(trial, MovableTrial):  # this run's allowance, counted from what it arrived with
        trial.sweep_failed_before = trial.run_metadata.num_failures
        if _ALLOWED[0] is not None:
            trial.max_failures = _ALLOWED[0]


def allow_failures(max_failures: int | None) -> None:
    """Each trial Tune is given from now on (new, or read back by ``--resume``) may fail
    ``max_failures`` times more and be retried (the sweep's ``failure.max_failures``; None: as
    Tune made the trial)."""
    _ALLOWED[0] = max_failures


@contextlib.contextmanager
def failures_allowed(max_failures: int) -> Iterator[None]:
    """:func:`allow_failures` while a Tune run lasts (its controller adopts the trials), as Tune
    makes the trials again after it: nothing of one launch holds for the next in the process."""
    allow_failures(max_failures)
    try:
        yield
    finally:
        allow_failures(None)


def failures_this_run(trial: Any) -> int:
    """The trial's failures since this run of the sweep was given it."""
    return trial.run_metadata.num_failures - getattr(trial, "sweep_failed_before", 0)


def moves(trial: Any) -> list[dict[str, Any]]:
    """A trial's moves so far, oldest first (``[]`` for one that never lost its node)."""
    return list(getattr(trial, MOVES, None) or [])


def move_line(trial: Any) -> str:
    """The console's line for a trial's latest move."""
    last = moves(trial)[-1]
    where = (
        f"from its checkpoint at step {last['step']}"
        if last.get("step") is not None
        else "from the start (no checkpoint yet)"
    )
    return (
        f"trial {trial.trial_id} ({trial.config.get('cell')} seed={trial.config.get('seed')}): "
        f"{last['why']}; it continues {where} on another node "
        f"(a move, not a failure: failure.max_failures is not charged)"
    )


def moved_summary(df: Any) -> str | None:
    """The launcher's closing line on the trials that moved (results.csv's ``moved``), or None."""
    if df.empty or "moved" not in df:
        return None
    moved = df[df["moved"].fillna(0) > 0]
    if moved.empty:
        return None
    return (
        f"{len(moved)} trial(s) lost their node and continued from a checkpoint on another "
        f"({int(moved['moved'].sum())} move(s); not failures, results.csv's moved and moved_why "
        "columns): "
        + ", ".join(f"{r.cell} seed={r.seed} ({r.moved_why})" for r in moved.itertuples())
    )
