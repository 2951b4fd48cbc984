"""The launcher's watch on the Ray cluster's head: its GCS asked, every few seconds, whether it
is there.

When the head node dies (or its Ray is stopped), Ray's own client in the launcher waits for the GCS
``gcs_rpc_server_reconnect_timeout_s`` (60 s by default) and then ends the process from its C++
side ("Failed to connect to GCS within 60 seconds ... The program will terminate"): exit status 1,
no line of the launcher's own, no resume command, although nothing finished is lost and
``--resume`` continues the sweep on a new head. The watch ends the launcher before that, once the
GCS has not answered for two thirds of Ray's wait (40 s by default; a GCS restarted by Ray's fault
tolerance within it is waited for), with one line naming what happened and the command that
continues, and the exit status of a preemption (75: "try again later", for a batch script to
requeue on). Nothing more can be written then: the trials' results are Tune's, whose controller waits
on the lost GCS.

The probe is one ``GetClusterId`` call to the GCS, the launcher's address check's
(:func:`sweeps.driver.cluster.what_answers`): any answer, an authentication error included, is an
answer. Not for Ray Client (``ray://``, where Tune runs on the head) nor under TLS, which this
plain channel cannot speak.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

from sweeps.driver.cluster import NO_PROXY

#: Ray's wait for a lost GCS (``RAY_gcs_rpc_server_reconnect_timeout_s``) when not set
RAY_RECONNECT_S = 60.0
#: once the launch is stopping (a signal, Ctrl-C, the budget), a GCS silent this long is lost: a
#: signal sent to the launcher's whole process group stops the local Ray's processes too, and the
#: stop that was asked for within seconds would otherwise wait out Ray's reconnection
STOPPING_LOST_S = 5.0
#: ... asked this often then
STOPPING_EVERY_S = 1.0


def reconnect_timeout() -> float:
    """Ray's wait for a lost GCS in this process (its environment variable, else 60 s)."""
    try:
        return float(os.environ.get("RAY_gcs_rpc_server_reconnect_timeout_s", RAY_RECONNECT_S))
    except ValueError:
        return RAY_RECONNECT_S


def gcs_answers(address: str, timeout: float) -> bool:
    """Whether the GCS at ``HOST:PORT`` answers a ``GetClusterId`` call within ``timeout``."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc  # docs/internals.md

    with grpc.insecure_channel(address, options=NO_PROXY) as channel:
        try:
            gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(
                gcs_service_pb2.GetClusterIdRequest(), timeout=timeout
            )
        except grpc.RpcError as exc:
            return exc.code() not in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
            )
    return True


class GcsWatch:
    """A daemon thread that asks the GCS at ``address`` whether it is there every ``every``
    seconds and calls ``on_lost(seconds)`` once, from the thread, when it has not answered for
    ``lost_after`` seconds. ``lost_after`` defaults to two thirds of Ray's own wait
    (:func:`reconnect_timeout`), ``every`` to a quarter of that, at most 5 s. While ``stopping()``
    says the launch is stopping, it asks every :data:`STOPPING_EVERY_S` and a GCS silent for
    :data:`STOPPING_LOST_S` is lost."""

    def __init__(
        self,
        address: str,
        on_lost: Callable[[float], None],
        lost_after: float | None = None,
        every: float | None = None,
        answers: Callable[[str, float], bool] = gcs_answers,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.address = address
        self.on_lost = on_lost
        self.lost_after = lost_after if lost_after is not None else reconnect_timeout() * 2 / 3
        self.every = every if every is not None else min(5.0, self.lost_after / 4)
        self.answers = answers
        self.stopping = stopping
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gcs-watch", daemon=True)

    def start(self) -> GcsWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the launch no longer needs Ray); waits for a probe under way."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.every + 1)

    def _limits(self) -> tuple[float, float]:
        """(seconds between probes, seconds of silence that mean lost), as the launch stands."""
        if self.stopping():
            return min(self.every, STOPPING_EVERY_S), min(self.lost_after, STOPPING_LOST_S)
        return self.every, self.lost_after

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self._limits()[0]):
            every, lost_after = self._limits()
            try:
                ok = self.answers(self.address, min(5.0, every))
            except Exception:  # noqa: BLE001 -- a probe that cannot run says nothing of the GCS
                ok = True
            now = time.monotonic()
            if ok:
                last = now
            elif now - last >= lost_after and not self._stop.is_set():
                self.on_lost(now - last)
                return


def watchable(address: str | None) -> bool:
    """Whether a GCS at ``address`` (what Ray's runtime context names) can be watched here."""
    if not address or address.startswith("ray://"):
        return False
    return os.environ.get("RAY_USE_TLS", "0").lower() in ("", "0", "false")


def lost_head_line(address: str, seconds: float, resume_cmd: str, with_stop: bool = False) -> str:
    """What the launcher says as it ends on a lost head; ``with_stop``: its own local Ray, lost
    while the launch was stopping (the stop's signal reached Ray's processes too)."""
    if with_stop:
        return (
            f"error: the launcher's local Ray (GCS at {address}) stopped with it: the stop's "
            "signal reached Ray's processes too, as a signal to the whole process group does "
            "(`kill -TERM -PGID`, GNU timeout), so the results could not be written. Nothing "
            "finished is lost: a resume continues each unfinished trial from its last checkpoint "
            "and writes results.csv. To stop a sweep with its results written, signal the "
            f"launcher alone (`kill -TERM PID`). Continue with:\n  {resume_cmd}"
        )
    return (
        f"error: the Ray cluster's head at {address} has not answered for {seconds:.0f} s (its "
        "GCS is gone: the head node died, or its Ray was stopped), and the sweep cannot go on "
        "without it. Nothing finished is lost: the trials' results and checkpoints are in the "
        "sweep's storage; a resume continues each unfinished trial from its last checkpoint and "
        "writes results.csv. Once Ray is up again (a new `ray start --head`; --address local "
        f"for a private instance on one machine), continue with:\n  {resume_cmd}"
    )


def end_launch(line: str, status: int) -> None:
    """Say ``line`` and end the process with ``status`` at once: the main thread waits on the
    lost GCS inside Tune, and Ray would end the process without a word soon after."""
    print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(status)
