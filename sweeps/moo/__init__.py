"""Multi-objective search: several objectives (``val/bleu`` up, ``decode_seconds``
down), constraints (absolute, or relative to a baseline model in the same grid cell), one Optuna
multi-objective study per (cell, seed), and early stopping that works with two objectives.

- :mod:`.pareto`   the maths: non-dominated sorting, crowding distance, 2-D hypervolume, the rung rule
- :mod:`.probe`    ``decode_seconds`` while the sweep runs: an architecture-keyed decode-time probe
- :mod:`.rungs`    the per-(cell, seed) Pareto rung scheduler (ASHA's rungs, Pareto rank instead of a quantile)
- :mod:`.search`   the multi-objective searcher: Tune's interface (PRUNED trials, intermediate values, resume)
- :mod:`.configs`  the searcher of configurations judged over seeds: one study per cell, told mean vectors
- :mod:`.studies`  its bookkeeping: the objective reader, the Optuna studies, repeats, constraints, baselines
- :mod:`.views`    the journal's studies read back: trials as points, fronts, hypervolume and its history
- :mod:`.report`   results.md's section: fronts, constrained-out trials, hypervolume history, answer lines
- :mod:`.plots`    the front and hypervolume-against-compute figures

The rule is documented with a worked example in ``docs/moo_early_stopping.md``.
"""
