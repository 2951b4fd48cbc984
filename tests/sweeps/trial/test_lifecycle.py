"""A trial process's lifecycle parts that need no Ray: the loggers it quiets, and when."""

from __future__ import annotations

import logging

from sweeps.trial.lifecycle import QUIET_LOGGERS, FinishOnStop

RESTORE_BANNER = "ray.tune.trainable.trainable"  # "Restored on <ip> from checkpoint: ..."


def test_tunes_restore_banner_is_quiet_before_tune_restores_the_trial():
    """Tune builds the trainable (``setup``), then restores a resumed trial: its banner, which
    Ray's log deduplication held back and printed after the launch's last lines, is quieted in
    ``setup``, before the restore, and the trainable's own setup still runs."""

    class Trainable:
        def setup(self, config):
            self.config = config
            self.level = logging.getLogger(RESTORE_BANNER).getEffectiveLevel()

    class Trial(FinishOnStop, Trainable):
        pass

    logger = logging.getLogger(RESTORE_BANNER)
    before = logger.level
    try:
        logger.setLevel(logging.INFO)
        trial = Trial()
        trial.setup({"seed": 0})
        assert RESTORE_BANNER in QUIET_LOGGERS
        assert trial.config == {"seed": 0} and trial.level == logging.WARNING
    finally:
        logger.setLevel(before)


def test_a_lost_exit_in_a_weakref_callback_is_not_printed_and_other_errors_are(monkeypatch):
    """Ray's SIGTERM handler raising SystemExit inside a weakref callback printed "Exception
    ignored in: <function WeakSet...>" and Ray's traceback into the sweep's console, from a trial
    that had finished. Other exceptions Python cannot raise still reach the previous hook."""
    import gc
    import sys
    import weakref

    from sweeps.trial.lifecycle import quiet_lost_exits

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    quiet_lost_exits()
    quiet_lost_exits()  # once per process, however often a trial's process calls it

    class Thing:
        pass

    def raises(error: BaseException):
        def callback(_ref):
            raise error

        return callback

    for error in (SystemExit(1), ValueError("kept")):
        thing = Thing()
        ref = weakref.ref(thing, raises(error))
        del thing
        gc.collect()
        assert ref() is None
    assert [type(info.exc_value) for info in seen] == [ValueError]
