"""The budget's ledger, meter and texts, and the console's names for a stopped sweep's trials,
without Ray (the real sweeps that run out of budget: test_budget.py)."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

import pytest
from sweep_helpers import tiny_spec, write_spec

from sweeps.driver.budget import Meter, trial_rates
from sweeps.plan.estimate import budget_lines, finished_trials
from sweeps.report.ledger import Ledger
from sweeps.spec import load_spec, resume_launch, save_launch
from sweeps.spec.schema import BudgetSpec, ResourcesSpec


def test_a_meter_charges_wall_and_resource_hours_and_says_once_when_a_budget_ran_out(tmp_path):
    ledger = Ledger.load(tmp_path)
    ledger.set_limits(BudgetSpec(cpu_hours=1e-9))
    meter = Meter(ledger, trial_rates(ResourcesSpec(cpu=2, gpu=0.5)))
    meter.start()
    assert meter.tick(running=3) is None  # nothing was running before this tick: nothing charged
    time.sleep(0.01)
    assert meter.tick(running=3) == "cpu_hours"  # 3 trials x 2 CPUs held since the last tick
    assert meter.tick(running=3) is None, "said once"
    meter.stop()
    back = Ledger.load(tmp_path)
    assert back.ran_out == "cpu_hours" and len(back.runs) == 1
    # 3 trials x 2 CPUs (x 0.5 GPU) from the first tick on; the wall-clock from the start
    assert 0 < back.charged["cpu_hours"] <= 6 * back.charged["hours"]
    assert back.charged["gpu_hours"] == pytest.approx(back.charged["cpu_hours"] / 4)
    # a larger budget clears it; a second run adds to the same ledger
    back.set_limits(BudgetSpec(cpu_hours=1.0))
    assert back.ran_out is None
    again = Meter(back, trial_rates(ResourcesSpec()))
    again.start()
    again.stop()
    final = Ledger.load(tmp_path)
    assert len(final.runs) == 2
    assert final.charged["hours"] == pytest.approx(sum(r["hours"] for r in final.runs))


def test_ddp_trials_hold_their_driver_cpu_and_every_worker():
    assert trial_rates(ResourcesSpec(cpu=4, gpu=1, workers=2)) == {"cpu_hours": 9, "gpu_hours": 2}


def test_dry_run_lines_show_the_budget_and_an_estimate_from_an_earlier_run(tmp_path):
    ledger = Ledger.load(tmp_path)
    ledger.set_limits(BudgetSpec(hours=2))
    assert budget_lines(ledger, 0, 4)[1].startswith("  estimate: none of training before a first")
    ledger.charged["hours"], ledger.runs = 0.5, [{"hours": 0.5}]
    lines = budget_lines(ledger, 1, 4)
    assert lines[0].startswith("budget: hours 2 (0.5 charged)")
    assert "the other 3 need about 1.5 hours more of training" in lines[2]
    # a warm start's reused trials took none of the time: 2 trained in 1 hour, 30 reused, 8 left
    # (it said the other 8 need 0.25 hours: 32 finished in the hour)
    warm = tmp_path / "warm"
    warm.mkdir()
    rows = [("done", "earlier")] * 30 + [("done", "")] * 2 + [("pending", "")] * 8
    (warm / "results.csv").write_text(
        "trial_id,status,reused\n" + "".join(f"t{i},{s},{r}\n" for i, (s, r) in enumerate(rows))
    )
    ledger.charged["hours"], ledger.runs = 1.0, [{"hours": 1.0}]
    trained, reused = finished_trials(warm)
    assert (trained, reused) == (2, 30)
    said = budget_lines(ledger, trained, 40 - reused, reused=reused)[2]
    assert "2 of 10 trials finished (30 more reused from the warm start)" in said
    assert "the other 8 need about 4 hours more of training" in said
    assert budget_lines(Ledger.load(tmp_path / "none"), 0, 4) == []  # no budget, no runs: silent
    assert not any("spent:" in line for line in lines)
    # a budget already spent: the dry run says what a --resume would meet (it stops, exit 3)
    ledger.charged["hours"] = 2.25
    ledger.set_limits(BudgetSpec(hours=2))
    (spent,) = [line for line in budget_lines(ledger, 1, 4) if "spent:" in line]
    assert "the hours budget ran out: 2.25 of 2 hours charged" in spent
    assert "--set budget.hours=N, N above 2.25" in spent
    ledger.set_limits(BudgetSpec(hours=3))  # the larger budget a resume brings: nothing to say
    assert not any("spent:" in line for line in budget_lines(ledger, 1, 4))


def test_the_stages_after_training_are_estimated_from_their_own_rate_or_the_timing_settings(
    tmp_path,
):
    """Training's estimate counts only training's charge; the timing and held-out stages are
    estimated per model at the rate of the models they finished, and the timing stage before any
    run of it from its settings' limits (max_seconds per model and measure, the processes)."""
    from sweeps.plan.estimate import PROCESS_START_S, stage_lines, timing_upper_seconds
    from sweeps.spec.schema import TimingSpec

    spec = load_spec(write_spec(tmp_path, tiny_spec("est", timing={}, heldout={}))).spec
    ledger = Ledger.load(tmp_path)
    ledger.set_limits(BudgetSpec(hours=2))
    (timing, heldout) = stage_lines(ledger, spec, 4, 2)
    bound = timing_upper_seconds(spec.timing, 4)
    assert f"at most about {bound / 3600:.3g} hours for 4 model(s)" in timing
    assert "2 evaluation(s)" in heldout and "no estimate before a first one" in heldout
    one = TimingSpec(measure=["decode"], processes=1, models_per_process=1, max_seconds=10)
    assert timing_upper_seconds(one, 1) == 10 + PROCESS_START_S + one.calibration_seconds

    ledger.runs = [{"hours": 0.4}]
    ledger.charged.update(hours=0.4, cpu_hours=0.8)
    ledger.stages = {
        "training": {"hours": 0.1, "cpu_hours": 0.1},
        "timing": {"hours": 0.2, "cpu_hours": 0.4, "models": 1},
        "heldout": {"hours": 0.1, "cpu_hours": 0.3, "models": 1},
    }
    (timing, heldout) = stage_lines(ledger, spec, 4, 2)
    assert "about 0.6 hours, 1.2 CPU-hours for the 3 model(s) not yet timed" in timing
    assert "about 0.1 hours, 0.3 CPU-hours for the 1 evaluation(s) left" in heldout
    lines = budget_lines(ledger, 1, 4, [timing, heldout])
    assert "by stage: training 0.1 hours, 0.1 CPU-hours; timing 0.2 hours" in lines[2]
    assert "the other 3 need about 0.3 hours, 0.3 CPU-hours more of training" in lines[3]
    assert lines[-2:] == [timing, heldout]


def test_a_meter_charges_each_stage_what_its_processes_hold_and_stops_in_the_stage(tmp_path):
    """Outside the Tune run a stage holds what it placed (meter.hold); the charge lands in the
    stage's own ledger entry, and a budget that runs out says in which stage."""
    ledger = Ledger.load(tmp_path)
    ledger.set_limits(BudgetSpec(cpu_hours=1e-9))
    meter = Meter(ledger, trial_rates(ResourcesSpec(cpu=1)))
    meter.start()
    assert meter.enter("training") is None and meter.tick(running=0) is None
    assert meter.enter("timing") is None
    assert meter.hold(2.0, 0.0) is None  # held from now on
    time.sleep(0.01)
    assert meter.hold(2.0, 0.0) == "cpu_hours"
    meter.count()
    # on disk at once: a kill -9 before the next save lost the models a stage had finished
    assert Ledger.load(tmp_path).stages["timing"]["models"] == 1
    meter.stop()
    back = Ledger.load(tmp_path)
    assert back.stopped_in == "timing" and back.ran_out == "cpu_hours"
    assert back.stages["training"]["cpu_hours"] == 0.0
    assert back.stages["timing"]["cpu_hours"] == pytest.approx(back.charged["cpu_hours"])
    assert back.stages["timing"]["models"] == 1
    assert sum(s["hours"] for s in back.stages.values()) == pytest.approx(back.charged["hours"])
    back.set_limits(BudgetSpec(cpu_hours=1.0))  # a larger budget: no longer stopped anywhere
    assert back.ran_out is None and back.stopped_in is None


def test_resume_may_change_the_budget_and_nothing_else(tmp_path):
    from sweeps.spec import SpecError

    save_launch(tmp_path, ["trainer.max_steps=40", "budget.hours=0.5"], None)
    overrides, _ = resume_launch(tmp_path, ["budget.hours=2"], None, "s.yaml")
    assert overrides == ["trainer.max_steps=40", "budget.hours=2"]
    assert resume_launch(tmp_path, [], None, "s.yaml")[0] == [
        "trainer.max_steps=40",
        "budget.hours=0.5",
    ]
    with pytest.raises(SpecError, match="trainer.max_steps"):
        resume_launch(tmp_path, ["trainer.max_steps=80"], None, "s.yaml")


def test_a_budget_must_be_positive(tmp_path):
    from sweeps.spec import SpecError

    path = write_spec(tmp_path, tiny_spec("bad", budget={"hours": 0}))
    with pytest.raises(SpecError, match="budget.hours"):
        load_spec(path)


def test_a_stage_stopped_by_a_resource_budget_names_that_budget(tmp_path, capsys):
    """The stop line named budget.hours whatever ran out; a resume raising it is refused again
    while the CPU-hours budget stays spent."""
    from sweeps.stages.launch_state import Launch

    ledger = Ledger.load(tmp_path)
    ledger.set_limits(BudgetSpec(hours=5, cpu_hours=1e-9))
    meter = Meter(ledger, trial_rates(ResourcesSpec(cpu=1)))
    meter.start()
    stop = SimpleNamespace(signal=None, interrupted=False)
    launch = Launch(plan=None, args=None, profile=None, stop=stop, listeners=[], meter=meter)
    assert launch.poll(2.0, 0.0) is False  # nothing held before: nothing charged yet
    time.sleep(0.01)
    assert launch.poll(2.0, 0.0) is True
    meter.stop()
    err = capsys.readouterr().err
    assert "--resume --set budget.cpu_hours=..." in err and "budget.hours=" not in err


def test_the_console_calls_trials_a_stop_ended_by_its_name_not_terminated(tmp_path):
    """Tune ends the running trials of a stopped sweep as TERMINATED; the console's last table and
    line call those `budget` while a budget stop is in progress, `unfinished` after a Ctrl-C (the
    trials that ended on their own stay finished), as results.csv does."""
    from sweeps.driver.budget import charging
    from sweeps.driver.console import SweepConsole

    def trial(trial_id: str, status: str) -> SimpleNamespace:
        return SimpleNamespace(
            trial_id=trial_id, status=status, last_result={"val/bleu": 1.0}, config={}
        )

    console = SweepConsole(4, [], "val/bleu", "max", out=io.StringIO())
    console.setup()
    console.on_step_begin(0, [trial("a", "TERMINATED")])  # finished in an earlier run
    console.on_trial_complete(1, [], trial("b", "TERMINATED"))
    trials = [trial("a", "TERMINATED"), trial("b", "TERMINATED"), trial("c", "TERMINATED")]
    # stopped, but not by a budget or a preemption (Ctrl-C): results.csv's unfinished
    ctrl_c = console._held(trials)
    assert ctrl_c == {"c": "unfinished"}
    assert console.progress_line(trials, ctrl_c).startswith(
        "[4 trials] 2 finished, 0 running, 0 pending, 0 failed, 2 unfinished |"
    ), "a stopped trial, and the one never created, counted finished"
    meter = Meter(Ledger.load(tmp_path), {})
    with charging(meter):
        meter.stopping = "hours"
        held = console._held(trials)
    assert held == {"c": "budget"}
    line = console.progress_line(trials, held)
    # the trial never created (4 planned) is left to the next run as well
    assert line.startswith("[4 trials] 2 finished, 0 running, 0 pending, 0 failed, 2 budget |"), (
        line
    )
    assert [row.split()[1] for row in console.table(trials, held).splitlines()[1:]] == [
        "done",  # as results.csv calls them
        "done",
        "budget",
    ]


def test_a_ledger_saved_before_tune_starts_does_not_make_the_folder_a_sweep(tmp_path):
    """The budget ledger is saved every SAVE_EVERY seconds from the first stage on: a data or Ray
    stage slower than that writes budget.json before Tune has written anything. The launch must
    still take the folder for a new sweep (it refused its own run on a loaded machine), and
    ``--resume`` must still find nothing to resume there."""
    from sweeps.stages.train import holds_sweep

    folder = tmp_path / "quickstart"
    folder.mkdir()
    save_launch(folder, ["seeds=[0]"], None)
    Ledger(folder / "budget.json").save()
    assert sorted(p.name for p in folder.iterdir()) == ["budget.json", "launch.json"]
    assert not holds_sweep(str(folder))
    (folder / "tuner.pkl").write_bytes(b"")  # what Tune writes first
    assert holds_sweep(str(folder))


def test_hours_never_print_in_exponent_form_and_the_larger_budget_reads_back_as_a_number(tmp_path):
    """A stage of a hundredth of a second, or a sweep of thousands of GPU-hours, prints as a reader
    writes it; the ``--set budget.KEY=...`` of the hint is a number to YAML (``2e+03`` is text)."""
    import yaml

    from sweeps.report.ledger import hours_figure

    figures = [hours_figure(h) for h in (0, 2.92e-6, 1e-4, 0.00439, 999.4, 999.6, 1234.5)]
    assert figures == ["0", "<0.0001", "0.0001", "0.00439", "999", "1,000", "1,234"]
    ledger = Ledger.load(tmp_path)
    ledger.runs = [{"hours": 0.01}]
    ledger.charged.update(hours=0.01, gpu_hours=1200.0)
    ledger.stages = {"setup": {"hours": 2.92e-6}, "training": {"hours": 0.01}}
    assert ledger.stages_text() == "setup <0.0001 hours; training 0.01 hours"
    ledger.limits, ledger.ran_out = {"gpu_hours": 1000.0}, "gpu_hours"
    hint = ledger.extend_hint("python sweeps/launch.py x.yaml")
    assert "the gpu_hours budget ran out: 1,200 of 1,000 GPU-hours charged" in hint
    value = hint.rpartition("--set budget.gpu_hours=")[2]
    assert value == "2000" and yaml.safe_load(value) == 2000


def test_a_gpu_hours_budget_on_trials_that_hold_no_gpu_is_said_to_bound_no_training(tmp_path):
    """budget.gpu_hours on a CPU sweep: training charges none, so the budget never stops it; the
    dry run said only the budget."""
    from sweep_helpers import base_spec

    from sweeps.plan.estimate import launch_lines
    from sweeps.spec import build_sweep

    def said(**budget):
        raw = base_spec(budget=budget, resources={"cpu": 1, "gpu": 0})
        return launch_lines(tmp_path, build_sweep(raw, source="x.yaml"))

    lines = said(gpu_hours=5)
    assert lines[0].startswith("budget: ") and "gpu_hours 5" in lines[0]
    assert any(line.startswith("  gpu_hours: the trials hold no GPU") for line in lines), lines
    assert not any("hold no GPU" in line for line in said(hours=5))
