"""What counts as a lost node (a move, not charged against ``failure.max_failures``) and what is a
failure of the trial itself: on the errors Ray raises, built as Ray builds them (the end-to-end
checks: a node removed from a ray.cluster_utils cluster, test_cluster's ``lost_node`` sweep; a
node's Ray killed under a real two-node SLURM, tests/cluster/test_slurm_two_nodes.py)."""

from __future__ import annotations

import socket

import pandas as pd
import pytest

pytest.importorskip("ray")

from ray.core.generated.common_pb2 import ActorDiedErrorContext, NodeDeathInfo  # noqa: E402
from ray.exceptions import (  # noqa: E402
    ActorDiedError,
    ActorUnavailableError,
    RayActorError,
    RayTaskError,
)
from ray.tune import PlacementGroupFactory  # noqa: E402
from ray.tune.experiment import Trial  # noqa: E402

from sweeps.errors import CpuPrecisionError, GpuTorchError, TeacherFailed  # noqa: E402
from sweeps.report.results import moved_columns  # noqa: E402
from sweeps.schedulers.lost_nodes import MovableTrial, adopt, moved_summary, node_loss  # noqa: E402

NODE = "6a4be082a2e7b9db0fd668c797ebbf055e7fc76b2ea6ef83f651e3c9"


def actor_died(message: str, reason: int = NodeDeathInfo.UNEXPECTED_TERMINATION) -> ActorDiedError:
    """An ``ActorDiedError`` as the driver gets it from Ray's GCS (Ray 2.60's wording)."""
    return ActorDiedError(
        ActorDiedErrorContext(
            error_message=message,
            actor_id=b"\x01" * 16,
            class_name="ImplicitFunc",
            node_death_info=NodeDeathInfo(reason=reason),
        )
    )


NODE_DIED = (
    f"The actor died because its node has died. Node Id: {NODE}\n"
    "\tthe actor's node was terminated expectedly: received SIGTERM"
)


def test_a_node_that_died_is_a_move_and_says_which_node_and_how():
    assert node_loss(actor_died(NODE_DIED)) == (
        "node 6a4be082 was lost (terminated expectedly: received SIGTERM)"
    )


def test_a_preempted_node_is_a_move():
    exc = actor_died(NODE_DIED, NodeDeathInfo.AUTOSCALER_DRAIN_PREEMPTED)
    assert exc.preempted
    assert node_loss(exc) == "node 6a4be082 was preempted"


def test_a_trial_that_failed_on_a_live_node_is_a_failure():
    """A process killed on its node (out of memory, a crash) and an exception in the trial's own
    code are failures: counted against max_failures as before."""
    killed = actor_died("The actor is dead because its worker process has died.")
    assert node_loss(killed) is None
    assert node_loss(ValueError("loss is NaN")) is None
    assert node_loss(None) is None
    wrapped = RayTaskError("run_trial", "Traceback ...", ValueError("loss is NaN"))
    assert node_loss(wrapped) is None


def test_a_node_whose_raylet_no_longer_answers_is_lost_before_ray_marks_it_dead(monkeypatch):
    """When a node's Ray dies (its machine gone, its processes killed), the driver hears of it first
    as a broken connection to the trial, seconds before the GCS's health checks mark the node dead
    (seen under a real two-node SLURM). A node still alive in Ray's node table whose raylet
    refuses connections is lost; one whose raylet answers is not: the trial failed there."""
    unavailable = ActorUnavailableError(
        "The actor is temporarily unavailable: RpcError: RPC error: Socket closed rpc_code: 14",
        b"\x01" * 16,
    )
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        for raylet, lost in ((listening, False), (closed, True)):
            table = [
                {
                    "NodeID": NODE,
                    "Alive": True,
                    "NodeManagerAddress": "127.0.0.1",
                    "NodeManagerPort": raylet.getsockname()[1],
                }
            ]
            monkeypatch.setattr("ray.nodes", lambda table=table: table)
            assert node_loss(unavailable, NODE) == (f"node {NODE[:8]} was lost" if lost else None)
            assert node_loss(unavailable) is None  # no node to ask: a failure, as Tune counts it
        monkeypatch.setattr("ray.nodes", lambda: [{"NodeID": NODE, "Alive": False}])
        assert node_loss(unavailable, NODE) == f"node {NODE[:8]} was lost"


def test_an_actor_error_inside_a_task_error_is_read_for_its_cause():
    wrapped = RayTaskError("train", "Traceback ...", RayActorError(error_msg=NODE_DIED))
    assert node_loss(wrapped).startswith("node 6a4be082 was lost")


def test_a_moved_trial_is_not_charged_and_keeps_its_moves_in_its_saved_state():
    """The scheduler adopts every trial; a lost node then records a move, the failure count stays
    at 0 (so Tune's should_recover holds with max_failures 0), and the move survives the trial's
    saved state (what --resume reads back)."""
    trial = Trial(
        "run_trial",
        config={"cell": "attention=none", "seed": 0},
        stub=True,
        placement_group_factory=PlacementGroupFactory([{"CPU": 1}]),
    )
    trial.create_placement_group_factory()  # as Tune's controller does when the trial is added
    adopt(trial)
    assert type(trial) is MovableTrial
    trial.handle_error(actor_died(NODE_DIED))
    assert trial.num_failures == 0 and trial.should_recover()
    assert moved_columns(trial) == {
        "moved": 1,
        "moved_why": "node 6a4be082 was lost (terminated expectedly: received SIGTERM)",
    }
    state, _ = trial.get_json_state()
    back = Trial.from_json_state(state, stub=True)
    assert moved_columns(back)["moved"] == 1
    adopt(back)
    assert type(back) is MovableTrial


def failing_trial(cell: str) -> Trial:
    """A stub trial of ``cell`` that Tune retries twice (``failure.max_failures: 2``)."""
    return Trial(
        "run_trial",
        config={"cell": cell, "seed": 0},
        stub=True,
        placement_group_factory=PlacementGroupFactory([{"CPU": 1}]),
        max_failures=2,
    )


def test_a_failure_its_retry_would_repeat_is_not_retried_and_others_still_are(monkeypatch):
    """A student whose teacher failed was retried up to ``failure.max_failures`` times, failing
    the same way each time (float16 mixed precision on a CPU too). Tune hands such a failure over
    as Ray does, a ``RayTaskError`` around the trial's own exception (or Ray's subclass of both):
    the trial is not retried. Any other failure still is, a GPU its torch cannot use among them
    (another node may have a torch that can)."""
    trial = failing_trial("attention=memory")
    # Tune's handle_error also writes the error beside the trial, in a Ray session's staging
    # folder; a trial of no folder writes none (the counting and should_recover are Tune's own)
    monkeypatch.setattr(MovableTrial, "local_path", None)
    trial.create_placement_group_factory()
    adopt(trial)
    for error in (TeacherFailed("its teacher failed"), CpuPrecisionError("float16 on a CPU")):
        wrapped = RayTaskError("run_trial", "Traceback ...", error)
        for exc in (wrapped, wrapped.as_instanceof_cause()):
            trial.handle_error(exc)
            assert not trial.should_recover(), exc
    for error in (RuntimeError("loss is NaN"), GpuTorchError("a CPU-only torch")):
        trial.run_metadata.num_failures = 0
        trial.handle_error(RayTaskError("run_trial", "Traceback ...", error))
        assert trial.num_failures == 1 and trial.should_recover(), error


def test_the_closing_line_names_the_moved_trials():
    df = pd.DataFrame(
        [
            {
                "cell": "attention=none",
                "seed": 0,
                "moved": 1,
                "moved_why": "node 6a4be082 was lost",
            },
            {"cell": "attention=bahdanau", "seed": 0, "moved": 0, "moved_why": None},
        ]
    )
    line = moved_summary(df)
    assert line.startswith("1 trial(s) lost their node") and "attention=none seed=0" in line
    assert "bahdanau" not in line
    assert moved_summary(df.iloc[1:]) is None


def test_each_run_of_a_sweep_allows_its_own_failure_max_failures(monkeypatch):
    """Tune keeps a trial's failure count and its max_failures in the state a --resume reads back:
    a trial that ended in error after its 2 retries got one attempt on --resume, none retried, and
    `--resume --set failure.max_failures=5` changed nothing. Each run now allows its own, counted
    from the failures the trial arrived with; every scheduler the sweeps use adopts its trials
    (the configurations' ASHA did not: its trials' lost nodes were failures)."""
    from sweeps.schedulers import lost_nodes
    from sweeps.schedulers.config_rungs import ConfigRungs

    monkeypatch.setattr(lost_nodes, "_ALLOWED", [None])  # the driver's setting, put back after
    monkeypatch.setattr(MovableTrial, "local_path", None)  # no folder: no error file (as above)
    first = failing_trial("attention=none")
    first.create_placement_group_factory()
    lost_nodes.allow_failures(2)
    adopt(first)
    fails = lambda t: t.handle_error(RayTaskError("run_trial", "...", RuntimeError("NaN")))  # noqa: E731
    for _ in range(2):
        fails(first)
        assert first.should_recover()
    fails(first)
    assert not first.should_recover()  # the first run: 2 retries, then error

    def read_back(trial):  # as Tune's controller restores a trial on --resume
        state, metadata = trial.get_json_state()
        back = Trial.from_json_state(state, stub=True)
        back.restore_run_metadata(metadata)
        return back

    back = read_back(first)
    assert (back.num_failures, back.max_failures) == (3, 2)  # as Tune saved it

    lost_nodes.allow_failures(5)  # --resume --set failure.max_failures=5
    ConfigRungs("val/bleu", "max", 2, 1, 2.0, 3, 30, {}).on_trial_add(None, back)
    assert type(back) is MovableTrial and back.max_failures == 5
    for n in range(1, 6):
        fails(back)
        assert back.should_recover() and lost_nodes.failures_this_run(back) == n
    fails(back)
    assert not back.should_recover()
    # a run that names no allowance leaves Tune's, counted from the trial's arrival all the same
    lost_nodes.allow_failures(None)
    again = read_back(back)
    adopt(again)
    assert again.max_failures == 5 and lost_nodes.failures_this_run(again) == 0
    # the driver's allowance lasts as long as its Tune run: the next launch in the process (a
    # test's) adopts its trials as Tune made them
    with lost_nodes.failures_allowed(0):
        adopt(again)
        assert again.max_failures == 0
    assert lost_nodes._ALLOWED == [None]
