"""Configurations judged over seeds in a multi-objective study: the dry run's checks,
and the searcher driven with the events Tune would send on a real Optuna journal (no Ray
instance): one study per cell, each configuration trained on every seed, Optuna told the vector of
per-objective means and the seeds' mean constraint violation. The launcher's run is the slow test."""

from __future__ import annotations

import pandas as pd
import pytest
from sweep_helpers import tiny_spec, write_spec

pytest.importorskip("ray")

from sweeps.errors import SpecError  # noqa: E402
from sweeps.spec import load_spec  # noqa: E402

LR = {"model.lr": {"min": 1e-4, "max": 3e-2, "distribution": "log_uniform_values"}}
OBJECTIVES = [{"name": "val/bleu", "goal": "maximize"}, {"name": "val/loss", "goal": "minimize"}]


def _spec(**over):
    return tiny_spec(
        "mc",
        grid={"model": [{"attention": "none"}]},
        parameters=LR,
        num_samples=2,
        objectives=OBJECTIVES,
        seeds={"values": [0, 1], "per_configuration": True},
        early_terminate={"type": "none"},
        **over,
    )


def test_the_dry_run_accepts_the_mode_and_refuses_pareto_stopping_in_it(tmp_path):
    load_spec(write_spec(tmp_path, _spec()))  # accepted
    with pytest.raises(SpecError, match="early_terminate pareto is not supported yet"):
        load_spec(write_spec(tmp_path, {**_spec(), "early_terminate": {"type": "pareto"}}))


def test_optuna_is_told_the_vector_of_means_over_seeds(tmp_path):
    import optuna

    from sweeps.plan.units import sweep_units
    from sweeps.search.base import SweepSearcher
    from sweeps.search.handout import OneAtATime
    from sweeps.search.moo import MultiObjective, ObjectiveReader
    from sweeps.search.over_seeds import OverSeeds, cell_study_name
    from sweeps.spec.search_space import optuna_distributions

    spec = _spec(constraints=[{"name": "val/loss", "max": 3.0}])
    sweep = load_spec(write_spec(tmp_path, spec))
    units = sweep_units(sweep)
    objective = MultiObjective(sweep, ObjectiveReader(sweep, None), 2, dedupe=False)
    scope = OverSeeds(
        units,
        objective,
        sweep.spec.num_samples,
        optuna_distributions(sweep.spec.parameters, sweep.param_columns),
        str(tmp_path / "optuna.journal"),
        [cell_study_name(sweep.name, c.slug) for c in sweep.cells],
    )
    searcher = SweepSearcher(units, scope, OneAtATime())
    a, b = searcher.suggest("a"), searcher.suggest("b")
    assert (a["seed"], b["seed"], a["lr"]) == (0, 1, b["lr"]) and a["configuration"] == 0
    searcher.on_trial_result("a", {"val/bleu": 2.0, "val/loss": 3.0, "step": 10})
    searcher.on_trial_result("b", {"val/bleu": 4.0, "val/loss": 2.0, "step": 10})
    searcher.on_trial_complete("a", {"val/bleu": 10.0, "val/loss": 2.5, "step": 20})
    study = searcher.scope.cell_study(0)
    assert study.trials[0].state == optuna.trial.TrialState.RUNNING  # a seed still trains
    searcher.on_trial_complete("b", {"val/bleu": 20.0, "val/loss": 3.5, "step": 20})
    (t,) = searcher.scope.cell_study(0).trials
    assert t.state == optuna.trial.TrialState.COMPLETE and t.values == [15.0, 3.0]
    assert t.user_attrs["intermediate"] == {"10": [3.0, 2.5], "20": [15.0, 3.0]}
    assert t.user_attrs["seed=1"]["value"] == [20.0, 3.5]
    # val/loss <= 3: seed 0 is 0.5 inside (-0.5), seed 1 0.5 over (+0.5): the mean is 0
    assert t.constraints == {objective.constraints[0].label: 0.0}
    assert optuna.get_all_study_names(searcher.scope.journal.storage) == ["mc/attention-none"]


@pytest.mark.slow
def test_multi_objective_configurations_over_seeds_end_to_end(local_ray, tmp_path):
    """The launcher (about a minute here): one two-objective study per cell, each trial's values
    the means over its configuration's seeds in results.csv, and the report's section says so."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from sweeps.launch import main

    args = [str(write_spec(tmp_path, _spec())), "--output", str(tmp_path / "o"), "--verbose", "0"]
    assert main(args) == 0
    out = tmp_path / "o" / "mc"
    df = pd.read_csv(out / "results.csv", dtype={"trial_id": str})
    assert len(df) == 4 and df["configuration"].notna().all()
    storage = JournalStorage(JournalFileBackend(str(out / "optuna.journal")))
    assert optuna.get_all_study_names(storage) == ["mc/attention-none"]
    study = optuna.load_study(study_name="mc/attention-none", storage=storage)
    assert len(study.trials) == 2
    for t in study.trials:
        rows = df[df["configuration"] == t.number]
        assert sorted(rows["seed"]) == [0, 1]
        assert t.values == pytest.approx([rows["val/bleu"].mean(), rows["val/loss"].mean()])
    assert "attention=none, means over seeds" in (out / "results.md").read_text()
