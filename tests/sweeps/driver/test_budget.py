"""Budgets (the sweep file's ``budget:``): what is charged, when a sweep stops, and how a larger
budget continues it, on one small real sweep (Optuna, W&B offline) that runs out of a budget of a
few seconds; the slow test resumes it with a larger one (the ledger alone: test_budget_ledger.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from types import SimpleNamespace

import pandas as pd
import pytest
from sweep_helpers import tiny_spec, wandb_read, write_spec

from sweeps.layout import BUDGET_FILE

# ----------------------------------------------------------------------------------------------
# A real sweep that runs out


BUDGET_HOURS = 0.0008  # about 3 s of the sweep's Tune run: it stops in its first trial or two


@contextlib.contextmanager
def tune_warnings():
    """The warnings of Tune's run loop and results reader that pass the launcher's filters (Ray's
    own handler prints them to the stream it took at import, out of redirect_stderr's reach)."""
    import logging

    from sweeps.driver.console import ANALYSIS_LOGGER, RUN_LOGGER

    said: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    loggers = [logging.getLogger(name) for name in (RUN_LOGGER, ANALYSIS_LOGGER)]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield said
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


@pytest.fixture(scope="module")
def spent(local_ray, tmp_path_factory) -> SimpleNamespace:
    from sweeps.launch import main

    tmp = tmp_path_factory.mktemp("budget")
    spec = tiny_spec(
        "budget",
        grid={"model": [{"attention": "none"}]},
        parameters={"model.lr": {"values": [0.001, 0.003, 0.01]}},
        num_samples=3,
        trainer={"max_steps": 40, "val_check_interval": 10},
        max_concurrent_trials=1,
        budget={"hours": BUDGET_HOURS},
        wandb={"project": "test", "mode": "offline", "log_heatmaps": False},
    )
    spec["task"]["max_length"] = 3
    path, out = write_spec(tmp, spec), tmp / "out"
    args = [str(path), "--output", str(out), "--verbose", "1"]
    said = io.StringIO()
    started = time.monotonic()
    with (
        contextlib.redirect_stdout(said),
        contextlib.redirect_stderr(said),
        tune_warnings() as tune,
    ):
        code = main(args)
    first_s = time.monotonic() - started
    # the launcher stopped Tune itself, and said why: Tune's "Stop signal received (e.g. via
    # SIGINT/Ctrl+C) ... Press CTRL+C ... to skip" spoke of a Ctrl-C nobody pressed
    assert not [w for w in tune if w.startswith("Stop signal received")], tune
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        again = main([*args, "--resume"])  # no larger budget: nothing starts
    print(said.getvalue())
    return SimpleNamespace(
        args=args, exp=out / "budget", code=code, again=again, said=said.getvalue(), first_s=first_s
    )


def test_a_spent_budget_stops_the_sweep_and_every_surface_says_so(spent):
    """Exit 3; the unfinished trials `budget` in results.csv, results.md, the console's last line;
    the charged time in budget.json and results.md; Optuna holds them RUNNING (to be resumed),
    never FAIL; a --resume without a larger budget starts nothing and charges nothing."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    assert spent.code == 3, spent.said
    df = pd.read_csv(spent.exp / "results.csv", dtype={"trial_id": str})
    assert (
        len(df) == 3 and set(df["status"]) <= {"done", "budget"} and "budget" in set(df["status"])
    )
    assert df["retries"].fillna(0).eq(0).all()
    left = int((df["status"] == "budget").sum())

    ledger = json.loads((spent.exp / BUDGET_FILE).read_text())
    assert ledger["ran_out"] == "hours" and len(ledger["runs"]) == 1, ledger
    assert ledger["charged"]["hours"] >= BUDGET_HOURS
    assert ledger["charged"]["hours"] * 3600 <= spent.first_s  # only the run's own time
    page = (spent.exp / "results.md").read_text()
    assert f"{left} budget" in page and "**The budget ran out** in training (" in page
    assert f"{left} trial(s) left with the status `budget`" in page

    assert "the hours budget ran out" in spent.said
    assert f", {left} budget |" in spent.said, "the console's last progress line"
    assert "--resume --set budget.hours=" in spent.said

    storage = JournalStorage(JournalFileBackend(str(spent.exp / "optuna.journal")))
    states = [
        t.state
        for s in optuna.get_all_study_summaries(storage)
        for t in optuna.load_study(study_name=s.study_name, storage=storage).trials
    ]
    assert optuna.trial.TrialState.FAIL not in states, states

    # each closed W&B run's summary holds results.csv's figure (a stop can land between a
    # validation logged to W&B and its report to Tune: the launcher writes results.csv's in)
    from sweeps.integrations.wandb_runs import offline_run_dirs, run_problem

    for row in df.to_dict("records"):
        runs = offline_run_dirs(spent.exp / "wandb", row["trial_id"])
        if runs and run_problem(runs[-1]) is None:
            got, want = wandb_read(runs[-1])["summary"].get("val/bleu"), row["val/bleu"]
            assert (got is None) if pd.isna(want) else got == pytest.approx(want), (row, got)

    assert spent.again == 3
    assert "no trial starts" in spent.said
    assert len(json.loads((spent.exp / BUDGET_FILE).read_text())["runs"]) == 1


@pytest.mark.slow
def test_a_larger_budget_finishes_the_sweep_charging_only_the_time_it_ran(spent):
    """--resume --set budget.hours=1 continues the `budget` trials from their checkpoints to the
    end; the ledger holds the two runs' time and no more (the pause between them is not
    charged); every W&B run is finished, every Optuna trial COMPLETE."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from sweeps.integrations.wandb_runs import offline_run_dirs, run_problem
    from sweeps.launch import main

    pause_s = 5.0
    time.sleep(pause_s)
    started = time.monotonic()
    with tune_warnings() as tune:
        code = main([*spent.args, "--resume", "--set", "budget.hours=1"])
    second_s = time.monotonic() - started
    assert code == 0
    assert not [w for w in tune if w.startswith("Failed to fetch metrics")], tune
    df = pd.read_csv(spent.exp / "results.csv", dtype={"trial_id": str})
    assert (df["status"] == "done").all() and (df["step"] == 40).all(), df

    ledger = json.loads((spent.exp / BUDGET_FILE).read_text())
    assert len(ledger["runs"]) == 2 and ledger["ran_out"] is None
    charged_s = ledger["charged"]["hours"] * 3600
    assert charged_s == pytest.approx(sum(r["hours"] for r in ledger["runs"]) * 3600)
    assert charged_s <= spent.first_s + second_s, "charged more than the runs ran"
    page = (spent.exp / "results.md").read_text()
    assert "Budget: hours 1 (" in page and "over 2 runs" in page and "ran out" not in page
    print(f"charged {charged_s:.1f} s; runs took {spent.first_s:.1f} + {second_s:.1f} s")

    for trial_id in df["trial_id"]:
        runs = offline_run_dirs(spent.exp / "wandb", trial_id)
        assert runs and all(run_problem(r) is None for r in runs), (trial_id, runs)
    storage = JournalStorage(JournalFileBackend(str(spent.exp / "optuna.journal")))
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3
