"""The launcher's watch on the Ray head's GCS (:mod:`sweeps.driver.gcs_watch`), with a probe
that answers as told; the watch against a real head whose processes are killed is in
test_address.py."""

from __future__ import annotations

import threading
import time

from sweeps.driver.gcs_watch import GcsWatch, lost_head_line, reconnect_timeout, watchable


def scripted(answers: list[bool]):
    """A probe that gives ``answers`` in turn, then the last one for good."""
    calls = []

    def probe(address: str, timeout: float) -> bool:
        calls.append(address)
        return answers[min(len(calls), len(answers)) - 1]

    return probe, calls


def test_a_gcs_silent_for_the_whole_wait_is_lost_once():
    lost, called = [], threading.Event()
    probe, calls = scripted([True, False])
    watch = GcsWatch(
        "10.0.0.1:6379",
        lambda s: (lost.append(s), called.set()),
        lost_after=0.3,
        every=0.02,
        answers=probe,
    )
    watch.start()
    assert called.wait(5)
    time.sleep(0.1)
    watch.stop()
    assert len(lost) == 1 and 0.3 <= lost[0] < 2, lost
    assert set(calls) == {"10.0.0.1:6379"}


def test_a_gcs_back_within_the_wait_is_not_lost_and_a_stopped_watch_says_nothing():
    lost = []
    # silent for about 0.1 s at a time, never for the 0.3 s the watch waits
    probe, _ = scripted([True, False, False, False, True] * 40)
    watch = GcsWatch("h:1", lost.append, lost_after=0.3, every=0.02, answers=probe).start()
    time.sleep(1)
    watch.stop()
    assert lost == []
    quiet = GcsWatch("h:1", lost.append, lost_after=0.05, every=0.02, answers=lambda a, t: False)
    quiet.start().stop()  # the launch reached its reports before the wait was over
    time.sleep(0.2)
    assert lost == []


def test_a_probe_that_cannot_run_is_no_sign_of_a_lost_gcs():
    def broken(address: str, timeout: float) -> bool:
        raise RuntimeError("no grpc here")

    lost = []
    watch = GcsWatch("h:1", lost.append, lost_after=0.05, every=0.01, answers=broken).start()
    time.sleep(0.3)
    watch.stop()
    assert lost == []


def test_the_wait_follows_rays_own(monkeypatch):
    monkeypatch.delenv("RAY_gcs_rpc_server_reconnect_timeout_s", raising=False)
    assert reconnect_timeout() == 60
    watch = GcsWatch("h:1", print)
    assert (watch.lost_after, watch.every) == (40, 5)
    monkeypatch.setenv("RAY_gcs_rpc_server_reconnect_timeout_s", "12")
    watch = GcsWatch("h:1", print)
    assert (watch.lost_after, watch.every) == (8, 2)
    assert not watchable("ray://head:10001") and not watchable(None) and watchable("h:6379")
    monkeypatch.setenv("RAY_USE_TLS", "1")
    assert not watchable("h:6379")


def test_the_line_names_the_head_and_the_resume_command():
    line = lost_head_line("10.0.0.1:6379", 41.2, "python sweeps/launch.py s.yaml --resume")
    assert line.startswith(
        "error: the Ray cluster's head at 10.0.0.1:6379 has not answered for 41 s"
    )
    assert line.endswith("continue with:\n  python sweeps/launch.py s.yaml --resume")


def test_once_the_launch_stops_a_silent_gcs_is_lost_within_seconds(monkeypatch):
    """A signal to the launcher's whole process group (kill -TERM -PGID, GNU timeout) stops the
    local Ray's processes too: the stop, asked for within seconds, waited out the 40 s meant for
    a head that may come back, and then ended as if the head had died."""
    import sweeps.driver.gcs_watch as gcs_watch

    monkeypatch.setattr(gcs_watch, "STOPPING_LOST_S", 0.2)
    monkeypatch.setattr(gcs_watch, "STOPPING_EVERY_S", 0.02)
    lost, called, stopping = [], threading.Event(), threading.Event()
    watch = GcsWatch(
        "h:1",
        lambda s: (lost.append(s), called.set()),
        lost_after=30,
        every=0.05,
        answers=lambda a, t: False,
        stopping=stopping.is_set,
    ).start()
    assert not called.wait(0.5), "not stopping: the whole wait"
    stopping.set()
    assert called.wait(5)
    watch.stop()
    assert len(lost) == 1
    line = lost_head_line("127.0.0.1:6379", 5.2, "python sweeps/launch.py s.yaml --resume", True)
    assert line.startswith(
        "error: the launcher's local Ray (GCS at 127.0.0.1:6379) stopped with it"
    )
    assert "signal the launcher alone (`kill -TERM PID`)" in line
    assert line.endswith("Continue with:\n  python sweeps/launch.py s.yaml --resume")
