"""Where a sweep's files are, and how they are written.

Every file name the package writes or reads in a sweep's output folder
(``<output>/<sweep name>/``) or in a trial's folder is named here once, so a worker learns a file
name without importing the code that reads it. One way to replace a file (:func:`write_atomic`):
write a temporary beside it, flush it to disk, rename it over the old one. A reader (or a crash)
sees the old file or the whole new one, never half of either, and a failed write (a full disk)
leaves the old file and no temporary behind.

A sweep's output folder::

    results.csv           a row for every planned trial (report.results)
    results.md            the report page, and its PNG plots beside it (report.local)
    launch.json           the first run's --set overrides and profile, reused by --resume; the
                          sweep's id; the code versions its runs trained with (codes)
    .launch.lock          held by the launch running now: a second one stops (driver.launch_lock)
    budget.json           the time charged to the sweep's budget over its runs (run.budget)
    optuna.journal        the Optuna studies, one per unit (run.searcher), with parameters
    decode_probe.json     the multi-objective search's decode-time probe (moo.probe)
    paired_bootstrap.csv  sacrebleu's paired bootstrap between models (report.findings)
    timing/<trial>/timing.json   with a bucket as storage, a trial's decode timing (timing.stage;
                          else in the trial's folder); heldout/<trial>/heldout.json likewise

A trial's folder (Ray Tune's) holds ``result.json`` (Tune's reports), ``phases.json`` (where its
wall time went) and ``trial_state.json``; each checkpoint folder holds ``checkpoint.ckpt`` and the
validation hypotheses and references of that report.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import json
import os
import stat
import sys
import tempfile
import zipfile
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RESULTS_CSV = "results.csv"
RESULTS_MD = "results.md"
LAUNCH_FILE = (
    "launch.json"  # beside a sweep's results: the --set overrides and profile of its first run
)
#: beside them: held by the launch running the sweep (sweeps.driver.launch_lock)
LOCK_FILE = ".launch.lock"
OPTUNA_JOURNAL = "optuna.journal"
BUDGET_FILE = "budget.json"
PROBE_FILE = "decode_probe.json"
BOOTSTRAP_FILE = "paired_bootstrap.csv"
TIMING_FILE = "timing.json"
#: beside a trial: its final checkpoint evaluated on the test split (sweeps.heldout)
HELDOUT_FILE = "heldout.json"
#: Ray Tune's own per-trial report log
TUNE_RESULT_FILE = "result.json"

PHASES_FILE = "phases.json"
TRIAL_STATE_FILE = "trial_state.json"
#: the file a trial's checkpoint folder holds: what the checkpoint column and Optuna point at (the
#: data package names it too, ``datamodules.checkpoint_files``, for a folder handed to
#: ``load_from_checkpoint``; it imports Lightning, which this module must not)
CHECKPOINT_FILE = "checkpoint.ckpt"
#: beside it: the validation hypotheses and references of that report, one sentence a line
HYPOTHESES_FILE = "val_hypotheses.txt"
REFERENCES_FILE = "val_references.txt"
#: sacreBLEU's signature of the validation's val/sacrebleu, beside the hypotheses (translation only)
SIGNATURE_FILE = "val_sacrebleu_signature.txt"


def finished_report(last: Mapping[str, Any], max_steps: int | None) -> bool:
    """Whether a trial's last report (the last line of its ``result.json``) ended it: Tune's
    ``done`` (a scheduler's stop), the ``stop_when`` rule's ``converged``, or ``max_steps`` reached
    (None: not known here)."""
    reached = max_steps is not None and int(last.get("step") or 0) >= max_steps
    return bool(last.get("done") or last.get("converged") or reached)


def recorded(out_dir: Path) -> dict[str, Any]:
    """The sweep's launch.json as it stands, or {} where there is none or it cannot be read: for
    what only describes the sweep (a report's notes, the W&B runs' id) or what a resume keeps of
    its first launch where that launch recorded it (:mod:`sweeps.spec.launch_record`, whose
    ``read_launch`` says a damaged record)."""
    try:
        record = json.loads((Path(out_dir) / LAUNCH_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def only_launch_files(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but what the launcher writes before Tune starts: its
    record of the run's overrides, the budget ledger (saved while a slow data or Ray stage runs)
    and the launch's lock. Such a folder holds no sweep yet."""
    return all(p.name in (LAUNCH_FILE, BUDGET_FILE, LOCK_FILE) for p in folder.iterdir())


def stopped_before_trials(folder: Path) -> bool:
    """Whether ``folder`` holds a launch's record and only what a launch writes before Tune starts:
    the launch that wrote it was refused (or killed) before any trial started."""
    return launched(folder) and only_launch_files(folder)


#: what :func:`stopped_before_trials` says of such a folder
NO_TRIAL_STARTED = f"the launch that wrote its {LAUNCH_FILE} stopped before any trial started"


def holds_local_sweep(experiment: Path) -> bool:
    """Whether a sweep's experiment folder on this machine holds a sweep's files."""
    return experiment.is_dir() and not only_launch_files(experiment)


def nothing_to_resume(path: str) -> str:
    """What ``--resume`` says when ``path`` (the experiment folder) holds no sweep; where
    ``--output`` named the sweep's own folder (``<out>/<name>``, so the launch looked in
    ``<out>/<name>/<name>``), the ``--output`` that continues it instead of starting a new
    sweep inside it."""
    folder = Path(path)
    if "://" not in path and folder.parent.name == folder.name:
        if holds_local_sweep(folder.parent):
            return (
                f"--resume: {path} holds no sweep to continue, and --output names the sweep's "
                f"own folder ({folder.parent}): pass --output {folder.parent.parent}, the folder "
                f"that holds {folder.name}/."
            )
    if "://" not in path and stopped_before_trials(folder):
        return (
            f"--resume: {path} holds no sweep to continue: {NO_TRIAL_STARTED}. Run the same "
            f"command without --resume to start the sweep."
        )
    return (
        f"--resume: {path} holds no sweep to continue. Check --output (and storage.path), or run "
        f"the same command without --resume to start the sweep."
    )


def command_path(path: Path) -> str:
    """``path`` as a command a message prints spells it: relative to the working directory where
    it lies below it, else absolute."""
    here = Path.cwd().resolve()
    return str(path.relative_to(here)) if path.is_relative_to(here) else str(path)


def python_command() -> str:
    """The Python running this launcher as a command a message prints (``.venv/bin/python`` run
    from the repository): a venv's need not be activated for the command to work."""
    return command_path(Path(os.path.abspath(sys.executable)))  # the venv's link, not its target


def wandb_command() -> str:
    """W&B's command beside that Python (``.venv/bin/wandb``), else ``wandb`` (on the PATH)."""
    beside = Path(os.path.abspath(sys.executable)).parent / "wandb"
    return command_path(beside) if beside.is_file() else "wandb"


def launch_script() -> str:
    """``sweeps/launch.py`` as the command a message prints spells it: relative to the working
    directory where the repository is below it, else absolute (a launch run from elsewhere)."""
    return command_path(Path(__file__).resolve().parent / "launch.py")


def already_holds(path: str, spec: str | None = None, output: str | None = None) -> str:
    """What a launch without ``--resume`` says when ``path`` (the experiment folder) holds a
    sweep; with the launch's sweep file and ``--output``, the command that continues it (the
    first run's ``--set`` and ``--profile`` come back by themselves on ``--resume``)."""
    how = (
        f" ({python_command()} {launch_script()} {spec} --resume --output {output})" if spec else ""
    )
    grow = (
        f" To change what it plans (more lengths, seeds or K, another setting) and keep its "
        f"finished trials, start a new sweep warm-started from it: --set warm_start="
        f"{Path(output) / Path(path).name} --output <another folder> (a trial whose plan, seed "
        f"and code are unchanged is reused, not trained again)."
        if output
        else ""
    )
    return (
        f"{path} already holds a sweep of this name. Continue it with --resume{how}, or pick "
        f"another --output (or storage.path), or delete the folder to start again.{grow}"
    )


def inside_a_sweep(output: str, spec: str | None = None) -> str | None:
    """What a new launch says when ``--output`` is itself a sweep's own folder (it holds that
    sweep's launch.json): the new sweep would be written inside it. None where it is not."""
    if "://" in str(output) or not launched(Path(output)):
        return None
    folder = Path(output).resolve()  # `--output .` in a sweep's folder: its name, its parent
    how = (
        f"{python_command()} {launch_script()} {spec} --resume --output {folder.parent}"
        if spec
        else ""
    )
    return (
        f"--output {output} is a sweep's own folder (it holds {folder.name}'s {LAUNCH_FILE}): a "
        f"new sweep would be written inside it. To continue that sweep: "
        f"{how or f'--resume --output {folder.parent}'}; for a new sweep, another --output (with "
        f"--set warm_start={output} to keep its finished trials)."
    )


def results_statuses(out_dir: Path, having: str | None = None) -> Counter[str]:
    """How many rows of each status the sweep's results.csv holds (empty without one); ``having``:
    only the rows with a value in that column."""
    path = Path(out_dir) / RESULTS_CSV
    if not path.is_file():
        return Counter()
    with path.open(newline="") as f:
        return Counter(
            row.get("status") or "?"
            for row in csv.DictReader(f)
            if having is None or row.get(having)
        )


def launched(folder: Path) -> bool:
    """Whether ``folder`` is a sweep's own folder, written by its launch (results or not): every
    launch records its overrides there first."""
    return (folder / LAUNCH_FILE).is_file()


def missing_in_sweep_folder(
    folder: Path, name: str, example: str = "sweep-results/quickstart"
) -> str | None:
    """None where ``folder`` holds the file ``name``; else what a command given the folder says:
    the sweeps inside it that hold one, or which folder to give (``example``, a sweep that has
    one)."""
    if (folder / name).is_file():
        return None
    if (folder / name).exists():  # a folder (or a device) under the file's name
        return (
            f"{folder / name}: not a file, where the launch writes its {name}; move it away "
            "(a launch's --resume writes the file again)"
        )
    if name == RESULTS_CSV and stopped_before_trials(folder):
        return (
            f"{folder}: no {name} here: {NO_TRIAL_STARTED}. Launch the sweep, without --resume: "
            f"{python_command()} {launch_script()} <its sweep file> --output {folder.parent}"
        )
    if name == RESULTS_CSV and launched(folder):
        return (
            f"{folder}: no {name} here yet. A sweep's launch writes it when the launch ends (also "
            "at Ctrl-C, a budget or a preemption); this one was killed or is still running. "
            "Continue it, which writes results.csv (Ctrl-C then writes it for the trials done so "
            f"far): {python_command()} {launch_script()} <its sweep file> --resume --output {folder.parent}"
        )
    inside = sorted(str(f.parent) for f in folder.glob(f"*/{name}") if f.is_file())
    started = [f for f in sorted(folder.glob("*/")) if launched(f)]
    if name == RESULTS_CSV and not inside and len(started) == 1:  # <output> of one killed sweep
        return missing_in_sweep_folder(started[0], name, example)
    fix = (
        f"the sweeps in it with one: {', '.join(inside)}"
        if inside
        else f"give the sweep's own folder, <output>/<name> (e.g. {example}), where its launch "
        f"wrote {name}"
    )
    return f"{folder}: no {name} here; {fix}"


def checkpoint_here(path: str, folder: Path) -> str | None:
    """Where a results.csv row's checkpoint (``path``, as the row has it) of the sweep in
    ``folder`` is now: the same file under ``folder`` by the part of the path after the sweep's
    name (a folder moved or copied since: the launch wrote ``/old/place/quickstart/<trial>/...``;
    a relative path read from another working folder), else the path itself where it is a file.
    Where the trial's folder is under ``folder`` (a copy beside its original), its checkpoint is
    that folder's, and None when gone from it even though the original's file is still there.
    None where neither is there. A bucket's path is taken as it is."""
    if not path:
        return None
    if "://" in path:
        return path
    parts = Path(path).parts
    if folder.name in parts:
        inside = parts[len(parts) - parts[::-1].index(folder.name) :]
        moved = folder.joinpath(*inside)
        if inside and moved.is_file():
            return str(moved)
        if len(inside) > 1 and (folder / inside[0]).is_dir():
            return None  # the trial is here (its checkpoint too, if any): not another copy's
    return path if Path(path).is_file() else None


def checkpoint_damaged(path: str) -> bool:
    """Whether a local checkpoint file is not whole: torch writes a zip archive whose directory
    comes last, so a file cut short (a full disk, a copy or a kill while it was written) or not
    torch's lacks it. Reads the file's end only; a bucket's path is not read (False)."""
    if "://" in path:
        return False
    try:
        return not zipfile.is_zipfile(path)
    except OSError:
        return True


def checkpoint_path(folder: str) -> str:
    """The Lightning checkpoint file in a trial's checkpoint folder (a path ``load_from_checkpoint``
    takes as it is)."""
    return folder if folder.endswith(".ckpt") else f"{folder.rstrip('/')}/{CHECKPOINT_FILE}"


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Replace ``path`` with ``data`` (text is written as UTF-8), with the permissions a file
    written in place would have: the old file's, else those the process's umask gives a new file
    (a temporary file is made readable by its owner only, and results.csv was left so)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    """The process's umask, read without setting it (``os.umask`` sets it, for every thread):
    Linux says it in /proc/self/status; elsewhere the usual 022."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


#: the URI schemes pyarrow's ``FileSystem.from_uri`` (Ray's storage) reads, besides file://
URI_SCHEMES = ("s3", "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs")


def write_problem(path: str) -> str | None:
    """Why ``path`` cannot be created or written from this process, or None when it can.
    Nothing is created: a probe file is written and removed in the nearest folder that exists
    (where ``path`` would be created). Buckets (``s3://``, ``gs://``) are left to Ray, once their
    scheme is one its storage reads (pyarrow's filesystems)."""
    scheme, sep, _ = path.partition("://")
    if sep and scheme != "file":  # pyarrow reads schemes in lower case only
        if scheme in URI_SCHEMES:
            return None
        return (
            f"unknown filesystem {scheme}:// (Ray's storage reads a URI with pyarrow, which takes "
            f"{', '.join(s + '://' for s in URI_SCHEMES)}, or a local or NFS path)"
        )
    target = Path(path.removeprefix("file://")).expanduser().absolute()
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot create or write there ({existing} is a file, not a folder)"
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        where = "" if existing == target else f" in {existing}, where it would be created"
        return f"cannot create or write there ({exc.strerror or exc}{where})"
    return None


def output_folder(text: str) -> Path:
    """An argparse ``type`` for a command's output folder: refused at once (not after the
    measurements, whose results would be lost) where it cannot be created or written."""
    problem = write_problem(text) if text.strip() else "an empty name"
    if problem:
        raise argparse.ArgumentTypeError(f"{text}: {problem}; give a folder you can write to")
    return Path(text)


def output_file(text: str) -> Path:
    """An argparse ``type`` for a file a command writes at its end: its folder writable and the
    name not a folder's, checked before the work whose result it holds."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text}: a folder; give a file name (e.g. {path}/out.json)"
        )
    problem = write_problem(str(path.parent)) if text.strip() else "an empty name"
    if problem:
        raise argparse.ArgumentTypeError(
            f"{text}: {problem}; give a file in a folder you can write to"
        )
    return path


def positive_int(text: str) -> int:
    """An argparse ``type`` for a count: a whole number, 1 or more."""
    return _whole_number(text, 1)


def nonnegative_int(text: str) -> int:
    """An argparse ``type`` for a count that may be none (warm-up passes): a whole number, 0 or more."""
    return _whole_number(text, 0)


def _whole_number(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
    return value


def lock_holder(out_dir: Path) -> str | None:
    """The launch holding the sweep folder's lock, in words (pid, host, since, command), or None
    where none does. Writes nothing."""
    text = held_lock_record(Path(out_dir) / LOCK_FILE)
    if text is None:
        return None
    record = lock_record(text)
    try:
        return (
            f"pid {record['pid']} on {record['host']} since {record['since']}: {record['command']}"
        )
    except KeyError:
        return "its record could not be read"


def held_lock_record(path: Path) -> str | None:
    """The lock file's record where a launch holds the lock (:mod:`sweeps.driver.launch_lock`),
    else None. Writes nothing."""
    try:
        lock = path.open(encoding="utf-8")
    except OSError:
        return None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return lock.read()
        except OSError:
            return None
        fcntl.flock(lock, fcntl.LOCK_UN)
    return None


def lock_record(text: str) -> dict:
    """The holder's record (pid, host, since, command), or {} where it cannot be read."""
    try:
        record = json.loads(text)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}
