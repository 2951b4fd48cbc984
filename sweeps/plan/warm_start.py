"""Warm start from an earlier sweep (``warm_start: PATH``: its output folder, or its
``optuna.journal``): what the earlier run already knows is not learnt again.

- **Reused trials.** A planned trial whose resolved plan (task, model and trainer sections, Optuna's
  sampled values, the seed) and code version (:func:`code_version`) are identical to a finished row
  of the earlier ``results.csv`` (its ``plan_hash``, :func:`plan_fingerprint`) is not trained
  again: the row comes into the new results (checkpoint, timing and test figures as they were, the
  checkpoint linked by its path), marked ``reused`` with the folder it came from, and counts toward
  its (cell, seed)'s ``num_samples``. A row whose checkpoint file is gone (its trial folder
  deleted to have it trained again) is not reused: its trial trains again. A student (a cell taught by another) is reused when its
  teacher is: every trial of its teacher unit reused, the one it would be taught by now its
  earlier teacher (its fingerprint names the teacher's).
- **Told trials.** Every Optuna study of the new sweep starts with the finished trials of the
  earlier study of the same unit or cell (matched by the name after ``<sweep>/``), told with
  ``study.add_trial`` (their values, intermediate values and distributions), where their sampled
  values fit the new search space.

With configurations judged over seeds (``seeds: {per_configuration: true}``) a configuration is
reused whole (every seed identical), as the told trial of its number in the new cell study, and
counts toward the cell's ``num_samples``. ``--dry-run`` prints the counts (:meth:`WarmStart.summary`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeps.errors import LaunchError
from sweeps.layout import OPTUNA_JOURNAL, RESULTS_CSV, checkpoint_damaged, checkpoint_here
from sweeps.report.columns import FINISHED, REUSED
from sweeps.report.inputs import journal_problem
from sweeps.spec.teachers import best_scored
from sweeps.spec.warm_start import check_warm_start, earlier_folder  # noqa: F401 (importable here too)

#: what mends an earlier sweep's results.csv a warm start cannot read
REBUILD = (
    "nothing was started: a --resume of that sweep writes it again from its trials (or point "
    "warm_start at another sweep)"
)

#: the results.csv columns a warm start reads and writes
PLAN_HASH = "plan_hash"
#: what decides how a trial trains (folders and files, from the repository root): a change in any
#: of these files changes every plan's fingerprint
CODE_PACKAGES = ("lightning_modules", "datamodules", "sweeps/trial", "sweeps/build.py")


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of the source the trials run (:data:`CODE_PACKAGES`): equal plans trained by
    different code are different trials."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for package in CODE_PACKAGES:
        where = root / package
        for path in [where] if where.is_file() else sorted(where.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


#: results.csv statuses of a trial that ended before its last step: ASHA's or the Pareto rule's
#: stop, and stop_when's
STOPPED_EARLY = ("stopped", "converged")


def stop_rules(spec: Any) -> dict[str, Any]:
    """What ends a trial before its last step: the early-termination rule, ``stop_when`` and the
    metrics they read. A trial that ended early is the same training again only under the same
    rules; one that ran to its last step is, whatever they are."""
    return {
        "early_terminate": spec.early_terminate.model_dump(mode="json"),
        "stop_when": spec.stop_when.model_dump(mode="json") if spec.stop_when else None,
        "metric": spec.metric.model_dump(mode="json"),
        "objectives": [o.model_dump(mode="json") for o in spec.objectives],
    }


def plan_fingerprint(
    plan: Any,
    teacher: str | None = None,
    stops: dict[str, Any] | None = None,
    code: str | None = None,
) -> str:
    """The identity of one trial's training: its resolved sections, seed and the code version,
    and for a trial that ended before its last step the rules that ended it (``stops``:
    :func:`stop_rules`). A student's names its teacher by the teacher trial's own fingerprint
    (``teacher``), not by the path of the checkpoint it was given, which a new plan cannot know: a
    student whose teacher is reused is then the same training again. ``code``: the code it trained
    with, where that is not this one (:func:`fingerprint_rows`)."""
    body: dict[str, Any] = {
        "sections": plan.sections,
        "seed": plan.seed,
        "code": code or code_version(),
    }
    if stops is not None:
        body["stops"] = stops
    if teacher is not None:
        model = {k: v for k, v in plan.model.items() if k != "teacher_checkpoint"}
        body["sections"] = {**plan.sections, "model": model}
        body["teacher"] = teacher
    text = json.dumps(body, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


#: results.csv's column of the versions of the trials' code (:func:`code_version`) that trained a
#: trial, ``+``-joined where a resume continued it under another; ``unknown`` where no record says
CODE_COLUMN = "code_version"
UNKNOWN_CODE = "unknown"


def fingerprint_rows(
    rows: list[dict[str, Any]],
    plans: dict[str, tuple[Any, str]],
    earlier: list[dict[str, Any]],
    stops: dict[str, Any] | None = None,
    before: dict[str, dict[str, Any]] | None = None,
    codes: list[str] | None = None,
    reported: set[str] | None = None,
) -> None:
    """Write each of a launch's ``rows`` its ``plan_hash`` (``plans``: per trial id its plan, as
    the rows were made) and the code that trained it (:data:`CODE_COLUMN`), a teacher's before its
    students', whose fingerprints name it; a teacher reused from a warm start (``earlier``: its
    rows) is named by its earlier fingerprint. A row that ended before its last step
    (:data:`STOPPED_EARLY`) is fingerprinted with the sweep's ``stops`` (:func:`stop_rules`).

    The code of a trial: this code where it reported in this run (``reported``: trial ids; None:
    every row did, a first run), with the code its row of an earlier run names (``before``: the
    sweep's own results.csv on a resume, by trial id). A trial that trained under two versions
    gets a fingerprint no plan matches. Where no record says (a trial that finished in a run
    killed before it wrote results.csv, or a sweep of an older version), the code is this one if
    the sweep's runs all ran it (``codes``: launch.json's), else unknown: no plan matches; a row of
    an older version's run that finished keeps the fingerprint it has."""
    before = before or {}
    now = code_version()
    one_version = not codes or set(codes) == {now}
    known = {str(r["trial_id"]): r[PLAN_HASH] for r in earlier if r.get(PLAN_HASH)}
    ids = {str(r["trial_id"]) for r in rows}
    todo = list(rows)
    while todo:
        ready = [r for r in todo if _teacher_of(r) not in ids or _teacher_of(r) in known]
        for row in ready or todo:  # (none ready: a cycle, which the spec refuses)
            tid = str(row["trial_id"])
            old = before.get(tid) or {}
            trained = {c for c in str(old.get(CODE_COLUMN) or "").split("+") if c}
            if not trained and (old.get("step") or old.get("checkpoint")):
                # it trained in an earlier run whose row names no code (an older version's)
                trained.add(now if one_version else UNKNOWN_CODE)
            if reported is None or tid in reported:
                trained.add(now)
            if (
                old.get("status") in FINISHED
                and CODE_COLUMN not in old
                and isinstance(old.get(PLAN_HASH), str)
                and not (reported is None or tid in reported)
            ):
                row[PLAN_HASH] = old[PLAN_HASH]  # an older version's row: as it was written
                known[tid] = row[PLAN_HASH]
                continue
            if not trained:
                trained = {now if one_version else UNKNOWN_CODE}
            code = "+".join(sorted(trained))
            row[CODE_COLUMN] = code
            teacher = _teacher_of(row)
            plan = plans[row["trial_id"]][0]
            early = stops if row.get("status") in STOPPED_EARLY else None
            row[PLAN_HASH] = plan_fingerprint(
                plan, known.get(teacher) if teacher else None, early, code=code
            )
            known[tid] = row[PLAN_HASH]
        todo = [r for r in todo if PLAN_HASH not in r]


def _teacher_of(row: dict[str, Any]) -> str | None:
    teacher = row.get("teacher")
    return None if teacher is None or _missing(teacher) else str(teacher)


@dataclass
class WarmStart:
    """What a warm start brings: per unit index (the sweep's plans' order) the earlier rows it
    reuses, and per study suffix the earlier finished Optuna trials to tell."""

    folder: Path
    reused: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    told: dict[str, list[Any]] = field(default_factory=dict)
    unchecked: int = 0  # earlier finished rows without a plan_hash (an older version): not reused
    earlier: int = 0  # earlier finished rows with a plan_hash, reused or not
    #: earlier finished rows whose checkpoint file is gone (a trial folder deleted to have it
    #: trained again, a clean-up): not reused, their trials train again
    lost: int = 0
    #: earlier finished rows whose checkpoint file is cut short or not torch's: not reused either
    damaged: int = 0
    #: configurations judged over seeds reused whole: (cell index, its number in the new study, the
    #: earlier rows by seed)
    configurations: list[tuple[int, int, dict[int, dict[str, Any]]]] = field(default_factory=list)
    #: per study suffix, the earlier study's objective names (a multi-objective study's), or None
    names: dict[str, list[str] | None] = field(default_factory=dict)

    @property
    def reused_count(self) -> int:
        return sum(len(r) for r in self.reused.values())

    def rows(self) -> list[dict[str, Any]]:
        """The reused rows, marked ``reused`` with the folder they came from."""
        return [{**r, REUSED: str(self.folder)} for rows in self.reused.values() for r in rows]

    def reused_ids(self) -> set[str]:
        return {r["trial_id"] for rows in self.reused.values() for r in rows}

    def plans(self, sweep: Any, out_dir: Path) -> dict[str, tuple[Any, str]]:
        """Per reused trial id its plan (the new sweep's, with the row's sampled values) and a folder
        of this sweep for the held-out stage's record (the earlier sweep's folders are not written):
        a reused chosen row without a test figure is evaluated like the others."""
        out = {}
        for i, rows in self.reused.items():
            plan = sweep.plans[i]
            for r in rows:
                params = {key: r.get(f"param:{key}") for key in sweep.spec.parameters}
                same = plan.with_values(plan.seed, params, params, {}) if params else plan
                out[r["trial_id"]] = (same, str(out_dir / "heldout" / r["trial_id"]))
        return out

    def to_record(self) -> dict[str, Any]:
        """What a resume needs of this warm start, for launch.json (:func:`from_record`): the
        reused rows by unit, the configurations reused whole and the counts the summary says.
        The told trials are not kept: they are in the sweep's own Optuna studies."""
        return _plain(
            {
                "folder": str(self.folder),
                "reused": {str(i): rows for i, rows in self.reused.items()},
                "configurations": [[c, n, rows] for c, n, rows in self.configurations],
                "counts": {
                    k: getattr(self, k) for k in ("unchecked", "earlier", "lost", "damaged")
                },
            }
        )

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> WarmStart:
        """The warm start a sweep's first launch recorded (:meth:`to_record`)."""
        counts = record.get("counts") or {}
        return cls(
            Path(record["folder"]),
            reused={int(i): list(rows) for i, rows in (record.get("reused") or {}).items()},
            configurations=[
                (int(c), int(n), {int(seed): row for seed, row in rows.items()})
                for c, n, rows in record.get("configurations") or []
            ],
            **{k: int(counts.get(k) or 0) for k in ("unchecked", "earlier", "lost", "damaged")},
        )

    def summary(self) -> str:
        told = sum(len(t) for t in self.told.values())
        line = (
            f"warm start from {self.folder}: {self.reused_count} trial(s) reused (identical plan, seed and "
            f"code), {told} earlier Optuna trial(s) told to {len(self.told)} study(ies)"
        )
        if self.unchecked:
            line += f"; {self.unchecked} earlier finished row(s) have no plan_hash (an older version): not reused"
        if self.lost:
            line += (
                f"; {self.lost} earlier finished row(s) have lost their checkpoint file (deleted or "
                "moved): not reused, their trials train again"
            )
        if self.damaged:
            line += (
                f"; {self.damaged} earlier finished row(s) have a damaged checkpoint file (cut "
                "short or not torch's): not reused, their trials train again"
            )
        if self.earlier and not self.reused_count:
            line += (
                f"; none of its {self.earlier} finished row(s) has a plan of this sweep: a setting, "
                f"a seed or the code differs (compare the two sweeps' launch.json)"
            )
        return line


def plan_warm_start(sweep: Any, first: dict[str, Any] | None = None) -> WarmStart | None:
    """The warm start of ``sweep`` (None without ``warm_start``): which planned trials the earlier
    results hold already, and the earlier Optuna trials of each study. ``first``: what a resumed
    sweep's first launch reused (:meth:`WarmStart.to_record`), which the resume keeps: the trials
    it left to train are those Tune's saved searcher counts, whatever the earlier folder (moved,
    its trial folders deleted) or the code (edited) says now."""
    spec = sweep.spec
    if not spec.warm_start:
        return None
    if first is not None:
        try:
            warm = WarmStart.from_record(first)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # edited by hand, say
            raise LaunchError(
                f"warm_start: launch.json's record of what the first launch reused is damaged "
                f'({type(exc).__name__}: {exc}); nothing was started: remove its "warm_start" '
                "entry to plan the warm start again from the earlier folder"
            ) from None
    else:
        warm = WarmStart(earlier_folder(spec.warm_start).resolve())
    journal = warm.folder / OPTUNA_JOURNAL
    if spec.parameters and journal.is_file():
        fix = (
            f"; nothing was started: a --resume of that sweep mends its journal, or move "
            f"{OPTUNA_JOURNAL} aside to reuse its trials without telling Optuna"
        )
        damaged = journal_problem(journal, fix, cut_ok=True)
        if damaged and first is None:
            raise LaunchError(f"warm_start: {damaged}")
        if not damaged:  # (a resume's studies hold what its first launch told them)
            warm.told, warm.names = _earlier_trials(journal)
    if first is not None:
        return warm
    records = _finished_records(warm)
    warm.earlier = len(records)
    if spec.per_configuration:
        _find_reusable_configurations(sweep, warm, records)
    else:
        _find_reusable(sweep, warm, records)
    return warm


def _finished_records(warm: WarmStart) -> list[dict[str, Any]]:
    """The earlier results.csv's finished rows that carry a plan_hash (the others are counted)."""
    # pandas (half a second): only a launch that names an earlier folder reads it
    from sweeps.report.results import FINISHED, read_results

    csv = warm.folder / RESULTS_CSV
    if not csv.is_file():
        return []
    try:
        df = read_results(csv)
    except (OSError, ValueError) as exc:  # cut short, emptied, not a CSV
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LaunchError(f"warm_start: {csv} cannot be read ({why}); {REBUILD}") from None
    if df.empty:
        return []
    if "status" not in df:
        raise LaunchError(f"warm_start: {csv} has no status column; {REBUILD}")
    done = df[df["status"].isin(FINISHED)]
    if "role" in done:  # a confirm trial (sweeps.stages.confirm) was retrained after a choice
        done = done[done["role"].astype(str) != "confirm"]
    if PLAN_HASH not in done:
        warm.unchecked = len(done)
        return []
    warm.unchecked = int(done[PLAN_HASH].isna().sum())
    records = [
        {k: v for k, v in r.items() if not _missing(v)}
        for r in done.dropna(subset=[PLAN_HASH]).to_dict("records")
    ]
    # a model no stage can time, test or teach from is not a trained trial to build on; one in a
    # folder moved since it was written is linked where it is now
    kept = []
    for r in records:
        here = checkpoint_here(str(r.get("checkpoint") or ""), warm.folder)
        if here is not None and checkpoint_damaged(here):
            warm.damaged += 1
        elif here is not None:
            kept.append({**r, "checkpoint": here})
    warm.lost = len(records) - len(kept) - warm.damaged
    return kept


def _same_plan(sweep: Any, plan: Any, row: dict[str, Any], teacher: str | None = None) -> bool:
    """Whether ``row`` trained ``plan`` with the row's sampled values, by the same code (and, for
    a student, from the teacher whose fingerprint is ``teacher``); a row that ended before its
    last step, also under this sweep's rules for ending early."""
    params = {key: row.get(f"param:{key}") for key in sweep.spec.parameters}
    if any(v is None for v in params.values()):
        return False
    candidate = plan.with_values(plan.seed, params, params, {}) if params else plan
    stops = stop_rules(sweep.spec) if row.get("status") in STOPPED_EARLY else None
    return plan_fingerprint(candidate, teacher, stops) == row[PLAN_HASH]


def _teacher_order(sweep: Any) -> list[int]:
    """The sweep's units, each teacher before its students (grid order otherwise)."""
    if not getattr(sweep, "teachers", None):
        return list(range(len(sweep.plans)))
    depth: dict[int, int] = {}

    def level(i: int) -> int:
        if i not in depth:
            t = sweep.teacher_index(i)
            depth[i] = 0 if t is None else level(t) + 1
        return depth[i]

    return sorted(range(len(sweep.plans)), key=lambda i: (level(i), i))


def _reused_teacher(sweep: Any, warm: WarmStart, i: int, budget: int) -> dict[str, Any] | None:
    """For a student unit ``i``: the earlier row of the teacher its trials would be given now,
    when every trial of its teacher unit is reused (no new teacher trial could be picked
    instead), else None; for a unit without a teacher, {}."""
    t = sweep.teacher_index(i) if getattr(sweep, "teachers", None) else None
    if t is None:
        return {}
    rows = warm.reused.get(t, [])
    metric, mode = sweep.spec.metric.name, sweep.spec.metric.mode
    scored = [(str(r["trial_id"]), float(r[metric])) for r in rows if r.get(metric) is not None]
    if len(rows) < budget or not scored:
        return None
    best = best_scored(scored, mode)
    return next(r for r in rows if str(r["trial_id"]) == best)


def _find_reusable(sweep: Any, warm: WarmStart, records: list[dict[str, Any]]) -> None:
    budget = sweep.spec.num_samples if sweep.has_search else 1
    taken: set[str] = set()
    for i in _teacher_order(sweep):  # a student is reused only where its teacher is
        plan = sweep.plans[i]
        teacher = _reused_teacher(sweep, warm, i, budget)
        if teacher is None:
            continue
        for r in records:
            if len(warm.reused.get(i, [])) >= budget:
                break
            if (
                r.get("cell") != plan.cell.name
                or int(r.get("seed", -1)) != plan.seed
                or r["trial_id"] in taken
            ):
                continue
            if teacher and str(r.get("teacher")) != str(teacher["trial_id"]):
                continue  # taught by another teacher than the one it would get now
            if _same_plan(sweep, plan, r, teacher.get(PLAN_HASH) if teacher else None):
                warm.reused.setdefault(i, []).append(r)
                taken.add(r["trial_id"])


def _find_reusable_configurations(
    sweep: Any, warm: WarmStart, records: list[dict[str, Any]]
) -> None:
    """Configurations judged over seeds: an earlier configuration is reused whole, when every seed
    of the new sweep has an identical finished row of it and its Optuna trial is told to the new
    cell study (its number there: its place among the told trials, in the earlier order)."""
    # Optuna (half a second): only configurations judged over seeds tell a study
    from sweeps.spec.search_space import optuna_distributions

    space = optuna_distributions(sweep.spec.parameters, sweep.param_columns)
    seeds = sweep.spec.seed_values
    unit_of = {(p.cell.name, p.seed): i for i, p in enumerate(sweep.plans)}
    for c, cell in enumerate(sweep.cells):
        told = [t for t in warm.told.get(cell.slug, []) if fits(t, space)]
        number_of = {t.number: k for k, t in enumerate(told)}
        groups: dict[int, dict[int, dict[str, Any]]] = {}
        for r in records:
            if r.get("cell") == cell.name and r.get("configuration") is not None:
                groups.setdefault(int(r["configuration"]), {})[int(r["seed"])] = r
        for earlier in sorted(groups):
            by_seed = groups[earlier]
            if len([k for k in warm.configurations if k[0] == c]) >= sweep.spec.num_samples:
                break
            if earlier not in number_of or set(seeds) - set(by_seed):
                continue
            if not all(
                _same_plan(sweep, sweep.plans[unit_of[(cell.name, s)]], by_seed[s]) for s in seeds
            ):
                continue
            new = number_of[earlier]
            rows = {s: {**by_seed[s], "configuration": new} for s in seeds}
            for s in seeds:
                warm.reused.setdefault(unit_of[(cell.name, s)], []).append(rows[s])
            warm.configurations.append((c, new, rows))


def fits(trial: Any, space: dict[str, Any]) -> bool:
    """An earlier Optuna trial's sampled values are exactly the new space's names, inside it."""
    if set(trial.params) != set(space):
        return False
    try:
        return all(
            space[k]._contains(space[k].to_internal_repr(v)) for k, v in trial.params.items()
        )
    except (ValueError, TypeError):
        return False


def _plain(value: Any) -> Any:
    """``value`` with numpy's scalars as Python's (JSON writes them as they read back)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value


def _missing(v: Any) -> bool:
    import pandas as pd

    try:
        return v is pd.NA or (isinstance(v, float) and v != v)
    except TypeError:
        return False


def _earlier_trials(journal: Path) -> tuple[dict[str, list[Any]], dict[str, list[str] | None]]:
    """Per study suffix (after ``<sweep>/``) the earlier study's finished trials, and its objective
    names (``study.metric_names``: a multi-objective study's, :mod:`sweeps.search.moo`)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(journal)))
    out: dict[str, list[Any]] = {}
    names: dict[str, list[str] | None] = {}
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    for name in optuna.get_all_study_names(storage):
        study = optuna.load_study(study_name=name, storage=storage)
        trials = [t for t in study.get_trials(deepcopy=False) if t.state in finished]
        if trials:
            out[name.split("/", 1)[-1]] = trials
            names[name.split("/", 1)[-1]] = study.metric_names
    return out, names
