"""The sweep file's ``parameters`` as Optuna's search space: its distributions under the
parameters' flat names, and the sampler ``search.sampler`` names, seeded. Imports Optuna: the
searchers and a warm start of configurations need it, ``--dry-run`` of most sweeps does not."""

from __future__ import annotations

from typing import Any

import optuna

from sweeps.spec.search_schema import ParamSpec


def optuna_distributions(
    parameters: dict[str, ParamSpec], columns: dict[str, str]
) -> dict[str, Any]:
    """Optuna distributions under the parameters' flat names (``lr``, not ``model.lr``)."""
    od = optuna.distributions
    by_key = {key: name for name, key in columns.items()}
    space = {}
    for key, p in parameters.items():
        dist = p.resolved_distribution()
        if dist == "categorical":
            d = od.CategoricalDistribution(p.values)
        elif dist in ("int_uniform", "int_log_uniform"):
            d = od.IntDistribution(int(p.min), int(p.max), log=dist == "int_log_uniform")
        elif dist == "log_uniform_values":
            d = od.FloatDistribution(p.min, p.max, log=True)
        else:
            d = od.FloatDistribution(p.min, p.max)
        space[by_key[key]] = d
    return space


def optuna_sampler(name: str, seed: int) -> Any:
    """The sweep file's ``search.sampler`` (``tpe`` or ``random``) as Optuna's sampler, seeded."""
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)
