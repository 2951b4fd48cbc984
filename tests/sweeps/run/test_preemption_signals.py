"""The launcher's hold on SIGTERM/SIGUSR1 (sweeps/run/preemption.py), in this process, no Ray."""

import os
import signal
import sys

from sweeps.run import preemption
from sweeps.run.preemption import Preemption


def test_a_handler_installed_after_entering_is_taken_back_by_arm_and_the_first_restored_on_exit():
    """What ray.init does to the launcher: it installs its own SIGTERM handler (sys.exit at once,
    the trials killed with the driver, their W&B runs left running). After arm() SIGTERM stops
    the sweep as Ctrl-C does (Tune's SIGINT), and the original handler is back afterwards."""
    original = signal.getsignal(signal.SIGTERM)
    interrupts = []  # SIGINT stands for Tune's handler (its graceful stop) here
    sigint = signal.signal(signal.SIGINT, lambda number, frame: interrupts.append(number))
    try:
        with Preemption() as p:
            signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(number))  # ray.init's
            p.arm()
            os.kill(os.getpid(), signal.SIGTERM)
            assert interrupts == [signal.SIGINT]
            assert p.signal == "SIGTERM" == preemption.received()
            os.kill(os.getpid(), signal.SIGTERM)  # a second signal: ignored, the stop is under way
            assert interrupts == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, sigint)
    assert signal.getsignal(signal.SIGTERM) is original
