"""Warm start from an earlier sweep (``warm_start: PATH``: its output folder, or its
``optuna.journal``): what the earlier run already knows is not learnt again.

- **Reused trials.** A planned trial whose resolved plan (task, model and trainer sections, Optuna's
  sampled values, the seed) and code version (:func:`code_version`) are identical to a finished row
  of the earlier ``results.csv`` (its ``plan_hash``, :func:`plan_fingerprint`) is not trained
  again: the row comes into the new results (checkpoint, timing and test figures as they were, the
  checkpoint linked by its path), marked ``reused`` with the folder it came from, and counts toward
  its (cell, seed)'s ``num_samples``.
- **Told trials.** Every Optuna study of the new sweep starts with the finished trials of the
  earlier study of the same unit or cell (matched by the name after ``<sweep>/``), told with
  ``study.add_trial`` (their values, intermediate values and distributions), where their sampled
  values fit the new search space.

``--dry-run`` prints the counts (:meth:`WarmStart.summary`). Configurations judged over seeds are
told, not reused.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeps.layout import OPTUNA_JOURNAL, RESULTS_CSV

#: the results.csv columns a warm start reads and writes
PLAN_HASH, REUSED = "plan_hash", "reused"
#: what decides how a trial trains: a change in any of these files changes every plan's fingerprint
CODE_PACKAGES = ("lightning_modules", "datamodules", "sweeps/trial")


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of the source the trials run (:data:`CODE_PACKAGES`): equal plans trained by
    different code are different trials."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for package in CODE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def plan_fingerprint(plan: Any) -> str:
    """The identity of one trial's training: its resolved sections, seed and the code version."""
    body = json.dumps(
        {"sections": plan.sections, "seed": plan.seed, "code": code_version()},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(body.encode()).hexdigest()[:20]


def earlier_folder(path: str | Path) -> Path:
    """The earlier sweep's folder, from the folder itself or its journal."""
    p = Path(path).expanduser()
    return p.parent if p.is_file() else p


def check_warm_start(spec: Any, source: str | None = None) -> None:
    """``warm_start`` must name an earlier sweep's output folder (holding ``results.csv`` or
    ``optuna.journal``) or its journal; said at ``--dry-run``."""
    from sweeps.errors import SpecError

    if not spec.warm_start:
        return
    folder = earlier_folder(spec.warm_start)
    if not ((folder / RESULTS_CSV).is_file() or (folder / OPTUNA_JOURNAL).is_file()):
        raise SpecError(
            "warm_start",
            f"{spec.warm_start} is not an earlier sweep's output: no {RESULTS_CSV} or {OPTUNA_JOURNAL} "
            f"in {folder}; point it at <output>/<name> of the earlier run (or its {OPTUNA_JOURNAL})",
            source,
        )


@dataclass
class WarmStart:
    """What a warm start brings: per unit index (the sweep's plans' order) the earlier rows it
    reuses, and per study suffix the earlier finished Optuna trials to tell."""

    folder: Path
    reused: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    told: dict[str, list[Any]] = field(default_factory=dict)
    unchecked: int = 0  # earlier finished rows without a plan_hash (an older version): not reused

    @property
    def reused_count(self) -> int:
        return sum(len(r) for r in self.reused.values())

    def rows(self) -> list[dict[str, Any]]:
        """The reused rows, marked ``reused`` with the folder they came from."""
        return [{**r, REUSED: str(self.folder)} for rows in self.reused.values() for r in rows]

    def summary(self) -> str:
        told = sum(len(t) for t in self.told.values())
        line = (
            f"warm start from {self.folder}: {self.reused_count} trial(s) reused (identical plan, seed and "
            f"code), {told} earlier Optuna trial(s) told to {len(self.told)} study(ies)"
        )
        if self.unchecked:
            line += f"; {self.unchecked} earlier finished row(s) have no plan_hash (an older version): not reused"
        return line


def plan_warm_start(sweep: Any) -> WarmStart | None:
    """The warm start of ``sweep`` (None without ``warm_start``): which planned trials the earlier
    results hold already, and the earlier Optuna trials of each study."""
    spec = sweep.spec
    if not spec.warm_start:
        return None
    folder = earlier_folder(spec.warm_start).resolve()
    warm = WarmStart(folder)
    if not spec.per_configuration:
        _find_reusable(sweep, warm)
    journal = folder / OPTUNA_JOURNAL
    if spec.parameters and journal.is_file():
        warm.told = _earlier_trials(journal)
    return warm


def _find_reusable(sweep: Any, warm: WarmStart) -> None:
    from sweeps.report.results import FINISHED, read_results

    csv = warm.folder / RESULTS_CSV
    if not csv.is_file():
        return
    df = read_results(csv)
    if df.empty:
        return
    done = df[df["status"].isin(FINISHED)]
    if PLAN_HASH not in done:
        warm.unchecked = len(done)
        return
    warm.unchecked = int(done[PLAN_HASH].isna().sum())
    records = [
        {k: v for k, v in r.items() if not _missing(v)}
        for r in done.dropna(subset=[PLAN_HASH]).to_dict("records")
    ]
    budget = sweep.spec.num_samples if sweep.has_search else 1
    taken: set[str] = set()
    for i, plan in enumerate(sweep.plans):
        for r in records:
            if len(warm.reused.get(i, [])) >= budget:
                break
            if (
                r.get("cell") != plan.cell.name
                or int(r.get("seed", -1)) != plan.seed
                or r["trial_id"] in taken
            ):
                continue
            params = {key: r.get(f"param:{key}") for key in sweep.spec.parameters}
            if any(v is None for v in params.values()):
                continue
            candidate = plan.with_values(plan.seed, params, params, {}) if params else plan
            if plan_fingerprint(candidate) == r[PLAN_HASH]:
                warm.reused.setdefault(i, []).append(r)
                taken.add(r["trial_id"])


def _missing(v: Any) -> bool:
    import pandas as pd

    try:
        return v is pd.NA or (isinstance(v, float) and v != v)
    except TypeError:
        return False


def _earlier_trials(journal: Path) -> dict[str, list[Any]]:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(journal)))
    out: dict[str, list[Any]] = {}
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    for name in optuna.get_all_study_names(storage):
        study = optuna.load_study(study_name=name, storage=storage)
        trials = [t for t in study.get_trials(deepcopy=False) if t.state in finished]
        if trials:
            out[name.split("/", 1)[-1]] = trials
    return out


def tell_earlier(study: Any, trials: list[Any], space: dict[str, Any], source: Path) -> int:
    """Add the earlier finished ``trials`` to a new, empty ``study`` (``add_trial``), those whose
    parameters are exactly the new ``space``'s names and lie inside its distributions. Returns how
    many were told."""
    import optuna

    told = 0
    for t in trials:
        if set(t.params) != set(space):
            continue
        try:
            inside = all(
                space[k]._contains(space[k].to_internal_repr(v)) for k, v in t.params.items()
            )
        except (ValueError, TypeError):
            inside = False
        if not inside:
            continue
        complete = t.state == optuna.trial.TrialState.COMPLETE
        study.add_trial(
            optuna.trial.create_trial(
                params=t.params,
                distributions=space,
                value=t.value if complete else None,
                state=t.state,
                intermediate_values=dict(t.intermediate_values),
                user_attrs={**t.user_attrs, "warm_start_from": str(source)},
            )
        )
        told += 1
    return told


def apply_warm_start(searcher: Any, sweep: Any, warm: WarmStart | None) -> None:
    """Give a new searcher what the earlier sweep knows: the reused trials count as started in
    their units, and every Optuna study is opened and told the earlier trials of its unit (or
    cell). Sets ``searcher.reused_count``."""
    searcher.reused_count = 0
    if warm is None:
        return
    for i, rows in warm.reused.items():
        searcher.started[i] += len(rows)
    searcher.reused_count = warm.reused_count
    if not searcher.space or not warm.told:
        return
    if getattr(searcher, "studies", None):  # one study per cell (sweeps.run.configs)
        opened = [(searcher._cell_study(c), name) for c, name in enumerate(searcher.studies)]
    else:
        opened = [(searcher._study(i), u.name) for i, u in enumerate(searcher.units)]
    for study, name in opened:
        earlier = warm.told.get(name.split("/", 1)[-1])
        if earlier and not study.trials:
            tell_earlier(study, earlier, searcher.space, warm.folder)
