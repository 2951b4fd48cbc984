"""Confirmation on fresh seeds (``seeds: {confirm: [..]}``): the key's checks, which
configuration each cell retrains and with which config, confirm rows kept out of every choice and
summary, results.md's confirm section, and a reused chosen row handed to the held-out stage. No Ray;
the launcher's run (with --resume training nothing again) is the slow test at the end."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from sweep_helpers import tiny_spec, write_spec

from sweeps.errors import SpecError
from sweeps.report.selection import chosen_configurations, chosen_trials
from sweeps.spec import load_spec

LR = {"model.lr": {"min": 1e-4, "max": 3e-2, "distribution": "log_uniform_values"}}


def _spec(tmp_path: Path, **seeds):
    over = {"values": [0, 1], "per_configuration": True, "confirm": [7, 8], **seeds}
    return load_spec(write_spec(tmp_path, tiny_spec("c", parameters=LR, num_samples=2, seeds=over)))


@pytest.mark.parametrize(
    ("seeds", "said"),
    [
        ({"confirm": [1, 5]}, r"seeds.confirm must be fresh seeds, but \[1\]"),
        ({"confirm": [5, 5]}, r"seeds.confirm repeats a seed"),
    ],
)
def test_confirm_seeds_must_be_fresh_and_distinct(tmp_path, seeds, said):
    with pytest.raises(SpecError, match=said):
        _spec(tmp_path, **seeds)


def test_confirm_is_refused_with_a_multi_objective_search(tmp_path):
    spec = tiny_spec(
        "c",
        parameters=LR,
        seeds={"values": [0], "confirm": [3]},
        objectives=[
            {"name": "val/bleu", "goal": "maximize"},
            {"name": "val/loss", "goal": "minimize"},
        ],
    )
    spec.pop("metric", None)
    with pytest.raises(SpecError, match="seeds.confirm: retrains the configuration a single"):
        load_spec(write_spec(tmp_path, spec))


def _row(tid, cell, seed, bleu, lr, config=None, **more):
    row = {"trial_id": tid, "cell": cell, "seed": seed, "status": "done", "val/bleu": bleu}
    row["param:model.lr"] = lr
    if config is not None:
        row["configuration"] = config
    return row | more


def test_confirm_rows_are_never_chosen_and_each_cell_retrains_its_chosen_configuration():
    rows = [
        _row("a0", "A", 0, 10.0, 1e-3, 0),
        _row("a1", "A", 1, 12.0, 1e-3, 0),
        _row("b0", "A", 0, 11.0, 2e-3, 1),
        _row("b1", "A", 1, 13.0, 2e-3, 1),  # configuration 1: the best mean
        # a confirm trial of configuration 0 with a huge figure: no part of the choice
        _row("k7", "A", 7, 99.0, 1e-3, 0, role="confirm"),
    ]
    assert chosen_trials(rows, "val/bleu", "max") == {"b0", "b1"}
    got = chosen_configurations(rows, "val/bleu", "max", "mean", ["model.lr"])
    assert got == {"A": {"params": {"model.lr": 2e-3}, "configuration": 1, "from": ["b0", "b1"]}}
    # per (cell, seed): each seed chose its own; the cell retrains the best of those
    per_unit = [_row("p0", "B", 0, 5.0, 1e-3), _row("p1", "B", 1, 8.0, 4e-3)]
    assert chosen_configurations(per_unit, "val/bleu", "max", "mean", ["model.lr"])["B"][
        "params"
    ] == {"model.lr": 4e-3}


def test_the_confirm_configs_and_the_dry_run_count(tmp_path, capsys):
    from sweeps.launch import main
    from sweeps.stages.confirm import confirm_configs

    sweep = _spec(tmp_path)
    cells = [c.name for c in sweep.cells]
    rows = [
        _row(f"{c}{s}{n}", cell, s, 10.0 + n + c, lr, n)
        for c, cell in enumerate(cells)
        for n, lr in enumerate((1e-3, 2e-3))
        for s in (0, 1)
    ]
    configs = confirm_configs(sweep, rows)
    assert [(c["cell"], c["seed"]) for c in configs] == [(x, s) for x in cells for s in (7, 8)]
    assert all(
        c["lr"] == 2e-3 and c["configuration"] == 1 and c["role"] == "confirm" for c in configs
    )
    # the trainables read their plan back from such a config: the chosen lr, the confirm seed
    from sweeps.trial.settings import TrialSettings

    settings = TrialSettings(
        spec=sweep.spec,
        wandb_dir=str(tmp_path),
        chaos_dir=str(tmp_path),
        train_storage=str(tmp_path),
        has_search=True,
        cells={p.cell.name: p for p in sweep.plans},
        grid_columns=sweep.grid_columns,
        param_columns=sweep.param_columns,
    )
    plan = settings.plan(configs[1])
    assert plan.seed == 8 and plan.value("model.lr") == 2e-3
    spec_file = write_spec(
        tmp_path,
        tiny_spec(
            "c",
            parameters=LR,
            num_samples=2,
            seeds={"values": [0, 1], "per_configuration": True, "confirm": [7, 8]},
        ),
    )
    assert main([str(spec_file), "--dry-run", "--output", str(tmp_path / "o")]) == 0
    assert "4 confirm trial(s) (2 cells x 2)" in capsys.readouterr().out


def test_the_report_keeps_confirm_rows_apart_and_sets_them_beside_the_chosen():
    from sweeps.report.heldout import heldout_sections, split_confirm

    rows = [
        _row("a0", "A", 0, 10.0, 1e-3, 0, chosen=True, **{"test/bleu": 8.0}),
        _row("a1", "A", 1, 12.0, 1e-3, 0, chosen=True, **{"test/bleu": 9.0}),
        _row("b0", "A", 0, 5.0, 2e-3, 1, chosen=False),
        _row("k7", "A", 7, 6.0, 1e-3, 0, chosen=False, role="confirm", **{"test/bleu": 4.0}),
        _row("k8", "A", 8, 7.0, 1e-3, 0, chosen=False, role="confirm", **{"test/bleu": 5.0}),
    ]
    df, confirm = split_confirm(pd.DataFrame(rows))
    assert list(confirm["trial_id"]) == ["k7", "k8"] and "k7" not in set(df["trial_id"])
    sections = dict(heldout_sections(df, "val/bleu", "max", confirm))
    (text,) = [t for h, t in sections.items() if h.startswith("Confirmed on fresh seeds")]
    line = next(x for x in text.splitlines() if x.startswith("| A "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # chosen: valid 11 (10, 12), test 8.5; confirm: valid 6.5, test 4.5; 2 seeds each
    assert cells[1].startswith("11.00 ±") and cells[2].startswith("8.50 ±") and cells[3] == "2"
    assert cells[4].startswith("6.50 ±") and cells[5].startswith("4.50 ±") and cells[6] == "2"
    # each seed chose its own trial (per unit): the chosen figure is the confirmed configuration's
    # alone, not the mean with the other seed's choice (42.32 and 1.81 read 22.07 beside 44)
    rows = [
        _row("a0", "A", 0, 42.0, 9e-3, chosen=True, **{"test/bleu": 40.0}),
        _row("a1", "A", 1, 2.0, 1e-3, chosen=True, **{"test/bleu": 1.0}),
        _row("k7", "A", 7, 47.0, 9e-3, chosen=False, role="confirm", **{"test/bleu": 45.0}),
        _row("k8", "A", 8, 41.0, 9e-3, chosen=False, role="confirm", **{"test/bleu": 43.0}),
    ]
    df, confirm = split_confirm(pd.DataFrame(rows))
    sections = dict(heldout_sections(df, "val/bleu", "max", confirm))
    (text,) = [t for h, t in sections.items() if h.startswith("Confirmed on fresh seeds")]
    line = next(x for x in text.splitlines() if x.startswith("| A "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1].startswith("42.00") and cells[2].startswith("40.00") and cells[3] == "1"


def test_the_wandb_report_carries_the_heldout_and_confirm_sections():
    pytest.importorskip("wandb_workspaces.reports.v2")
    from sweeps.report.heldout import split_confirm
    from sweeps.report.wandb_report import build_wandb_report

    rows = [
        _row("a0", "A", 0, 10.0, 1e-3, chosen=True, model="none", **{"test/bleu": 8.0}),
        _row("k7", "A", 7, 6.0, 1e-3, chosen=False, model="none", role="confirm"),
    ]
    for r in rows:
        r["test/bleu"] = r.get("test/bleu", 4.0)
    df, confirm = split_confirm(pd.DataFrame(rows))
    rep = build_wandb_report("me", "proj", "g", results=df, confirm=confirm)
    headings = [b.text for b in rep.blocks if type(b).__name__ == "H2"]
    assert any(h.startswith("Held-out test results of the chosen") for h in headings)
    assert any(h.startswith("Confirmed on fresh seeds") for h in headings)
    # the selection's panels (per-cell means) leave the confirm runs out; they get panels of
    # their own
    grids = [b for b in rep.blocks if type(b).__name__ == "PanelGrid"]
    assert [[rs.filters for rs in g.runsets] for g in grids] == [
        ["Group == 'g' and Config('role') == 'select'"],
        ["Group == 'g' and Config('role') == 'confirm'"],
    ]
    without = build_wandb_report("me", "proj", "g", results=df)  # no confirm runs: every run
    (grid,) = [b for b in without.blocks if type(b).__name__ == "PanelGrid"]
    assert [rs.filters for rs in grid.runsets] == ["Group == 'g'"]


def test_a_reused_row_gets_a_plan_for_the_heldout_stage(tmp_path):
    from sweeps.plan.warm_start import PLAN_HASH, WarmStart, plan_fingerprint

    sweep = load_spec(write_spec(tmp_path, tiny_spec("w", parameters=LR, num_samples=1)))
    plan = sweep.plans[1]
    tried = plan.with_values(plan.seed, {"model.lr": 3e-3}, {"model.lr": 3e-3}, {})
    row = {"trial_id": "old1", "cell": plan.cell.name, "seed": plan.seed, "param:model.lr": 3e-3}
    row[PLAN_HASH] = plan_fingerprint(tried)
    warm = WarmStart(tmp_path / "earlier", reused={1: [row]})
    ((got, folder),) = warm.plans(sweep, tmp_path / "out").values()
    assert plan_fingerprint(got) == row[PLAN_HASH] and got.seed == plan.seed
    assert folder == str(tmp_path / "out" / "heldout" / "old1")  # not the earlier sweep's folder
    assert warm.reused_ids() == {"old1"}


def wandb_config(wandb_dir, run_id: str) -> dict:
    """The config of a run as its offline run file holds it (the last folder of the id)."""
    from sweeps.integrations.wandb_runs import offline_run_dirs, read_records, run_log

    config = {}
    for record in read_records(run_log(offline_run_dirs(wandb_dir, run_id)[-1])):
        kind = record.WhichOneof("record_type")  # the run record's config, then any updates
        update = record.run.config.update if kind == "run" else record.config.update
        if kind in ("run", "config"):
            config |= {item.key: json.loads(item.value_json) for item in update}
    return config


@pytest.mark.slow
def test_confirm_end_to_end_and_resume_trains_nothing_again(local_ray, tmp_path):
    """The launcher with seeds.confirm (about two minutes here): one confirm trial per cell and
    confirm seed, with the chosen configuration's values, tested on the test split; results.md's
    confirm section; the Optuna study's ``confirm`` attribute; a --resume trains nothing again."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from sweeps.launch import main
    from sweeps.plan.warm_start import code_version

    spec = tiny_spec(
        "cf",
        task={**tiny_spec("x")["task"], "test_size": 16},
        parameters=LR,
        num_samples=2,
        seeds={"values": [0, 1], "per_configuration": True, "confirm": [7]},
        metric={"name": "val/loss", "goal": "minimize"},
        heldout={"enabled": True},
    )
    args = [str(write_spec(tmp_path, spec)), "--output", str(tmp_path / "o"), "--verbose", "0"]
    assert main(args) == 0
    out = tmp_path / "o" / "cf"
    df = pd.read_csv(out / "results.csv", dtype={"trial_id": str})
    confirm = df[df["role"] == "confirm"]
    assert len(df) == 10 and len(confirm) == 2 and (df["role"] == "select").sum() == 8
    assert (confirm["seed"] == 7).all() and not confirm["chosen"].any()
    assert confirm["test/bleu"].notna().all() and (confirm["status"] == "done").all()
    # the code that trained each trial, confirm trials as the search's
    assert (df["code_version"] == code_version()).all()
    for _, row in confirm.iterrows():
        chosen = df[(df["cell"] == row["cell"]) & df["chosen"]]
        assert set(chosen["configuration"]) == {row["configuration"]}
        assert chosen["param:model.lr"].iloc[0] == pytest.approx(row["param:model.lr"])
    md = (out / "results.md").read_text()
    assert "Confirmed on fresh seeds" in md
    # each W&B run says which kind it is, as results.csv does (the Report's panels filter on it)
    for _, row in df.iterrows():
        assert wandb_config(out / "wandb", row["trial_id"])["role"] == row["role"]
    storage = JournalStorage(JournalFileBackend(str(out / "optuna.journal")))
    for name in optuna.get_all_study_names(storage):
        attr = optuna.load_study(study_name=name, storage=storage).user_attrs["confirm"]
        assert set(attr["seeds"]) == {"7"} and attr["confirm/seeds"] == 1
        assert attr["seeds"]["7"]["trial_id"] in set(confirm["trial_id"])
    trained = sorted(p.name for p in (out / "confirm").iterdir() if (p / "result.json").exists())
    assert len(trained) == 2
    assert main([*args, "--resume"]) == 0
    again = sorted(p.name for p in (out / "confirm").iterdir() if (p / "result.json").exists())
    assert again == trained
    df2 = pd.read_csv(out / "results.csv", dtype={"trial_id": str})
    assert sorted(df2[df2["role"] == "confirm"]["trial_id"]) == sorted(confirm["trial_id"])
    assert (df2["code_version"] == code_version()).all()
    assert (
        df2.set_index("trial_id")["plan_hash"].to_dict()
        == df.set_index("trial_id")["plan_hash"].to_dict()
    )


@pytest.mark.slow
def test_a_reused_chosen_row_without_a_test_figure_is_evaluated(local_ray, tmp_path):
    """An earlier sweep without the held-out stage, warm-started with it (about a minute here):
    nothing trains again, and the reused chosen rows get test figures, recorded in this sweep's
    folder (not the earlier one's)."""
    from sweeps.launch import main

    task = {**tiny_spec("x")["task"], "test_size": 16}
    one = tmp_path / "one"
    one.mkdir()
    first = [str(write_spec(one, tiny_spec("r", task=task))), "--output", str(tmp_path / "o1")]
    assert main([*first, "--verbose", "0"]) == 0
    again = tiny_spec(
        "r", task=task, heldout={"enabled": True}, warm_start=str(tmp_path / "o1" / "r")
    )
    second = [str(write_spec(tmp_path, again)), "--output", str(tmp_path / "o2"), "--verbose", "0"]
    assert main(second) == 0
    out = tmp_path / "o2" / "r"
    df = pd.read_csv(out / "results.csv", dtype={"trial_id": str})
    assert len(df) == 2 and df["reused"].notna().all() and df["chosen"].all()
    assert df["test/bleu"].notna().all()
    assert sorted(p.parent.name for p in (out / "heldout").glob("*/heldout.json")) == sorted(
        df["trial_id"]
    )
    assert not list((tmp_path / "o1" / "r").rglob("heldout.json"))


@pytest.mark.slow
def test_confirm_trials_cut_by_ctrl_c_continue_on_resume(local_ray, tmp_path, monkeypatch):
    """A Ctrl-C while the confirm trials train (about a minute here): exit 130, the finished confirm
    trials kept; --resume continues the unfinished ones and trains no finished one again (a
    finished trial's result.json gains no line)."""
    from sweep_helpers import interrupt_env

    from sweeps.launch import main

    spec = tiny_spec("cc", seeds={"values": [0], "confirm": [5, 6]})  # no search: 2 + 4 trials
    args = [str(write_spec(tmp_path, spec)), "--output", str(tmp_path / "o"), "--verbose", "0"]
    out = tmp_path / "o" / "cc"
    with monkeypatch.context() as hooked:  # never in the search's 2 trials: only the confirm's
        for name, value in interrupt_env(out / "confirm", step=10, finished=2).items():
            hooked.setenv(name, value)
        assert main(args) == 130
    confirm = out / "confirm"
    # finished: what Tune had ended at the Ctrl-C (the hook's record). A trial whose last report
    # was written but not yet taken in is unfinished: --resume reports its end again, untrained.
    seen = json.loads((confirm.parent / "confirm.interrupted.json").read_text())
    done = {
        p.name: (p / "result.json").read_text()
        for p in confirm.iterdir()
        if p.name.split("_")[0] in seen["finished"]
    }
    assert len(done) >= 2
    assert main([*args, "--resume"]) == 0
    for name, text in done.items():
        assert (confirm / name / "result.json").read_text() == text
    df = pd.read_csv(out / "results.csv", dtype={"trial_id": str})
    rows = df[df["role"] == "confirm"]
    assert sorted(rows["seed"]) == [5, 5, 6, 6] and (rows["status"] == "done").all()
    assert len(df) == 6


def test_the_confirm_attribute_names_the_configurations_values():
    """Where each seed chose its own trial (a search per cell and seed), the ``confirm`` attribute
    held ``configuration: None`` and nothing that said which lr was confirmed."""
    from types import SimpleNamespace

    from sweeps.stages.publish import publish_confirm

    sweep = SimpleNamespace(
        spec=SimpleNamespace(metric=SimpleNamespace(name="val/bleu"), parameters={"model.lr": {}}),
        has_search=True,
    )
    settings = SimpleNamespace(wandb=SimpleNamespace(mode="disabled"))
    rows = [
        _row("k7", "A", 7, 47.0, 9e-3, role="confirm"),
        _row("k8", "A", 8, 41.0, 9e-3, role="confirm"),
        _row("a0", "A", 0, 42.0, 9e-3, role="select"),
    ]
    (entry,) = publish_confirm(rows, settings, None, sweep).values()
    assert entry["params"] == {"model.lr": 9e-3} and entry["configuration"] is None
    assert sorted(entry["seeds"]) == ["7", "8"] and entry["confirm/val/bleu"] == 44.0


def test_a_changed_choice_retrains_its_confirm_trials_beside_the_earlier_ones(
    local_ray, tmp_path, capsys
):
    """A --resume whose errored trials finished and beat the earlier choice restored the confirm
    experiment of the earlier choice: results.md set its figures under the chosen configurations,
    for values no longer chosen, and nothing was retrained. A real Tune experiment holding the
    earlier choice's confirm trials: the new choice's trials go to confirm-<digest>/, the earlier
    folder kept; the same choice (or a part of it the searcher has not made yet) restores it."""
    from ray import tune

    from sweeps.plan.units import Unit
    from sweeps.search.compose import per_unit_searcher
    from sweeps.stages.confirm import confirm_experiment

    def trainable(config):
        tune.report({"val/loss": 1.0})

    started = [
        {"cell": "c0", "seed": 7, "lr": 0.01, "role": "confirm"},
        {"cell": "c1", "seed": 7, "lr": 0.02, "role": "confirm"},
    ]
    parent = str(tmp_path / "sweep")
    units = [Unit(f"s/confirm-{i}", i, 7, c, 10) for i, c in enumerate(started)]
    first = tune.Tuner(  # as the confirm stage makes its trials: one per unit
        trainable,
        tune_config=tune.TuneConfig(
            search_alg=per_unit_searcher(units, 1, "val/loss", "min"), num_samples=2
        ),
        run_config=tune.RunConfig(name="confirm", storage_path=parent, verbose=0),
    ).fit()
    same = [{**c, "seed": 7.0} for c in started]  # a seed read back from results.csv: a float
    assert confirm_experiment(parent, trainable, same, ["lr"]) == (parent + "/confirm", set())
    path, gone = confirm_experiment(parent, trainable, [*same, {**same[0], "seed": 8}], ["lr"])
    assert path.endswith("/confirm") and not gone  # one more confirm seed than the searcher made
    capsys.readouterr()
    changed = [started[0], {**started[1], "lr": 0.005}]
    path, gone = confirm_experiment(parent, trainable, changed, ["lr"])
    assert path.startswith(parent + "/confirm-") and len(path.rsplit("-", 1)[1]) == 8
    said = capsys.readouterr().out
    assert "the chosen configuration of c1 changed since the confirm trials in confirm/" in said
    assert confirm_experiment(parent, trainable, changed, ["lr"]) == (path, gone)  # the same again
    assert tune.Tuner.can_restore(parent + "/confirm")  # kept as it was
    # confirm/'s trials leave results.csv: the rows of a resume do not bring them back
    from sweeps.report.results import keep_finished

    assert gone == {r.metrics["trial_id"] for r in first} and len(gone) == 2
    earlier = tmp_path / "results.csv"
    pd.DataFrame(
        [
            {"trial_id": i, "cell": "c0", "seed": 7, "status": "done", "role": "confirm"}
            for i in gone
        ]
        + [{"trial_id": "s1", "cell": "c0", "seed": 0, "status": "done", "role": "select"}]
    ).to_csv(earlier, index=False)
    rows, kept = keep_finished([], earlier, gone)
    assert [r["trial_id"] for r in rows] == ["s1"] and kept == 1
