"""The lines the launcher prints after a sweep that point at its records, run as printed: the
Optuna command names the studies the journal holds (no Ray; a journal Optuna itself writes)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from sweeps.layout import python_command
from sweeps.spec import load_spec
from sweeps.stages.results import _optuna_hint

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.train  # runs the optuna CLI: seconds


def test_the_optuna_hint_names_every_study_of_a_sweep_with_several(tmp_path, capsys):
    """minimal_k keeps one study per length and seed; the hint named one of the four, and
    `optuna trials` needs a study's name to say anything."""
    sweep = load_spec(ROOT / "sweeps" / "minimal_k.yaml", profile="smoke")
    journal = tmp_path / "optuna.journal"
    storage = JournalStorage(JournalFileBackend(str(journal)))
    names = [f"{sweep.name}/{p.unit}" for p in sweep.plans]
    for name in names:
        optuna.create_study(study_name=name, storage=storage).enqueue_trial({"x": 1})
    launch = SimpleNamespace(sweep=sweep, journal=journal, spec=sweep.spec)
    _optuna_hint(launch)
    head, trials_cmd, _ = capsys.readouterr().out.splitlines()
    assert head.endswith(f"{', '.join(names)} ({len(names)})") and len(names) == 4
    assert set(names) == set(optuna.get_all_study_names(storage))
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    done = subprocess.run(trials_cmd, shell=True, capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "WAITING" in done.stdout, done.stderr
    assert shlex.split(trials_cmd, comments=True)[-1] == names[0]


def test_ray_prints_its_process_prefixes_without_colour_codes_into_a_file(monkeypatch):
    """A launch's output sent to a file or a pipe held Ray's colour codes raw around every
    `(run_member_trial pid=...)` prefix; on a terminal the colours stay, and a user's
    RAY_COLOR_PREFIX is kept. The setting outlives the launch (not in LAUNCH_ENV): Ray's workers
    print their teardown lines as the process exits."""
    import io

    from sweeps.stages.pipeline import LAUNCH_ENV, plain_prefixes

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert "RAY_COLOR_PREFIX" not in LAUNCH_ENV
    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    monkeypatch.setattr(sys, "stdout", Terminal())
    plain_prefixes()
    assert "RAY_COLOR_PREFIX" not in os.environ
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    plain_prefixes()
    assert os.environ["RAY_COLOR_PREFIX"] == "0"
    monkeypatch.setenv("RAY_COLOR_PREFIX", "1")
    plain_prefixes()
    assert os.environ["RAY_COLOR_PREFIX"] == "1"


def test_the_retry_of_failed_trials_leaves_the_injected_faults_out():
    """After trials failed under ``--set chaos.fail_before_first_report=true``, "retry them with"
    repeated that --set, and a resume keeps the recorded one anyway: following it failed every
    trial again. The retry switches each injected fault off and keeps the other --set values."""
    from argparse import Namespace

    from sweeps.stages.launch_state import Launch
    from sweeps.stages.results import retry_command

    sets = ["chaos.fail_before_first_report=true", "failure.max_failures=0"]
    sweep = load_spec(ROOT / "sweeps" / "quickstart.yaml", overrides=sets, profile="smoke")
    args = Namespace(spec="q.yaml", output="out", resume=False, overrides=sets)
    launch = Launch(plan=SimpleNamespace(sweep=sweep), args=args, profile="smoke", stop=None)
    assert retry_command(launch) == (
        f"{python_command()} sweeps/launch.py q.yaml --resume --output out --profile smoke "
        "--set failure.max_failures=0 --set chaos.fail_before_first_report=false"
    )
    clean = load_spec(ROOT / "sweeps" / "quickstart.yaml", profile="smoke")
    launch = Launch(plan=SimpleNamespace(sweep=clean), args=args, profile="smoke", stop=None)
    assert retry_command(launch) == launch.resume_cmd
