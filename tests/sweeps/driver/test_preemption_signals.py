"""The launcher's hold on SIGTERM, SIGUSR1 and Ctrl-C (sweeps/driver/preemption.py), in each way a
stage takes a stop request, in this process, no Ray."""

import os
import signal
import sys

import pytest

from sweeps.driver import preemption
from sweeps.driver.preemption import Preemption, StopRequested


def test_in_the_tune_run_a_preemption_is_tunes_sigint_and_ray_inits_handler_is_taken_back():
    """What ray.init does to the launcher: it installs its own SIGTERM handler (sys.exit at once,
    the trials killed with the driver, their W&B runs left running). After arm() SIGTERM stops
    the Tune run as Ctrl-C does (Tune's SIGINT), and the original handler is back afterwards."""
    original = signal.getsignal(signal.SIGTERM)
    interrupts = []  # SIGINT stands for Tune's handler (its graceful stop) here
    with Preemption() as p, p.during("tune"):
        sigint = signal.signal(signal.SIGINT, lambda number, frame: interrupts.append(number))
        signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(number))  # ray.init's
        p.arm()
        os.kill(os.getpid(), signal.SIGTERM)
        assert interrupts == [signal.SIGINT]
        assert p.signal == "SIGTERM" == preemption.received()
        os.kill(os.getpid(), signal.SIGTERM)  # a second signal: ignored, the stop is under way
        assert interrupts == [signal.SIGINT]
        signal.signal(signal.SIGINT, sigint)
    assert signal.getsignal(signal.SIGTERM) is original


def test_a_polling_stage_is_only_told_and_the_handlers_a_tune_run_leaves_are_replaced():
    """A Tune run leaves its SIGINT and SIGUSR1 handlers installed after it ends (they then set
    an event nobody reads): after the run the launcher's are back, so SIGUSR1 (SLURM's warning)
    in the timing stage is a preemption the stage polls for, with no exception where it was."""
    left_behind = []
    with Preemption() as p:
        with p.during("tune"):
            signal.signal(signal.SIGUSR1, lambda number, frame: left_behind.append(number))
        with p.during("poll"):
            os.kill(os.getpid(), signal.SIGUSR1)
            assert p.signal == "SIGUSR1" and p.requested() and not left_behind
            os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C after it: the stop is under way
            assert not p.interrupted


def test_ctrl_c_in_a_polling_stage_sets_interrupted_and_in_a_plain_stage_raises_there():
    with Preemption() as p:
        with p.during("poll"):
            os.kill(os.getpid(), signal.SIGINT)
        assert p.interrupted and p.signal is None and p.requested()
    with Preemption() as p:
        with pytest.raises(StopRequested), p.during("raise"):
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("the work went on after the signal")
        assert p.signal == "SIGTERM"
        with pytest.raises(StopRequested), p.during("raise"):  # a stage begun after the request
            raise AssertionError("a stage began after the stop request")
    assert issubclass(StopRequested, KeyboardInterrupt), "what stops on Ctrl-C stops on it too"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigusr1_in_the_tune_run_is_a_preemption_once_the_run_has_begun():
    """A Tune run installs its own SIGUSR1 handler as it starts (a graceful stop the launcher
    would not know was a preemption: exit 130, no requeue). The driver's callback takes SIGUSR1
    back when the run sets up, so SLURM's warning stops the run through the launcher (Tune's
    SIGINT, the preemption recorded)."""
    from sweeps.driver.budget_clock import BudgetClock

    tunes, interrupts = [], []
    with Preemption() as p, p.during("tune"):
        sigint = signal.signal(signal.SIGINT, lambda number, frame: interrupts.append(number))
        signal.signal(signal.SIGUSR1, lambda number, frame: tunes.append(number))  # Tune's own
        BudgetClock().setup()
        os.kill(os.getpid(), signal.SIGUSR1)
        signal.signal(signal.SIGINT, sigint)
    assert p.signal == "SIGUSR1" and interrupts == [signal.SIGINT] and not tunes
