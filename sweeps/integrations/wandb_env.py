"""W&B's mode for a sweep (online with credentials, offline without) and the upload hint.
The API key is never read into the sweep: wandb finds it in the environment or its own login."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlparse

from sweeps.errors import LaunchError
from sweeps.integrations.wandb_runs import run_is_empty, run_problem
from sweeps.layout import wandb_command


def wandb_has_credentials() -> bool:
    """True when W&B can go online: an API key in the environment or in W&B's own login (netrc)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        import netrc

        host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def resolve_wandb_mode(mode: str) -> str:
    env = os.environ.get("WANDB_MODE")
    if env in ("offline", "disabled", "online") and mode == "auto":
        return env
    if mode == "auto":
        return "online" if wandb_has_credentials() else "offline"
    if mode == "online" and not wandb_has_credentials():
        raise LaunchError(
            "wandb.mode is online but no W&B credentials were found: `export WANDB_API_KEY=...` or "
            "`wandb login` (never put the key in the sweep file), or use wandb.mode: offline"
        )
    return mode


class SyncHint(NamedTuple):
    """What :func:`wandb_sync_hint` finds in a sweep's ``wandb/`` folder."""

    command: str | None  # uploads every complete run (None: there is none)
    broken: list[tuple[str, str]]  # run folders that would not upload whole, and why
    empty: list[str]  # run folders with nothing logged (left out; nothing lost)


def wandb_sync_hint(out_dir: Path) -> SyncHint:
    """The command that uploads a sweep's offline runs (wandb >= 0.30 takes the run folders as
    paths; ``--include-offline`` is gone), the runs it leaves out with why, and the folders with
    nothing logged in them. ``wandb sync`` stops at the first run it cannot read and still exits
    0, so a run that is not complete is named here and the command lists the others one by one;
    a folder of a trial stopped while W&B was starting holds no record and is left out too."""

    found = sorted((out_dir / "wandb").glob("offline-run-*"))
    empty = [r.name for r in found if run_is_empty(r)]
    runs = [r for r in found if r.name not in empty]
    broken = [(r.name, problem) for r in runs if (problem := run_problem(r)) is not None]
    if not runs or len(broken) == len(runs):
        return SyncHint(None, broken, empty)
    if not broken and not empty:
        return SyncHint(f"{wandb_command()} sync {out_dir / 'wandb'}/offline-run-*", [], [])
    bad = {name for name, _ in broken}
    command = f"{wandb_command()} sync " + " ".join(str(r) for r in runs if r.name not in bad)
    return SyncHint(command, broken, empty)


def unsynced_runs(out_dir: Path) -> list[str]:
    """The sweep's offline W&B runs with something logged that ``wandb sync`` has not uploaded
    (no ``.wandb.synced`` marker beside the run's ``.wandb`` file, as wandb's own sync checks)."""
    runs = sorted((out_dir / "wandb").glob("offline-run-*"))
    return [
        r.name
        for r in runs
        if not run_is_empty(r)
        and not any(f.with_suffix(".wandb.synced").exists() for f in r.glob("*.wandb"))
    ]
