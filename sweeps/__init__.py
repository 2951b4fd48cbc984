"""Sweeps over attention mechanisms on Ray Tune, Optuna and W&B: the map.

The command is ``python sweeps/launch.py sweeps/<sweep>.yaml`` (:mod:`sweeps.launch`); the
``*.yaml`` files beside it are the shipped sweeps. The packages, by where their code runs:

- :mod:`sweeps.spec` -- the sweep file: load, schema (pydantic), grid expansion into cells and
  units, validation of every key against the models' and datamodules' signatures.
- :mod:`sweeps.plan` -- what a launch will do, worked out once before anything starts
  (``sweep_plan.build_plan``): the units and their order, the warm start, the fused groups from the
  measured step costs, the GPU arrangement, the folders and the estimates; what ``--dry-run``
  prints (``describe``).
- :mod:`sweeps.search` -- one searcher made of parts (``compose``): the objective (one metric or
  a multi-objective study), the scope (per unit, or configurations judged over seeds), the
  hand-out (one trial, or a fused group's members together), the gates (teachers first, baselines)
  and the warm start.
- :mod:`sweeps.schedulers` -- early stopping inside a unit: ASHA, the Pareto rung rule, the rungs
  of configurations judged over seeds, a lost node's trial moved.
- :mod:`sweeps.stages` -- the launch's stages in order (``pipeline``, over ``launch_state``):
  set-up, the Tune run (``train``), measure (timing and held-out), confirm, publish, results.
- :mod:`sweeps.driver` -- what the stages run on: joining Ray (``cluster``), the console, the
  budget's meter and clock, preemption, the checks before ``--resume``, the trials' logs, the
  MPS daemon.
- :mod:`sweeps.trial` -- the worker: the trainables (``trainable``, ``ddp``), what they share
  (``fitting``), their callbacks and checkpoints, the trial's settings, the ``stop_when`` rule, the
  trial's W&B run (``wandb_logger``); :mod:`sweeps.trial.fused`, the fused groups' processes.
- :mod:`sweeps.timing` -- the decode-timing stage: each finished model timed alone on its device;
  ``python -m sweeps.timing CKPT``; and the decode probe of multi-objective studies.
- :mod:`sweeps.heldout` -- after selection: the chosen trials evaluated once on the test split
  (``test/bleu``).
- :mod:`sweeps.report` -- after the run: rows and results.csv (``results``), the summary and
  selection rule, results.md (``markdown``, ``local``), findings over seeds, the Pareto maths,
  plots, heatmaps, the W&B Report; ``python -m sweeps.report DIR``.
- :mod:`sweeps.integrations` -- torch's build (CPU or CUDA), W&B's environment and its offline
  run files.

And at the top: :mod:`sweeps.errors` (every exception), :mod:`sweeps.layout` (every output file
name, atomic writes), :mod:`sweeps.storage` (storage faults seen by driver and trials),
:mod:`sweeps.exits` (how its child processes end) and :mod:`sweeps.assignments`
(``KEY=VALUE`` command-line items), :mod:`sweeps.build` (a resolved config to its datamodule and
module) and :mod:`sweeps.heatmaps` (``python -m sweeps.heatmaps``).

Words (``docs/glossary.md``): a *sweep* is one YAML file's run; a *cell* one point of its grid; a
*unit* a cell and a seed; a *trial* one training run; an *Optuna study* Optuna's own object, one
per unit (per cell when configurations are judged over seeds).
"""
