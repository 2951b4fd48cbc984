"""What ``--resume`` reads, checked before Ray starts: the Optuna journal and Tune's experiment
state of a sweep's folder.

Tune restores a study from its experiment state and the searcher's (here, the Optuna journal's).
When either cannot be read, Tune logs "Failed to restore the run state" and starts the whole
experiment again, and the sweep's finished trials drop out of its results. So a damaged file is
found here first and named with its line:

- a line of ``optuna.journal`` that is not a JSON record (a stray write, a disk error) is taken
  out; the original file is kept beside it as ``optuna.journal.damaged-<time>`` and the launcher
  says which lines went. A last line cut short (a process killed while writing) is what Optuna
  itself skips, and is left alone. An Optuna trial whose record went with such a line and stays
  RUNNING is marked FAIL on restore (:meth:`sweeps.search.per_unit.PerUnit.restored`);
- a file of Tune's driver state that does not read back (a full disk or a kill cut its copy short)
  is restored from the driver's own copy of that snapshot when this machine still has it, and is
  otherwise refused, with what to do: nothing is restarted. A driver's copy is used only where it
  was written for this folder's storage (:func:`staged_for`), never a copy of the folder this
  one was copied from;
- a trial's log files cut short on the storage (Tune rewrites them at each snapshot; a full disk
  empties them, a killed launcher leaves them as its last copy had them) are restored from the driver's own copy when this machine still has it;
- an unfinished trial whose recorded checkpoint is gone (deleted by Tune's rotation after its
  last snapshot, the launcher killed in between) is pointed at its newest intact checkpoint (a
  finished one is left as recorded: Tune does not run it again); in a sweep folder
  moved or copied since, a checkpoint is looked for where it is now (Tune re-roots the recorded
  paths itself);
- the finished trials whose checkpoint file is gone are named, with the warm-started launch that
  trains them again (:func:`lost_finished_checkpoints`).
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import pickletools
import shutil
import tempfile
import time
from pathlib import Path

from sweeps.driver.cluster import LaunchError
from sweeps.layout import (
    CHECKPOINT_FILE,
    OPTUNA_JOURNAL,
    RESULTS_CSV,
    checkpoint_damaged,
    checkpoint_here,
    launch_script,
    python_command,
    write_atomic,
)
from sweeps.report.columns import FINISHED
from sweeps.spec.launch_record import recorded_flags


def repair_journal(journal: Path) -> list[str]:
    """Take the lines that are not JSON records out of an Optuna journal; returns what was done
    (one line per removed line, and where the original is), empty when the journal was whole."""
    if not journal.exists():
        return []
    raw = journal.read_bytes()
    lines = raw.splitlines(keepends=True)
    kept, removed = [], []
    for number, line in enumerate(lines, start=1):
        if number == len(lines) and not line.endswith(b"\n"):
            kept.append(line)  # cut short while being written: Optuna skips it itself
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "op_code" not in record:
                raise ValueError("not an Optuna journal record")
        except ValueError:
            text = line.decode("utf-8", "replace").strip()
            removed.append(f"line {number} ({text[:60]!r}{'...' if len(text) > 60 else ''})")
            continue
        kept.append(line)
    if not removed:
        return []
    backup = journal.with_name(f"{journal.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    shutil.copy2(journal, backup)
    write_atomic(journal, b"".join(kept))
    return [
        f"{journal}: removed {len(removed)} line(s) that are not Optuna records: {', '.join(removed)}; "
        f"the original is kept as {backup}"
    ]


#: the name a trial's TensorBoard events file starts with
TENSORBOARD_EVENTS = "events.out.tfevents"
#: the files of one snapshot of Tune's driver state, written together every few seconds
STATE_FILES = ("experiment_state-*.json", "search_gen_state-*.json", "searcher-state-*.pkl")


def damage(path: Path) -> str | None:
    """Why a file of Tune's driver state cannot be read back, or None when it can."""
    try:
        if path.name.startswith("experiment_state-"):
            json.loads(path.read_text())
        else:  # search_gen_state-*.json is a pickle too, whatever its name says
            pickle.loads(path.read_bytes())
    except Exception as exc:  # noqa: BLE001 -- whatever the reader fails on, Tune fails on too
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return None


def staging_folders(experiment: Path, states: list[str]) -> list[Path]:
    """The driver's staging folders on this machine (newest first) of the runs that wrote any of
    the state files named ``states`` for this experiment folder: Tune writes each snapshot and each
    trial's log files there first, then copies them to the storage, where a full disk or a kill
    mid-copy cuts its copies short, not these. A staging folder is this experiment's only where
    its run's own snapshot records this storage (:func:`staged_for`): a copy of a sweep folder
    holds the same state file names as its original, whose staging copies are not the copy's."""
    root = Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray"
    # the staging folder's own timestamp can differ from the state file's by a second: match the file
    return sorted(
        (
            p
            for p in root.glob(f"session_*/artifacts/*/{experiment.name}/driver_artifacts")
            if any((p / name).is_file() for name in states) and staged_for(p, experiment)
        ),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )


def staged_for(folder: Path, experiment: Path) -> bool:
    """Whether the staging folder ``folder`` is of a run whose storage was ``experiment``: the
    newest snapshot in it (the run's own; the older ones are what it found on the storage when it
    resumed) records, for its trials, the storage path and experiment folder name Tune wrote to:
    this folder, or where it was before a move (that place no longer holds it). False where that
    cannot be read, or names a folder still there: a copy's original is not this folder."""
    states = sorted(folder.glob("experiment_state-*.json"))
    if not states:
        return False
    try:
        trials = json.loads(states[-1].read_text()).get("trial_data") or []
    except (OSError, ValueError, AttributeError):
        return False
    want = (str(experiment.parent.resolve()), experiment.name)
    recorded = {_recorded_storage(entry) for entry in trials}
    if not recorded or None in recorded:
        return False
    if recorded <= {want}:
        return True
    # a folder moved since (its recorded place no longer holds the sweep) is the same sweep; a
    # copy's original, still where it was, is another
    return all(
        name == experiment.name and not (Path(path) / name).exists() for path, name in recorded
    )


def _recorded_storage(entry: object) -> tuple[str, str] | None:
    """(storage path resolved, experiment folder name) one trial of Tune's experiment state
    records: its ``storage``, a pickled ``StorageContext``, read as data (its strings), not
    loaded: a staging folder of another run or user is never unpickled here."""
    try:
        storage = json.loads(entry[0])["storage"]  # type: ignore[index]
        strings = _pickled_strings(bytes.fromhex(storage["value"]))
        path = strings[strings.index("storage_fs_path") + 1]
        name = strings[strings.index("experiment_dir_name") + 1]
    except (TypeError, ValueError, KeyError, IndexError, pickle.UnpicklingError):
        return None
    return str(Path(path).resolve()), name


def _pickled_strings(data: bytes) -> list[str]:
    """The strings of a pickle in the order it pushes them (a memoized one again where it is
    fetched back), without loading it: an object's attributes come as name, then value."""
    memo: dict[int, object] = {}
    found: list[str] = []
    last: object = None
    for op, arg, _ in pickletools.genops(data):
        if op.name == "MEMOIZE":
            memo[len(memo)] = last
            continue
        if op.name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[int(arg)] = last
            continue
        if op.name in ("GET", "BINGET", "LONG_BINGET"):
            last = memo.get(int(arg))
        else:  # a string pushed (not a GLOBAL's module and name), else something else
            last = arg if "UNICODE" in op.name or "STRING" in op.name else None
        if isinstance(last, str):
            found.append(last)
    return found


def driver_copy(experiment: Path, state: Path) -> Path | None:
    """The driver's own staging folder of the run that wrote ``state``, when this machine still has
    it and its snapshot reads back whole."""
    for folder in staging_folders(experiment, [state.name]):
        files = [f for pattern in STATE_FILES for f in folder.glob(pattern)]
        if not any(damage(f) for f in files):
            return folder
    return None


def restore_trial_files(experiment: Path) -> list[str]:
    """Tune's files of each trial (``result.json``, ``progress.csv``, ``params.*``, its TensorBoard
    events) cut short on the storage are restored from the driver's staging copy when this machine
    still has it. Tune rewrites them there in place at every snapshot: on a full disk each rewrite
    empties them, the finished trials' too, and a resumed trial then goes on from what is left
    (its ``result.json`` lost every report before the stop); a launcher killed (kill -9) leaves
    them as its last copy had them. A file is restored only where the
    storage's copy is a strict prefix of the staged one (empty, or a line or more short). What a
    stop leaves behind as a matter of course, a TensorBoard events file whose last copy did not
    run before the launch ended (Ctrl-C, a preemption), is brought up to date without a word; the
    other files are named."""
    folders = staging_folders(
        experiment, [p.name for p in experiment.glob("experiment_state-*.json")]
    )
    if not folders:
        return []
    restored: dict[str, list[str]] = {}
    for trial in sorted(p for p in experiment.iterdir() if p.is_dir()):
        staged = {
            f.name for folder in folders for f in (folder / trial.name).glob("*") if f.is_file()
        }
        for name in sorted(staged):
            stored = trial / name
            have = stored.read_bytes() if stored.is_file() else b""
            copies = [(folder / trial.name / name) for folder in folders]
            longer = [
                data
                for c in copies
                if c.is_file() and len(data := c.read_bytes()) > len(have) and data.startswith(have)
            ]
            if longer:
                write_atomic(stored, max(longer, key=len))
                restored.setdefault(trial.name, []).append(name)
    said = {
        trial: kept
        for trial, names in restored.items()
        if (kept := [n for n in names if not n.startswith(TENSORBOARD_EVENTS)])
    }
    if not said:
        return []
    files = "; ".join(f"{trial}: {', '.join(names)}" for trial, names in said.items())
    return [
        f"Tune's files of {len(said)} trial(s) on the storage were behind the driver's own copy "
        f"(its last copy did not run: the launcher was killed, the disk was full, or a copy "
        f"stopped midway); restored from that "
        f"copy: {files}"
    ]


def check_experiment_state(experiment: Path) -> list[str]:
    """Tune's driver state, read before Ray starts. A file that does not read back (Tune would log
    "Failed to restore" and start the experiment again) is restored from the driver's own copy of
    the same snapshot when this machine has it (the damaged files kept beside, and said), and is
    otherwise refused with what to do: nothing is restarted."""
    damaged = {
        f: why
        for pattern in STATE_FILES
        for f in sorted(experiment.glob(pattern))
        if (why := damage(f))
    }
    if not damaged:
        return []
    states = sorted(experiment.glob("experiment_state-*.json"))
    source = driver_copy(experiment, states[-1]) if states else None
    if source is None:
        first, why = next(iter(damaged.items()))
        raise LaunchError(
            f"--resume: Tune's state file {first} is damaged ({why}); Tune would start the whole sweep again. "
            f"Put back a good copy of that file (the finished trials' folders beside it are intact), then "
            f"--resume again."
        ) from None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for f in damaged:
        f.rename(f.with_name(f"{f.name}.damaged-{stamp}"))
    copied = [f for pattern in STATE_FILES for f in source.glob(pattern)]
    for f in copied:
        write_atomic(experiment / f.name, f.read_bytes())
    return [
        f"Tune's state {', '.join(f.name for f in damaged)} was cut short ({next(iter(damaged.values()))}); "
        f"restored this snapshot ({', '.join(f.name for f in copied)}) from the driver's own copy in {source}; "
        f"the damaged file(s) are kept as *.damaged-{stamp}"
    ]


def repoint_lost_checkpoints(experiment: Path) -> list[str]:
    """Trials whose recorded latest checkpoint is gone from disk are pointed at their newest intact
    one; returns one line per trial repointed.

    Tune deletes a trial's old checkpoints (``storage.keep_checkpoints``) as soon as a new one is
    registered, but writes its experiment state only every few seconds: a launcher killed in
    between leaves a state whose trial resumes from a deleted folder, and Ray fails the trial
    before it starts ("does not exist on storage anymore") while newer folders sit beside it.

    A finished trial (``TERMINATED``) is left as recorded: Tune does not run it again, and its
    row keeps naming the checkpoint its timing and held-out records measured; one whose file is
    gone is named by :func:`lost_finished_checkpoints`."""
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult
    from ray.tune.utils.serialization import TuneFunctionDecoder, TuneFunctionEncoder

    said = []
    for state_file in sorted(experiment.glob("experiment_state-*.json")):
        state = json.loads(state_file.read_text())
        changed = False
        for entry in state.get("trial_data", []):
            if _trial_status(entry) == "TERMINATED":
                continue
            try:  # Tune's own file, which Tune unpickles the same way when it restores
                meta = json.loads(entry[1], cls=TuneFunctionDecoder, allow_cloudpickle=True)
            except Exception:  # noqa: BLE001 -- a record this Ray cannot read: left to Tune, as before
                continue
            manager = meta.get("checkpoint_manager")
            latest = getattr(manager, "_latest_checkpoint_result", None)
            path = getattr(getattr(latest, "checkpoint", None), "path", None)
            if not path or "://" in str(path) or _here(experiment, path).is_file():
                continue
            trial_folder = _here(
                experiment, path
            ).parent.parent  # (the file, its checkpoint folder)
            intact = sorted(
                p for p in trial_folder.glob("checkpoint_*") if (p / CHECKPOINT_FILE).is_file()
            )
            kept = [
                r
                for r in manager._checkpoint_results
                if _here(experiment, r.checkpoint.path).is_file()
            ]
            if intact:
                newest = _TrainingResult(Checkpoint(path=str(intact[-1])), dict(latest.metrics))
                manager._latest_checkpoint_result = newest
                kept = [r for r in kept if r.checkpoint.path != str(intact[-1])] + [newest]
            else:
                manager._latest_checkpoint_result = None
            manager._checkpoint_results = kept
            entry[1] = json.dumps(meta, cls=TuneFunctionEncoder, indent=2)
            changed = True
            said.append(
                f"trial folder {Path(path).parent.name}: its recorded checkpoint {Path(path).name} is gone; "
                + (
                    f"it resumes from {intact[-1].name}, the newest intact one"
                    if intact
                    else "no checkpoint is left, so it starts again from step 0"
                )
            )
        if changed:
            write_atomic(state_file, json.dumps(state, indent=2))
    return said


def _trial_status(entry: object) -> str | None:
    """The status (``TERMINATED``, ``PAUSED`` ...) one trial of Tune's experiment state records."""
    try:
        return json.loads(entry[0]).get("status")  # type: ignore[index]
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        return None


def _here(experiment: Path, path: str) -> Path:
    """The checkpoint file of a checkpoint folder Tune recorded (``path``), where it is now: the
    same trial folder and checkpoint under ``experiment`` (Tune re-roots its recorded paths when
    it restores an experiment folder moved or copied since, ``Trial.set_storage``), or the
    recorded place where ``experiment`` has no such trial folder. A copy's trial is judged by the
    copy's file, even where its original's is still there."""
    recorded = Path(path)
    here = experiment / recorded.parent.name / recorded.name / CHECKPOINT_FILE
    if here.is_file() or here.parent.parent.is_dir():
        return here
    return recorded / CHECKPOINT_FILE


def lost_finished_checkpoints(out_dir: Path, spec: str, output: str) -> str:
    """On a resume, the line naming the trials results.csv records as finished whose checkpoint
    file is gone (a trial folder deleted to have it trained again, a move) or damaged (cut
    short): Tune counts them finished, so the resume does not train them; the timing and held-out
    stages cannot measure them. The line gives the launch that does train them again: a new sweep
    warm-started from this one, which reuses every trial whose checkpoint is there and whole. ""
    where none is gone or damaged."""
    try:
        with (out_dir / RESULTS_CSV).open(newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, csv.Error, UnicodeDecodeError):
        return ""
    gone, damaged = [], []
    for r in rows:
        if r.get("status") not in FINISHED:
            continue
        name = f"{r.get('trial_id')} ({r.get('cell')} seed={r.get('seed')})"
        here = checkpoint_here(r.get("checkpoint") or "", out_dir)
        if here is None:
            gone.append(name)
        elif checkpoint_damaged(here):
            damaged.append(name)
    if not gone and not damaged:
        return ""
    flags = f" {flags}" if (flags := recorded_flags(out_dir)) else ""
    said = [
        f"{len(gone)} finished trial(s) have lost their checkpoint file (deleted or moved): "
        f"{', '.join(gone)}"
        if gone
        else "",
        f"{len(damaged)} finished trial(s) have a damaged checkpoint file (cut short or not "
        f"torch's): {', '.join(damaged)}"
        if damaged
        else "",
    ]
    return (
        f"note: {'; '.join(s for s in said if s)}. Their rows keep their training figures (and "
        "where the file is gone, the timing and test figures measured before, as long as their "
        "timing.json and heldout.json are still in the trial's folder), but this resume does not "
        "train them again (Tune counts them finished) and cannot measure them again. To train "
        f"them again and keep the rest: {python_command()} {launch_script()} {spec}{flags} --set "
        f"warm_start={out_dir} --output <another folder> (with the first run's profile and --set, "
        "every trial whose checkpoint is here and whole is reused)"
    )


def check_before_resume(out_dir: Path, experiment: Path) -> list[str]:
    """The checks for a local study folder; returns the repairs made, to be said."""
    repaired = check_experiment_state(experiment) + restore_trial_files(experiment)
    return (
        repaired + repair_journal(out_dir / OPTUNA_JOURNAL) + repoint_lost_checkpoints(experiment)
    )
