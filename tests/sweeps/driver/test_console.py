"""The console's live table names a trial's state as results.csv's ``status`` column does."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

pytest.importorskip("ray")

from sweeps.driver.console import SweepConsole  # noqa: E402
from sweeps.report.results import trial_status  # noqa: E402

MAX_STEPS = 40


def trial(trial_id: str, status: str, **result) -> SimpleNamespace:
    return SimpleNamespace(
        trial_id=trial_id,
        status=status,
        config={"cell": "K=4", "seed": 0},
        last_result={"val/bleu": 50.0, **result} if result else {},
    )


# (Tune's status, the last report) -> results.csv's status, and the table's
CASES = [
    (trial("ran", "TERMINATED", step=MAX_STEPS), "done"),
    (trial("asha", "TERMINATED", step=10), "stopped"),
    (trial("conv", "TERMINATED", step=20, converged=True), "converged"),
    (trial("crash", "ERROR", step=10), "error"),
    (trial("live", "RUNNING", step=10), "running"),
    (trial("rung", "PAUSED", step=10), "waiting"),
    (trial("new", "PENDING"), "pending"),
]


def statuses(console: SweepConsole, trials: list) -> dict[str, str]:
    """trial id -> the table's status column (running trials first, then those with a metric)."""
    rows = console.table(trials).splitlines()[1:]
    return {row.split()[0]: row.split()[1] for row in rows}


def test_the_table_names_ended_trials_as_results_csv_does():
    console = SweepConsole(len(CASES), [], "val/bleu", "max", max_steps={"K=4": MAX_STEPS})
    trials = [t for t, _ in CASES]
    shown = statuses(console, trials)
    for t, expected in CASES:
        assert console.state(t) == expected, t.trial_id
        if t.status in ("TERMINATED", "ERROR"):
            # the very function that writes results.csv's row gives the same word
            assert trial_status(t.status, t.last_result, MAX_STEPS) == expected
            assert shown[t.trial_id] == expected
    assert shown["live"] == "running"
    assert "TERMINATED" not in console.table(trials)


def test_without_max_steps_a_finished_trial_is_done_not_stopped():
    """A console pickled by an older version (no max_steps) still names a finished trial."""
    console = SweepConsole(1, [], "val/bleu", "max", out=io.StringIO())
    del console.max_steps
    assert console.state(trial("asha", "TERMINATED", step=10)) == "done"


def test_a_trial_waiting_to_run_again_is_unfinished_without_its_earlier_failure():
    """A sweep stopped while a failed trial waited for its retry, or while a student whose teacher
    had failed waited for that teacher's new training: its row is ``unfinished`` (``--resume`` runs
    it), with no error; the same trial ended by the failure is an ``error`` with the reason."""
    from sweeps.report.results import row_from_result
    from sweeps.spec import load_spec

    plan = load_spec("sweeps/quickstart.yaml").plans[0]
    reason = "its teacher (attention=bahdanau seed=0) failed: trial t1: boom"
    cases = (({}, RuntimeError("boom"), "boom"), ({"teacher_error": reason}, None, reason))
    for metrics, error, said in cases:
        result = SimpleNamespace(
            metrics={"step": 0, **metrics}, error=error, checkpoint=None, path="/x/t2", config={}
        )
        waiting = row_from_result(result, plan, [], MAX_STEPS, tune_status="PENDING")
        assert waiting["status"] == "unfinished" and waiting["error"] is None
        ended = row_from_result(result, plan, [], MAX_STEPS, tune_status="ERROR")
        assert ended["status"] == "error" and said in ended["error"]


def test_tunes_warning_of_trials_not_yet_reported_is_dropped_and_others_pass(caplog):
    """After a stop, Tune's results reader warns (twice) of a trial that had just started and had
    written no result file; results.csv lists it anyway. Any other failure it names still shows."""
    import logging

    from sweeps.driver.console import ANALYSIS_LOGGER, quiet_unreported

    log = logging.getLogger(ANALYSIS_LOGGER)
    unreported = (
        "- run_trial_d39a9729: FileNotFoundError('Could not fetch metrics for run_trial_d39a9729: "
        "both result.json and progress.csv were not found at /out/quickstart/d39a9729')"
    )
    other = "- run_trial_0eca54f2: JSONDecodeError('Expecting value: line 1 column 1 (char 0)')"
    with caplog.at_level(logging.WARNING, logger=ANALYSIS_LOGGER):
        with quiet_unreported():
            log.warning(f"Failed to fetch metrics for 1 trial(s):\n{unreported}")
            assert caplog.records == []
            log.warning(f"Failed to fetch metrics for 2 trial(s):\n{unreported}\n{other}")
            log.warning("another warning")
        log.warning(f"Failed to fetch metrics for 1 trial(s):\n{unreported}")  # outside: shown
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3 and "JSONDecodeError" in said[0] and said[1] == "another warning"
    assert log.filters == []


def test_tunes_own_resume_advice_after_a_stop_is_dropped(caplog):
    """A stopped launch prints its own --resume command; Tune's "Resume experiment with:
    Tuner.restore(...)" beside it was a second, different instruction. Its other warnings pass."""
    import logging

    from sweeps.driver.console import RUN_LOGGER, quiet_unreported

    log = logging.getLogger(RUN_LOGGER)
    advice = (
        "Experiment has been interrupted, but the most recent state was saved.\n"
        'Resume experiment with: Tuner.restore(path="/out/k_vs_length", trainable=...)'
    )
    stop = "Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run."
    with caplog.at_level(logging.WARNING, logger=RUN_LOGGER):
        with quiet_unreported():
            log.warning(advice)
            log.warning(stop)  # a real Ctrl-C: Tune's line stays
        log.warning(advice)  # outside the launch's Tune run: shown
    said = [r.getMessage() for r in caplog.records]
    assert said[0].startswith("Stop signal received") and said[1] == advice and len(said) == 2
    assert log.filters == []


def test_tunes_ctrl_c_line_is_dropped_where_the_launcher_stopped_the_run_itself(
    caplog, monkeypatch
):
    """A preemption or a spent budget stops Tune by a SIGINT the launcher sends itself, after its
    own line saying why; Tune's "Stop signal received (e.g. via SIGINT/Ctrl+C) ... Press CTRL+C
    to skip" beside it spoke of a Ctrl-C nobody pressed."""
    import logging

    from sweeps.driver import preemption
    from sweeps.driver.console import RUN_LOGGER, quiet_unreported

    monkeypatch.setattr(preemption, "_launcher_stopped", True)  # as stop_tune leaves it
    log = logging.getLogger(RUN_LOGGER)
    with caplog.at_level(logging.WARNING, logger=RUN_LOGGER), quiet_unreported():
        log.warning("Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run.")
        log.warning("another warning")
    assert [r.getMessage() for r in caplog.records] == ["another warning"]


def test_tunes_routine_bookkeeping_lines_are_dropped_and_its_other_warnings_pass(caplog):
    """Tune's warnings about its experiment-state snapshots, a resumed trial's result file not
    yet in storage, its "Wrote the latest version" line, the ERROR "Trials did not complete" after
    a stop and the INFO "Restoring the run" of a resume ask nothing of the launcher's user; the
    loggers' other lines still show, and only while the launch's Tune run lasts."""
    import importlib
    import inspect
    import logging

    from sweeps.driver.console import ROUTINE, quiet_unreported

    for name, starts in ROUTINE.items():  # the loggers are Ray's modules, and say these words
        source = inspect.getsource(importlib.import_module(name))
        assert all(start in source for start in starts), (name, starts)
    with caplog.at_level(logging.INFO):
        with quiet_unreported():
            for name, starts in ROUTINE.items():
                for start in starts:
                    logging.getLogger(name).warning(f"{start} (this run's words)")
                logging.getLogger(name).warning(f"something else from {name}")
        name, starts = next(iter(ROUTINE.items()))
        logging.getLogger(name).warning(f"{starts[0]} after the run")
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"something else from {n}" for n in ROUTINE] + [f"{starts[0]} after the run"]
    assert all(logging.getLogger(n).filters == [] for n in ROUTINE)


def test_a_local_ray_start_holds_rays_start_lines_and_no_others():
    """Starting the launcher's private Ray, Ray warned that token authentication is on and said it
    started a local instance, beside the launcher's own two lines. The loggers are Ray's modules and
    say those words; held while the block runs, set back after."""
    import importlib
    import inspect
    import logging

    from sweeps.driver.cluster import LOCAL_START_LOGGERS, quiet_loggers

    words = {
        "ray._private.authentication.authentication_token_setup": "Token authentication is enabled",
        "ray._private.worker": "Started a local Ray instance",
    }
    assert set(words) == set(LOCAL_START_LOGGERS)
    for name, text in words.items():
        assert text in inspect.getsource(importlib.import_module(name)), name
    worker = logging.getLogger("ray._private.worker")
    before = worker.level
    with quiet_loggers(LOCAL_START_LOGGERS):
        assert not worker.isEnabledFor(logging.INFO) and worker.isEnabledFor(logging.WARNING)
        auth = logging.getLogger("ray._private.authentication.authentication_token_setup")
        assert not auth.isEnabledFor(logging.WARNING) and auth.isEnabledFor(logging.ERROR)
    assert worker.level == before


def test_tunes_own_reporter_is_off_below_verbose_2_and_the_setting_set_back(monkeypatch):
    import os

    from sweeps.driver.console import NEW_OUTPUT_ENV, tune_reporter

    monkeypatch.delenv(NEW_OUTPUT_ENV, raising=False)
    with tune_reporter(1):
        assert os.environ[NEW_OUTPUT_ENV] == "0"
    assert NEW_OUTPUT_ENV not in os.environ
    with tune_reporter(2):
        assert NEW_OUTPUT_ENV not in os.environ
    monkeypatch.setenv(NEW_OUTPUT_ENV, "1")
    with tune_reporter(0):
        assert os.environ[NEW_OUTPUT_ENV] == "0"
    assert os.environ[NEW_OUTPUT_ENV] == "1"


def test_a_resume_of_a_sweep_whose_every_trial_ended_names_them_as_they_ended():
    """Every trial ended in an earlier run: Tune runs no step (so no ``on_step_begin``) and ends at
    once; the last table and line name them as results.csv does, not ``unfinished``."""
    out = io.StringIO()
    console = SweepConsole(3, [], "val/bleu", "max", out=out, max_steps={"K=4": MAX_STEPS})
    trials = [
        trial("ran", "TERMINATED", step=MAX_STEPS),
        trial("asha", "TERMINATED", step=10),
        trial("crash", "ERROR", step=10),
    ]
    console.setup()
    console.on_experiment_end(trials)
    said = out.getvalue()
    assert "unfinished" not in said, said
    assert said.splitlines()[-1].startswith(
        "[3 trials] 2 finished, 0 running, 0 pending, 1 failed |"
    )
    rows = {line.split()[0]: line.split()[1] for line in said.splitlines()[1:-1]}
    assert rows == {"ran": "done", "asha": "stopped", "crash": "error"}


def test_the_first_line_of_a_resume_counts_trials_finished_after_tunes_last_save(tmp_path):
    """A launcher killed after a trial finished but before Tune saved its state: the resumed run's
    Tune has that trial pending (to report its earlier result again); the first line counts it
    finished, as its own result.json says, and a trial that had not finished as pending."""
    out = io.StringIO()
    console = SweepConsole(3, [], "val/bleu", "max", out=out, max_steps={"K=4": MAX_STEPS})
    finished, cut = tmp_path / "finished", tmp_path / "cut"
    for folder, last in ((finished, MAX_STEPS), (cut, 20)):
        folder.mkdir()
        reports = [{"step": s, "val/bleu": 1.0} for s in range(10, last + 1, 10)]
        (folder / "result.json").write_text("".join(json.dumps(r) + "\n" for r in reports))
    trials = [
        trial("before", "TERMINATED", step=MAX_STEPS),
        SimpleNamespace(**{**vars(trial("stale", "PENDING", step=20)), "path": str(finished)}),
        SimpleNamespace(**{**vars(trial("cut", "PENDING", step=20)), "path": str(cut)}),
    ]
    console.setup()
    console.on_step_begin(0, trials)
    console.on_step_end(1, trials)
    line = out.getvalue().splitlines()[-1]
    assert line.startswith("[3 trials] 2 finished, 0 running, 1 pending, 0 failed |"), line


def test_optunas_line_for_a_trial_told_twice_is_dropped_while_tune_runs():
    """A resumed trial re-reports its last result; the searcher tells Optuna again on purpose
    (skip_if_finished), and Optuna's INFO "Skipped telling trial 0 ... already finished" reached
    the console of a resumed search."""
    import logging

    import optuna

    from sweeps.driver.console import OPTUNA_TELL_LOGGER, quiet_unreported

    said: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(OPTUNA_TELL_LOGGER)
    logger.addHandler(handler)
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        study = optuna.create_study()
        trial = study.ask()
        study.tell(trial, 1.0)
        with quiet_unreported():
            study.tell(trial.number, 1.0, skip_if_finished=True)
        assert said == []
        study.tell(trial.number, 1.0, skip_if_finished=True)  # outside a launch: Optuna's own
        assert len(said) == 1 and said[0].startswith("Skipped telling trial 0")
    finally:
        logger.removeHandler(handler)
        optuna.logging.set_verbosity(level)


def test_a_trial_held_before_it_starts_is_pending_not_waiting_at_a_rung():
    """The scheduler holds trials PAUSED before they start (a fused group's partners first, a
    student until its teacher ends): the table and progress line call them pending; a trial
    PAUSED at a rung is still waiting."""
    from ray.tune.experiment import Trial

    from sweeps.schedulers.per_unit import SweepFIFO

    g1a = SimpleNamespace(
        trial_id="g1a",
        status="RUNNING",
        config={"cell": "K=4", "seed": 0, "fused_with": "g1", "fused_member": "1/2"},
        last_result={},
    )
    lone, rung = trial("lone", "PENDING"), trial("rung", "PAUSED", step=10)
    tune = SimpleNamespace(
        get_trials=lambda: [g1a, lone, rung],
        _set_trial_status=lambda t, s: setattr(t, "status", s),
    )
    assert SweepFIFO().choose_trial_to_run(tune) is None  # g1's partner comes first
    assert lone.status == Trial.PAUSED
    console = SweepConsole(3, [], "val/bleu", "max", out=io.StringIO())
    assert console.state(lone) == "pending"
    assert console.state(rung) == "waiting"
    assert "1 running, 1 waiting at a rung, 1 pending" in console.progress_line([g1a, lone, rung])


def test_the_unread_result_of_a_trial_killed_by_a_second_ctrl_c_is_not_printed(caplog):
    """A second Ctrl-C stops Tune at once: each running member of a fused group left its training
    call's result unread, and Ray printed its ActorDiedError traceback (about 40 lines a group)
    after the launch's own lines. Any other unread error is still printed."""
    import logging

    import ray._private.worker as ray_worker
    from ray.exceptions import ActorDiedError

    from sweeps.driver.console import StoppedTrialErrors, quiet_stopped_trials

    quiet_stopped_trials()
    quiet_stopped_trials()  # once per process, however often a launch runs in it
    assert sum(isinstance(f, StoppedTrialErrors) for f in ray_worker.logger.filters) == 1
    with caplog.at_level(logging.ERROR, logger=ray_worker.logger.name):
        ray_worker._unhandled_error_handler(ActorDiedError())
        ray_worker._unhandled_error_handler(RuntimeError("ray.exceptions.ActorDiedError: gone"))
        ray_worker._unhandled_error_handler(ValueError("boom"))
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].endswith(": boom"), said
