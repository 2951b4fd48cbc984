"""A stop in the stages after training, on one small real sweep (a real local Ray, two tiny copy-task
models, the timing and held-out stages on): SIGTERM as the second model's timing begins, a budget
that runs out in the timing stage, then --resume to the end; and on a copy of the sweep as it was,
Ctrl-C (SIGINT) once the first model is evaluated on test, and SIGTERM as the reports begin. Each signal is sent by the launcher's own stage hook (tests/stage_hook.py) at
that point, not by a timer from outside.

What must hold: a stop ends the running stage's processes at once (no timing process outlives the
launcher), exits 75 (3 for the budget, 130 for Ctrl-C) with results.csv and results.md written from what is done,
and each ``--resume`` times and evaluates only what is missing, never twice: every record the
earlier runs wrote is unchanged, byte for byte. A signal that comes when every stage is done
changes nothing: exit 0.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest
from stage_hook import hook_env, timing_processes
from sweep_helpers import tiny_spec, write_spec

from sweeps.heldout.stage import NOT_EVALUATED
from sweeps.launch import main
from sweeps.layout import BUDGET_FILE, HELDOUT_FILE
from sweeps.timing.record import TIMING_FILE
from sweeps.timing.stage import NOT_TIMED

pytestmark = [pytest.mark.ray, pytest.mark.train]

#: the goal: a stop is honoured in every stage within this many seconds
STOP_S = 30.0


def records(exp: Path, name: str) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in sorted(exp.glob(f"*/{name}"))}


def stopped_run(
    args: list[str], monkeypatch, record: Path, at: str, signal_name: str = "SIGTERM"
) -> tuple[int, float]:
    """The launcher with ``signal_name`` at ``at``: its exit status, and the seconds from the
    signal to its return."""
    with monkeypatch.context() as hooked:
        for name, value in hook_env(record, at, signal_name).items():
            hooked.setenv(name, value)
        code = main(args)
    assert record.exists(), f"the stage hook never fired at {at}"
    return code, time.time() - json.loads(record.read_text())["at"]


def test_a_stop_after_training_is_honoured_at_once_and_resume_does_only_what_is_missing(
    local_ray, tmp_path, monkeypatch, capsys
):
    spec = tiny_spec(
        "stages",
        trainer={"max_steps": 10, "val_check_interval": 10},
        wandb={"mode": "disabled"},
        # one model per timing process, each timed briefly: the second is in flight at the stop
        timing={
            "repeats": 2,
            "precision": None,
            "processes": 1,
            "warmup": 0,
            "measure": ["decode"],
            "calibration_seconds": 0.2,
            "models_per_process": 1,
        },
        heldout={"enabled": True},
    )
    spec["task"].update(max_length=3, test_size=8, val_size=8)
    path, out = write_spec(tmp_path, spec), tmp_path / "out"
    args = [str(path), "--output", str(out), "--verbose", "0"]
    exp = out / "stages"

    # 1. SIGTERM as the second model's timing begins (the first one's record written): its
    # timing process is ended, nothing of it is written, the held-out stage does not start
    code, took = stopped_run(args, monkeypatch, tmp_path / "timing.json", "timing:start@2")
    assert code == 75, capsys.readouterr()
    assert took < STOP_S, f"exited {took:.1f} s after the signal"
    with capsys.disabled():  # the figure, for pytest -s
        print(f"\nSIGTERM in the timing stage: exit 75 after {took:.1f} s")
    assert timing_processes() == [], "a timing process outlived the stop"
    said = capsys.readouterr().out
    assert (
        "preempted (SIGTERM)" in said
        and "preempted (SIGTERM) in the timing stage" in said
        and "--resume" in said
    )
    timed = records(exp, TIMING_FILE)
    assert len(timed) == 1 and records(exp, HELDOUT_FILE) == {}
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert sorted(df["status"]) == ["done", "done"], "the trained models stay done"
    assert df["decode_seconds"].notna().sum() == 1
    assert df["timing_error"].tolist().count(NOT_TIMED) == 1
    page = (exp / "results.md").read_text()
    assert "## Not timed yet" in page and "stopped before 1 finished trial(s) were timed" in page
    # the held-out stage the stop skipped: the chosen trials wait for --resume, as a stop inside
    # the stage leaves them (no `chosen` nor `heldout_error` at all had read as heldout off)
    assert df["chosen"].tolist() == [True, True]
    assert df["heldout_error"].tolist() == [NOT_EVALUATED] * 2

    # 2. a budget smaller than what was charged plus the rest of the timing: the resume stops
    # in the timing stage (status budget, exit 3), and results.md's charge includes the stage
    charged = json.loads((exp / BUDGET_FILE).read_text())["charged"]["cpu_hours"]
    budget = charged + 1.0 / 3600  # one CPU-second more: the timing stage holds both CPUs
    assert main([*args, "--resume", "--set", f"budget.cpu_hours={budget}"]) == 3
    said = capsys.readouterr().out
    assert "--resume --set budget.cpu_hours=" in said
    ledger = json.loads((exp / BUDGET_FILE).read_text())
    assert ledger["ran_out"] == "cpu_hours" and ledger["stopped_in"] == "timing", ledger
    assert ledger["stages"]["timing"]["cpu_hours"] > 0
    assert records(exp, TIMING_FILE) == timed, "a timing record changed or was added"
    assert timing_processes() == []
    page = (exp / "results.md").read_text()
    assert "**The budget ran out** in the timing stage" in page
    (line,) = [ln for ln in page.splitlines() if ln.startswith("Budget:")]
    assert "over 2 runs" in line and "timing " in line and "CPU-hours" in line, line

    # 3. --resume with a larger budget ends the sweep: exit 0, the second model timed (the
    # first not again), both chosen trials evaluated. A copy of the sweep as it was goes on in 4.
    shutil.copytree(out, tmp_path / "copy")
    assert main([*args, "--resume", "--set", "budget.cpu_hours=100"]) == 0, capsys.readouterr()
    now = records(exp, TIMING_FILE)
    assert len(now) == 2 and {k: now[k] for k in timed} == timed, "the first model timed again"
    assert len(records(exp, HELDOUT_FILE)) == 2
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert sorted(df["status"]) == ["done", "done"] and df["test/bleu"].notna().all()
    assert df["decode_seconds"].notna().all() and df["timing_error"].isna().all()
    capsys.readouterr()

    # 4. the copy, resumed: Ctrl-C (SIGINT) as the first held-out evaluation is written ends the
    # second, and the last line names the stage
    args = [str(path), "--output", str(tmp_path / "copy"), "--verbose", "0"]
    exp = tmp_path / "copy" / "stages"
    code, took = stopped_run(
        [*args, "--resume", "--set", "budget.cpu_hours=100"],
        monkeypatch,
        tmp_path / "heldout.json",
        "heldout:done@1",
        "SIGINT",
    )
    assert code == 130 and took < STOP_S, (code, took)
    assert "interrupted in the heldout stage; finished trials" in capsys.readouterr().out
    with capsys.disabled():
        print(f"\nSIGINT in the held-out stage: exit 130 after {took:.1f} s")
    now = records(exp, TIMING_FILE)
    assert len(now) == 2 and {k: now[k] for k in timed} == timed, "the first model timed again"
    tested = records(exp, HELDOUT_FILE)
    assert len(tested) == 1
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert df["decode_seconds"].notna().all() and df["timing_error"].isna().all()
    assert df["heldout_error"].tolist().count(NOT_EVALUATED) == 1
    capsys.readouterr()

    # 5. its --resume, SIGTERM as the reports begin: every stage is done, nothing to requeue,
    # exit 0; nothing timed or evaluated twice
    code, _ = stopped_run([*args, "--resume"], monkeypatch, tmp_path / "reports.json", "reports")
    said = capsys.readouterr().out
    assert code == 0, said
    assert "nothing to requeue" in said
    assert records(exp, TIMING_FILE) == now
    final = records(exp, HELDOUT_FILE)
    assert len(final) == 2 and {k: final[k] for k in tested} == tested
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert sorted(df["status"]) == ["done", "done"] and df["test/bleu"].notna().all()
    assert df["decode_seconds"].notna().all() and "heldout_error" not in df

    # 6. a finished trial's checkpoints deleted: --dry-run and --resume say so once (not that it
    # starts again: Tune counts it finished), and its row keeps the decode time and test figures
    # its records hold, which nothing can measure again
    lost = sorted(exp.glob("*/timing.json"))[0].parent
    for folder in lost.glob("checkpoint_*"):
        shutil.rmtree(folder)
    assert main([*args, "--resume", "--dry-run"]) == 0
    note = f"note: 1 finished trial(s) have lost their checkpoint file (deleted or moved): {lost.name[:8]}"
    assert note in capsys.readouterr().out
    assert main([*args, "--resume"]) == 0
    said = capsys.readouterr().out
    assert note in said and "starts again from step 0" not in said, said[-3000:]
    assert records(exp, TIMING_FILE) == now and records(exp, HELDOUT_FILE) == final
    again = pd.read_csv(exp / "results.csv", dtype={"trial_id": str}).set_index("trial_id")
    before = df.set_index("trial_id")
    for column in ("decode_seconds", "test/bleu"):
        assert again[column].to_dict() == before[column].to_dict(), column
    assert again["timing_error"].isna().all(), again["timing_error"].tolist()
