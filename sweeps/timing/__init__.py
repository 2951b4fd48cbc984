"""Decode time and training cost measured alone: the paper's decode-time figure
(``decode_seconds``), the seconds of a training step and the peak memory of training and decoding
for a trained checkpoint. One module per job:

- :mod:`~sweeps.timing.measure`: the measurement (``measure_decode_time``): warm-up, timed
  repeats, passes on a shared core or a slow machine thrown away, adaptive precision.
- :mod:`~sweeps.timing.record`: what a timing is (``DecodeTiming``), ``timing.json``, and the
  figures written into a trial's results row.
- :mod:`~sweeps.timing.files`: which file a checkpoint path names and what identifies its content.
- :mod:`~sweeps.timing.checkpoint`: a checkpoint and its data rebuilt, timed (``time_checkpoint``).
- :mod:`~sweeps.timing.jobs`: what the stage times and where: a job per finished trial
  (``TimingJob``), the ``timing`` settings, a trial already timed, the lanes of a Ray cluster.
- :mod:`~sweeps.timing.stage`: the sweep's stage after the Tune run, each finished trial timed
  alone on a Ray node (in pinned processes on CPU), ``timing.json`` beside it
  (``time_finished_trials``, ``run_timing_stage``).
- :mod:`~sweeps.timing.remote`: what one of the stage's Ray tasks does: a batch of jobs measured
  by fresh pinned processes on CPU, or in the task itself on a GPU.
- :mod:`~sweeps.timing.child`: the pinned process the stage times a checkpoint in.
- :mod:`~sweeps.timing.fused`: a fused group's members, each timed as its own model.
- :mod:`~sweeps.timing.probe`: the multi-objective search's decode probe (before training).
- :mod:`~sweeps.timing.cli`: the command, ``python -m sweeps.timing CKPT [options]``.
- :mod:`~sweeps.timing.devices`: device names and CPU pinning, shared with ``benchmarks/``.
- :mod:`~sweeps.timing.train`, :mod:`~sweeps.timing.memory`, :mod:`~sweeps.timing.cost`: a
  training step timed on a copy of the model, the peaks of a step and of decoding, both together.

This file imports nothing: the pinned child pins itself before torch is loaded. Only the modules
that measure (``measure``, ``checkpoint``, ``train``, ``cost``, ``child``, ``cli``) load torch and
Lightning; the driver's side (``stage``, ``jobs``, ``remote``, ``pinned``, ``record``, ``files``) does
not, so the launcher and the stage's Ray task on a CPU, which leaves the measuring to fresh
processes, never pay for them (tests/sweeps/spec/test_signatures.py checks the launcher's side).
"""
