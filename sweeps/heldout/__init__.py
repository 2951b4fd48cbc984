"""Held-out evaluation after selection: the sweep's stage after training (and after the timing
stage) that evaluates the chosen trials' final checkpoints once on the test split. One module per
job:

- :mod:`~sweeps.heldout.evaluate`: one checkpoint evaluated on its task's test split
  (``evaluate_checkpoint``; no Ray): the copy task's held-out draw, WMT's ``test_prefix``.
- :mod:`~sweeps.report.selection`: which trials the validation metric chose (``chosen_trials``).
- :mod:`~sweeps.heldout.stage`: the stage as the launcher runs it (``evaluate_chosen_trials``):
  a Ray task per chosen trial, ``heldout.json`` beside it (a resumed sweep never evaluates a
  checkpoint twice), ``test/bleu`` into its row, its W&B run's summary and its Optuna study.
- :mod:`~sweeps.heldout.report`: results.md's held-out section (validation beside test, the
  paper's Table 1 layout by length, Table 2's by language pair).
"""
