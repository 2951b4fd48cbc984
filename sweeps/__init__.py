"""Sweeps over attention mechanisms on Ray Tune, Optuna and W&B: the map.

The command is ``python sweeps/launch.py sweeps/<sweep>.yaml`` (:mod:`sweeps.launch`); the
``*.yaml`` files beside it are the shipped sweeps. The packages, by where their code runs:

- :mod:`sweeps.spec` -- the sweep file: load, schema (pydantic), grid expansion into cells and
  units, validation of every key against the models' and datamodules' signatures.
- :mod:`sweeps.plan` -- what a launch will do, worked out once before anything starts: the
  units and their order, the warm start, the fused groups, the folders and the estimates; what
  ``--dry-run`` prints.
- :mod:`sweeps.search` -- the searchers that hand Tune the trials: Optuna per unit,
  configurations judged over seeds, multi-objective studies, fused groups, teachers first.
- :mod:`sweeps.schedulers` -- early stopping inside a unit: ASHA, the Pareto rung rule, the rungs
  of configurations judged over seeds.
- :mod:`sweeps.driver` -- the launch: its stages in order (``pipeline``), the one Tune experiment
  (``experiment``), joining Ray (``cluster``), the console, the budget, preemption, the checks
  before ``--resume``, the MPS daemon.
- :mod:`sweeps.stages` -- the stages around the Tune run: set-up, the confirm stage, the results.
- :mod:`sweeps.trial` -- the worker: the trainables (``trainable``, ``ddp``), what they share
  (``kit``), their callbacks and checkpoints, the trial's settings, the ``stop_when`` rule, the
  trial's W&B run (``wandb_logger``) and building the datamodule and module (``build``);
  :mod:`sweeps.trial.fused`, the fused groups' processes.
- :mod:`sweeps.timing` -- the decode-timing stage: each finished model timed alone on its device;
  ``python -m sweeps.timing CKPT``; and the decode probe of multi-objective studies.
- :mod:`sweeps.heldout` -- after selection: the chosen trials evaluated once on the test split
  (``test/bleu``).
- :mod:`sweeps.report` -- after the run: rows and results.csv (``results``), the summary and
  selection rule, results.md (``markdown``, ``local``), findings over seeds, the Pareto maths,
  plots, heatmaps, the W&B Report; ``python -m sweeps.report DIR``.
- :mod:`sweeps.integrations` -- W&B's environment and its offline run files.

And at the top: :mod:`sweeps.errors` (every exception), :mod:`sweeps.layout` (every output file
name, atomic writes), :mod:`sweeps.storage` (storage faults seen by driver and trials),
:mod:`sweeps.exits` (how its child processes end) and :mod:`sweeps.assignments`
(``KEY=VALUE`` command-line items).

Words (``docs/glossary.md``): a *sweep* is one YAML file's run; a *cell* one point of its grid; a
*unit* a cell and a seed; a *trial* one training run; an *Optuna study* Optuna's own object, one
per unit (per cell when configurations are judged over seeds).
"""
