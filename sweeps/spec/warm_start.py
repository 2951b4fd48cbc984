"""The sweep file's ``warm_start`` key as the spec checks it: which earlier sweep folder it names,
and that the folder holds what a warm start reads. What a warm start then reuses is
:mod:`sweeps.plan.warm_start`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweeps.errors import SpecError
from sweeps.layout import OPTUNA_JOURNAL, RESULTS_CSV, recorded


def earlier_folder(path: str | Path) -> Path:
    """The earlier sweep's folder, from the folder itself or its journal."""
    p = Path(path).expanduser()
    return p.parent if p.is_file() else p


def check_warm_start(spec: Any, source: str | None = None, resumed: Path | None = None) -> None:
    """``warm_start`` must name an earlier sweep's output folder (holding ``results.csv`` or
    ``optuna.journal``) or its journal; said at ``--dry-run``. A resume (``resumed``: its
    ``--output``) whose first launch recorded its warm start keeps that one and needs no folder."""
    if not spec.warm_start:
        return
    if resumed is not None and isinstance(recorded(resumed / spec.name).get("warm_start"), dict):
        return
    folder = earlier_folder(spec.warm_start)
    if not ((folder / RESULTS_CSV).is_file() or (folder / OPTUNA_JOURNAL).is_file()):
        raise SpecError(
            "warm_start",
            f"{spec.warm_start} is not an earlier sweep's output: no {RESULTS_CSV} or {OPTUNA_JOURNAL} "
            f"in {folder}; point it at <output>/<name> of the earlier run (or its {OPTUNA_JOURNAL})",
            source,
        )
