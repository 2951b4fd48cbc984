"""One launch at a time in a sweep's folder.

A second launch of the same sweep while the first still runs (``--resume`` typed in another
terminal, a second job of one SLURM script) would run a second Tune driver on the same experiment:
both write the trials' folders, results.csv and the budget ledger, and each overwrites what the
other wrote. The running launch holds an advisory lock on ``.launch.lock`` in the sweep's folder
(``flock``); a launch that cannot take it stops before anything starts and names the launch that
holds it (at once where the holder is on this host; after up to two minutes where it is on
another, whose lock on NFS outlives a node that died until the node's lease runs out). The kernel
releases the lock when its process ends, however it ends (``kill -9`` included), so a dead launch
never blocks the next. A filesystem without locks (some Lustre
mounts) goes without: the lock is a guard, not a requirement.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO

from sweeps.errors import LaunchError
from sweeps.layout import LOCK_FILE, held_lock_record, lock_record

#: seconds a launch waits for a lock held from another host before it refuses: a lock on NFS
#: whose node died is released when the node's lease runs out (90 s by default), and a requeued
#: SLURM job can start on another node before that
OTHER_HOST_WAIT_S = 120.0


def hold_launch_lock(
    out_dir: Path, command: str, other_host_wait_s: float = OTHER_HOST_WAIT_S
) -> IO[str] | None:
    """Take the sweep folder's launch lock for the life of this process and record who holds it;
    returns the open lock file (keep it) or None where the filesystem has no locks. Raises
    :class:`LaunchError` naming the holder when another live launch has it: at once where the
    holder is on this host, after ``other_host_wait_s`` where it is on another."""
    path = Path(out_dir) / LOCK_FILE
    try:
        lock = path.open("a+", encoding="utf-8")
    except OSError:  # another user's lock file: the folder's other checks speak for it
        return None
    deadline, told = time.monotonic() + other_host_wait_s, False
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            lock.seek(0)
            text = lock.read()
            host = lock_record(text).get("host")
            if host in (None, socket.gethostname()) or time.monotonic() >= deadline:
                lock.close()
                raise LaunchError(held_by(text, path)) from None
            if not told:
                print(
                    f"a launch on {host} holds this sweep ({path}); waiting up to "
                    f"{other_host_wait_s:.0f} s for it to end (a lock of a node that died is "
                    "released when its lease runs out)",
                    flush=True,
                )
                told = True
            time.sleep(min(0.5, other_host_wait_s))
        except OSError:  # no locks on this filesystem
            lock.close()
            return None
    lock.seek(0)
    lock.truncate()
    lock.write(
        json.dumps(
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "command": command,
            }
        )
        + "\n"
    )
    lock.flush()
    return lock


def running_launch(out_dir: Path) -> str | None:
    """What a launch here would say because another holds the folder's lock, or None (no lock
    file, nobody holds it, or no locks on this filesystem). Writes nothing: ``--dry-run`` asks."""
    path = Path(out_dir) / LOCK_FILE
    text = held_lock_record(path)
    return None if text is None else held_by(text, path)


def held_by(text: str, path: Path) -> str:
    """What a launch that finds the lock held says, from the holder's record ``text``."""
    record = lock_record(text)
    try:
        who = (
            f"pid {record['pid']} on {record['host']} since {record['since']}: {record['command']}"
        )
        kill = f", or kill -INT {record['pid']} on {record['host']}"
    except KeyError:
        who, kill = "its record could not be read", ""
    return (
        f"another launch is running this sweep now ({who}); two would overwrite each other's "
        f"trials and results. Wait for it to end, or stop it (Ctrl-C in its terminal{kill}), then "
        f"run this command again. (Lock: {path})"
    )
