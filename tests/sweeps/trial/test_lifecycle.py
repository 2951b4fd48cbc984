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


def test_an_epoch_shorter_than_the_logging_interval_is_not_warned_about_in_a_trial():
    """Lightning warned, once per trial, that an epoch (a smoke run's 19 batches) is shorter than
    log_every_n_steps; each report logs the reported training loss anyway. The warning is read
    from Lightning's source, so a change of its words fails here rather than going unfiltered."""
    import inspect
    import re
    import warnings

    from lightning.pytorch.loops import fit_loop
    from lightning.pytorch.utilities.warnings import PossibleUserWarning

    from sweeps.trial.lifecycle import quiet_logs

    (said,) = re.findall(
        r'f"(The number of training batches \(\{self\.max_batches\}\)[^"]*)"',
        inspect.getsource(fit_loop),
    )
    message = said.replace("{self.max_batches}", "19").replace("{trainer.log_every_n_steps}", "50")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_logs()
        warnings.warn(message, PossibleUserWarning, stacklevel=1)
        warnings.warn("The number of validation batches is odd", PossibleUserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["The number of validation batches is odd"]
