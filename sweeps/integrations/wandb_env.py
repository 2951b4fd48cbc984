"""W&B's mode for a sweep (online with credentials, offline without) and the upload hint.
The API key is never read into the sweep: wandb finds it in the environment or its own login."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from sweeps.errors import LaunchError
from sweeps.integrations.wandb_runs import run_problem


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


def wandb_sync_hint(out_dir: Path) -> tuple[str | None, list[tuple[str, str]]]:
    """The command that uploads a sweep's offline runs (wandb >= 0.30 takes the run folders as
    paths; ``--include-offline`` is gone), and the runs it leaves out with why. ``wandb sync``
    stops at the first run it cannot read and still exits 0, so a run that is not complete is
    named here and the command lists the others one by one."""

    runs = sorted((out_dir / "wandb").glob("offline-run-*"))
    broken = [(r.name, problem) for r in runs if (problem := run_problem(r)) is not None]
    if not runs or len(broken) == len(runs):
        return None, broken
    if not broken:
        return f"wandb sync {out_dir / 'wandb'}/offline-run-*", []
    bad = {name for name, _ in broken}
    return "wandb sync " + " ".join(str(r) for r in runs if r.name not in bad), broken
