"""What ``--resume`` reads, checked before Ray starts: the Optuna journal and Tune's experiment
state of a study's folder.

Tune restores a study from its experiment state and the searcher's (here, the Optuna journal's).
When either cannot be read, Tune logs "Failed to restore the run state" and starts the whole
experiment again, and the sweep's finished trials drop out of its results. So a damaged file is
found here first and named with its line:

- a line of ``optuna.journal`` that is not a JSON record (a stray write, a disk error) is taken
  out; the original file is kept beside it as ``optuna.journal.damaged-<time>`` and the launcher
  says which lines went. A last line cut short (a process killed while writing) is what Optuna
  itself skips, and is left alone. An Optuna trial whose record went with such a line and stays
  RUNNING is marked FAIL on restore (:meth:`sweeps.search.StudySearcher._fail_orphans`);
- an experiment state Tune cannot parse is refused, with what to do: nothing is restarted.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from .cluster import LaunchError


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
    tmp = journal.with_name(journal.name + ".tmp")
    tmp.write_bytes(b"".join(kept))
    tmp.replace(journal)
    return [f"{journal}: removed {len(removed)} line(s) that are not Optuna records: {', '.join(removed)}; "
            f"the original is kept as {backup}"]


def check_experiment_state(experiment: Path) -> None:
    """Refuse to resume from a Tune experiment state that does not parse (Tune would start the
    experiment again)."""
    for state in sorted(experiment.glob("experiment_state-*.json")):
        try:
            json.loads(state.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise LaunchError(
                f"--resume: Tune's experiment state {state} is damaged ({exc}); Tune would start the whole "
                f"sweep again. Put back a good copy of that file (the finished trials' folders beside it are "
                f"intact), then --resume again."
            ) from None


def check_before_resume(out_dir: Path, experiment: Path) -> list[str]:
    """Both checks for a local study folder; returns the repairs made, to be said."""
    check_experiment_state(experiment)
    return repair_journal(out_dir / "optuna.journal")
