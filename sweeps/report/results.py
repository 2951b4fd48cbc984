"""A finished (or interrupted) sweep's results: one row per trial, written to
``<output>/<name>/results.csv``. The report (:mod:`sweeps.report.local`: results.md, plots) reads that
file; this module knows nothing of reports.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from lightning_modules.metric_names import (
    DECODE_SECONDS,
    METRICS,
    TRAIN_DISTILL,
    VAL_BLEU,
    VAL_LOSS,
    VAL_SACREBLEU,
)  # DECODE_SECONDS: the timing stage's figure
from sweeps.layout import (  # noqa: F401 (re-exported)
    CHECKPOINT_FILE,
    HYPOTHESES_FILE,
    REFERENCES_FILE,
    RESULTS_CSV,
    TUNE_RESULT_FILE,
    checkpoint_path,
    write_atomic,
)
from sweeps.report.columns import (  # noqa: F401 (re-exported: results.csv's columns)
    BASELINE,
    ESTIMATE_COLUMNS,
    FINISHED,
    FIRST_COLUMNS,
    HELDOUT_COLUMNS,
    METRIC_COLUMNS,
    TAIL_COLUMNS,
    TIMING_COLUMNS,
    TIMING_DEVICE,
    TRAIN_COLUMNS,
    TRAIN_PEAK_MB,
    TRAIN_STEP_SECONDS,
    baseline_mask,
)
from sweeps.spec import TrialPlan, column_name
from sweeps.spec.signatures import headline_options, model_identity


def headline_columns() -> list[str]:
    """The columns of the mechanisms' headline options (memory attention's ``K``, local
    attention's ``window``; ``Attention.headline``), each once."""
    return list(dict.fromkeys(option for option, _, _ in headline_options().values()))


#: the grid keys a report lays its tables out along (:func:`sweeps.report.stats.axis_of`): no part of
#: a model's label
LAYOUT_KEYS = ("task.max_length", "task.pair")


def model_label(model: dict[str, Any], grid: dict[str, Any]) -> str:
    """``memory K=32``, ``bahdanau``, ``memory K=16 encoder_scoring=sigmoid`` ... from what varies:
    the model's own grid values, then every other grid value but the length (or language pair)
    (:func:`grid_context`: ``bahdanau train_size=1000``), so that a length and a label name one
    cell."""
    parts = [str(model.get("attention", "?"))]
    for key, value in grid.items():
        if key.startswith("model.") and key != "model.attention":
            parts.append(f"{column_name(key)}={value}")
    context = grid_context(grid)
    return " ".join(parts + ([context] if context else []))


def grid_context(grid: dict[str, Any]) -> str:
    """A cell's grid values outside ``model`` and the length (pair), ``train_size=1000``
    (results.csv's ``context``); "" for a grid of the model and the length only."""
    return " ".join(
        f"{column_name(key)}={value}"
        for key, value in grid.items()
        if not key.startswith("model.") and key not in LAYOUT_KEYS
    )


def plan_columns(plan: TrialPlan) -> dict[str, Any]:
    """The columns a row takes from its trial's plan: the cell, the model's label, mechanism and
    headline option, the length, the seed and each grid key's value under its column name (and
    ``context``, where the grid has an axis outside ``model`` other than the length:
    :func:`grid_context`). The one place a plan property becomes a column, for finished and
    never-started trials alike."""
    columns: dict[str, Any] = {
        "cell": plan.cell.name,
        "model": model_label(plan.model, plan.grid),
        **model_identity(plan.model),
        "length": plan.task.get("max_length"),
        "seed": plan.seed,
    }
    if context := grid_context(plan.grid):
        columns["context"] = context
    for key, value in plan.grid.items():
        columns.setdefault(column_name(key), value)
    return columns


def trial_states(grid) -> list[tuple[str | None, dict[str, Any], int]]:
    """(Tune's status, the trial's config, its retries) per result, in the grid's order. The
    config comes from the trial itself: a trial that failed before its first report has no
    ``result.config``."""
    trials = getattr(getattr(grid, "_experiment_analysis", None), "trials", None)
    if trials is None or len(trials) != len(grid):
        return [(None, result.config or {}, 0) for result in grid]
    return [
        (t.status, result.config or t.config or {}, int(getattr(t, "num_failures", 0) or 0))
        for t, result in zip(trials, grid)
    ]


def trial_names(grid) -> dict[str, str]:
    """Each trial's Tune name (``<trainable>_<trial id>``, as its own process knows it), by trial
    id; {} where the grid does not say."""
    trials = getattr(getattr(grid, "_experiment_analysis", None), "trials", None) or []
    return {str(t.trial_id): str(t) for t in trials}


def trial_status(
    tune_status: str | None, metrics: dict | None, max_steps: int | None, failed: bool = False
) -> str:
    """results.csv's ``status`` of a trial (the console's table names trials with it too), from
    Tune's status (None: unknown), its last report and its ``max_steps`` (None: unknown)."""
    metrics = metrics or {}
    if tune_status in ("PENDING", "PAUSED") and (failed or metrics.get("teacher_error")):
        # an earlier attempt's failure, to be run again (a retry; a student whose teacher failed,
        # on a resume that trains the teacher anew) when the sweep stopped: `--resume` runs it
        return "unfinished"
    if failed or tune_status == "ERROR" or metrics.get("teacher_error"):
        return "error"  # a student whose teacher failed ended at once with the reason
    if tune_status not in (None, "TERMINATED") or not metrics:
        return "unfinished"  # interrupted: `--resume` continues it
    if metrics.get("converged"):  # the spec's stop_when rule (sweeps.trial.stop_when)
        return "converged"  # finished, like done
    if max_steps is not None and metrics.get("step", 0) < max_steps:
        return "stopped"  # early-terminated by ASHA
    return "done"


def last_report(trial_dir: Any) -> dict[str, Any]:
    """The last report in a local trial folder's ``result.json``; {} where there is none."""
    path = Path(str(trial_dir)) / TUNE_RESULT_FILE
    try:
        lines = path.read_text().splitlines() if "://" not in str(trial_dir) else []
        return json.loads(next(line for line in reversed(lines) if line.strip()))
    except (OSError, StopIteration, ValueError):
        return {}


def row_from_result(
    result,
    plan: TrialPlan,
    search_keys: Iterable[str],
    max_steps: int,
    tune_status: str | None = None,
    retries: int = 0,
) -> dict[str, Any]:
    metrics = dict(result.metrics or {})
    if "step" not in metrics:  # Tune's saved state predates the reports (a second Ctrl-C)
        metrics = {**last_report(result.path), **metrics}
    status = trial_status(tune_status, metrics, max_steps, failed=result.error is not None)
    row: dict[str, Any] = {
        "trial_id": metrics.get("trial_id") or Path(str(result.path)).name,
        **plan_columns(plan),
        "status": status,
        # failed attempts Tune retried (failure.max_failures) before this outcome: Tune's count of
        # failures includes an errored trial's last one, which nothing retried
        "retries": max(0, retries - 1) if status == "error" and tune_status == "ERROR" else retries,
    }
    if "configuration" in (plan.config or {}):  # judged over seeds: its number in the cell's study
        row["configuration"] = int(plan.config["configuration"])
    if (plan.config or {}).get(
        "teacher"
    ):  # a student: its teacher's trial id (sweeps.search.teachers)
        row["teacher"] = str(plan.config["teacher"])
    if (plan.config or {}).get("fused_with"):  # trained fused with its group (sweeps.trial.fused)
        row["fused_with"] = str(plan.config["fused_with"])
    if (plan.config or {}).get("set"):  # a relative constraint's baseline (sweeps.search.baselines)
        row[BASELINE] = True
    for key in search_keys:
        row[f"param:{key}"] = plan.value(key)
    for m in METRIC_COLUMNS:
        row[m] = metrics.get(m)
    row["train_time_s"] = metrics.get("train_time_s")
    row["step"] = metrics.get("step")
    # DDP trials: Ray Train keeps the checkpoint and reports its path as a metric
    folder = (
        result.checkpoint.path if result.checkpoint is not None else metrics.get("checkpoint_path")
    )
    row["checkpoint"] = checkpoint_path(str(folder)) if folder else None
    row["error"] = None  # an unfinished trial's earlier failure is not its outcome
    if status == "error":
        if metrics.get("teacher_error"):  # its teacher failed: the reason, not the exception's dump
            row["error"] = str(metrics["teacher_error"])[:300]
        elif result.error is not None:
            row["error"] = _short_error(result.error)
    return row


def natural_order(column: pd.Series) -> pd.Series:
    """Sort key: text columns compare their numbers as numbers (``memory K=4`` before ``memory
    K=16``); numeric columns as they are."""
    if pd.api.types.is_numeric_dtype(column):
        return column
    return column.map(
        lambda v: re.sub(r"\d+", lambda m: m.group().zfill(12), v) if isinstance(v, str) else v
    )


def missing_rows(
    plans: Iterable[Any],
    rows: list[dict[str, Any]],
    samples: int,
    status: str,
    search_keys: Iterable[str] = (),
    baseline: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """A row for every planned trial that has none (Tune never created it, e.g. a sweep stopped
    before Optuna sampled it): ``samples`` trials per plan (cell and seed), and the plan's
    baseline trial where the sweep has one (``baseline``: its model settings, dotted;
    :mod:`sweeps.search.baselines`), marked ``status``. A searched setting's ``param:`` column
    (and its plan column, where the model's label names it) is empty in a sample's row: no value
    was drawn."""
    seen: dict[tuple[str, int], int] = {}
    based = set()
    for row in rows:
        unit = (row["cell"], row["seed"])
        if row.get(BASELINE) is True:
            based.add(unit)
        else:
            seen[unit] = seen.get(unit, 0) + 1
    search_keys = list(search_keys)
    out = []
    for plan in plans:
        planned = plan_columns(plan)
        # a searched key's param: column, and a plan column naming it (K, memory's default)
        undrawn = {f"param:{k}": None for k in search_keys}
        undrawn.update({c: None for k in search_keys if (c := column_name(k)) in planned})
        never = {"trial_id": None, "status": status}
        never["error"] = "never started" if status == "error" else None
        unit = (plan.cell.name, plan.seed)
        if baseline is not None and unit not in based:
            config = {"cell": plan.cell.name, "seed": plan.seed, "set": dict(baseline)}
            of = plan.with_values(plan.seed, dict(baseline), {}, config)
            out.append({**plan_columns(of), BASELINE: True, **never})
        for _ in range(samples - seen.get(unit, 0)):
            out.append({**planned, **undrawn, **never})
    return out


def failure_summary(df: pd.DataFrame) -> list[str]:
    """One line per failed trial: its cell, seed, id and the last line of its error."""
    failed = df[df["status"] == "error"] if not df.empty else df
    return [f"  {r.cell} seed={r.seed} [{r.trial_id}]: {r.error}" for r in failed.itertuples()]


def result_rows(
    grid, plan_of: Callable[[dict[str, Any]], TrialPlan], search_keys: Iterable[str]
) -> tuple[list[dict[str, Any]], dict[str, tuple[TrialPlan, str]]]:
    """One row per trial of a Tune ``ResultGrid``, and per trial id its plan and trial folder;
    ``plan_of`` rebuilds a trial's plan from its config (:meth:`sweeps.trial.settings.TrialSettings.plan`).
    A trial that failed before its first report has no ``result.config``: its config comes from
    Tune's trial record (:func:`trial_states`)."""
    rows, plans = [], {}
    search_keys = list(search_keys)
    trials = getattr(getattr(grid, "_experiment_analysis", None), "trials", None) or []
    moved = [moved_columns(t) for t in trials] if len(trials) == len(grid) else [{}] * len(grid)
    for result, (status, config, retries), moves in zip(grid, trial_states(grid), moved):
        if "cell" in config:
            plan = plan_of(config)
            rows.append(
                row_from_result(
                    result, plan, search_keys, plan.trainer["max_steps"], status, retries
                )
                | moves
            )
            plans[rows[-1]["trial_id"]] = (plan, str(result.path))
    return rows, plans


def moved_columns(trial: Any) -> dict[str, Any]:
    """``moved``: how often the trial lost its node and continued on another (not a failure,
    not in ``retries``); ``moved_why``: each time, why and from which step. Tune's trial keeps its
    moves in ``sweep_moves`` (:mod:`sweeps.schedulers.lost_nodes`)."""
    moves = list(getattr(trial, "sweep_moves", None) or [])
    why = "; ".join(
        m["why"] + (f", continued from step {m['step']}" if m.get("step") is not None else "")
        for m in moves
    )
    return {"moved": len(moves), "moved_why": why or None}


def _short_error(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[-1] if text else type(err).__name__)[:300]


#: metric columns only some sweeps have a value for, written only where a trial has one:
#: detokenized BLEU (translation), a student's distillation term, the timing stage's settings,
#: the probe's figures (a multi-objective sweep that probes them)
OPTIONAL_METRICS = (
    VAL_SACREBLEU,
    TRAIN_DISTILL,
    "timing_split",
    "timing_threads",
    *ESTIMATE_COLUMNS,
)


def metric_columns(df: pd.DataFrame) -> list[str]:
    """:data:`METRIC_COLUMNS` that ``df``'s results.csv gets: every one, but an optional one
    (:data:`OPTIONAL_METRICS`) only where a row has a value (a copy-task sweep has no
    ``val/sacrebleu``, a sweep without students no ``train/distill``)."""
    return [
        c for c in METRIC_COLUMNS if c not in OPTIONAL_METRICS or (c in df and df[c].notna().any())
    ]


def results_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=FIRST_COLUMNS + metric_columns(df) + TAIL_COLUMNS)
    for c in (c for c in df.columns if c.startswith("param:")):
        # Optuna's samples keep their type: an integer parameter's column holds integers beside
        # a baseline's missing value (pandas would write 2.0, 3.0 ...), rows read back from an
        # earlier results.csv (2.0) included
        sampled = [r[c] for r in rows if r.get(c) is not None and not pd.isna(r[c])]
        whole = all(
            isinstance(v, int) or (isinstance(v, float) and v.is_integer()) for v in sampled
        )
        if whole and any(isinstance(v, int) and not isinstance(v, bool) for v in sampled):
            df[c] = df[c].astype("Int64")
    at = FIRST_COLUMNS.index("attention") + 1
    first = FIRST_COLUMNS[:at] + headline_columns() + FIRST_COLUMNS[at:]
    heldout = [c for c in HELDOUT_COLUMNS if c in df]
    middle = [c for c in df.columns if c not in first + METRIC_COLUMNS + heldout + TAIL_COLUMNS]
    order = [c for c in first if c in df] + middle + metric_columns(df) + heldout + TAIL_COLUMNS
    df = df.reindex(columns=order).sort_values(
        ["length", "model", "seed"], na_position="first", kind="stable", key=natural_order
    )
    return keep_integers(df)


def keep_integers(df: pd.DataFrame) -> pd.DataFrame:
    """Settings and counts that are whole numbers (K, length, seed, step, integer grid values)
    as integers, missing values and all (pandas' ``Int64``): ``K=16``, not ``16.0``. Measurements
    (metrics, seconds) and Optuna's samples keep their type."""
    measured = set(METRIC_COLUMNS) | set(METRICS["test"].values()) | {"train_time_s"}
    for c in df.columns:
        if c in measured or c.startswith("param:") or df[c].dtype.kind != "f":
            continue
        values = df[c].dropna()
        if not values.empty and (values == values.round()).all():
            df[c] = df[c].astype("Int64")
    return df


def read_results(path: Path) -> pd.DataFrame:
    """A results.csv as written by :func:`write_results_csv`, integers kept integers."""
    # text columns read as text: a trial id such as 01e13825 would otherwise parse as 1e13825 (inf)
    return keep_integers(pd.read_csv(path, dtype={c: str for c in TEXT_COLUMNS}))


TEXT_COLUMNS = (
    "trial_id",
    "cell",
    "model",
    "context",
    "attention",
    "status",
    "checkpoint",
    "moved_why",
    "error",
    "timing_error",
    "test_split",
    "heldout_error",
    "plan_hash",
    "code_version",
    "reused",
    "role",
    "teacher",
    "fused_with",
    BASELINE,
    TIMING_DEVICE,
    "timing_device_name",
)


def keep_finished(
    rows: list[dict[str, Any]], previous: Path, superseded: set[str] = frozenset()
) -> tuple[list[dict[str, Any]], int]:
    """``rows`` with every finished row of an earlier ``results.csv`` that they lack put back, so
    the file never loses a finished trial (a resume that lost Tune's record of it, a restart).
    An old finished row replaces the new row of the same trial, or else a never-started
    placeholder of its (cell, seed). ``superseded``: trial ids no longer reported (an earlier
    choice's confirm trials, :func:`sweeps.stages.confirm.confirm_experiment`), never put back.
    Returns the rows and how many were put back."""
    if not previous.exists():
        return rows, 0
    try:
        old = read_results(previous)
    except (OSError, ValueError):
        return rows, 0
    if old.empty or "status" not in old:
        return rows, 0
    finished_now = {r.get("trial_id") for r in rows if r.get("status") in FINISHED}
    rows, kept = list(rows), 0
    for record in old[old["status"].isin(FINISHED)].to_dict("records"):
        if record.get("trial_id") in finished_now or str(record.get("trial_id")) in superseded:
            continue
        record = {
            k: v for k, v in record.items() if not (v is pd.NA or isinstance(v, float) and v != v)
        }  # absent
        same = [i for i, r in enumerate(rows) if r.get("trial_id") == record.get("trial_id")]
        placeholder = [
            i
            for i, r in enumerate(rows)
            if not r.get("trial_id")
            and r.get("cell") == record.get("cell")
            and r.get("seed") == record.get("seed")
        ]
        if same or placeholder:
            rows[(same or placeholder)[0]] = record
        else:
            rows.append(record)
        kept += 1
    return rows, kept


def write_results_csv(rows: list[dict[str, Any]], out_dir: Path) -> Path:
    """Write ``out_dir/results.csv`` (every trial) atomically: a reader, or a crash, sees the old
    file or the whole new one. The report (:mod:`sweeps.report.local`) reads it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RESULTS_CSV
    return write_atomic(path, results_frame(rows).to_csv(index=False))


def param_labels(df: pd.DataFrame) -> dict[str, str]:
    """results.csv's sampled-value columns (``param:model.K``) and the names the tables give them:
    the key's last part (K, encoder_scoring), the whole key where two last parts clash."""
    params = {c: c.removeprefix("param:").rsplit(".", 1)[-1] for c in df if c.startswith("param:")}
    shown: dict[str, str] = {}
    for column, short in params.items():
        shown[column] = column.removeprefix("param:") if short in shown.values() else short
    return shown


def param_text(value: Any) -> str:
    """One sampled value as the tables show it: 3, not 3.0; 0.001178 to 4 significant digits."""
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def print_table(df: pd.DataFrame, out: Any | None = None) -> None:
    """The console's results table: who each trial is (its id, cell, seed, and in a searched
    sweep its sampled values, as the progress table showed them; a relative constraint's
    baseline marked in ``model``), then its figures."""
    df = df.copy()
    shown = param_labels(df)
    mark = baseline_mask(df)
    baselines = bool(mark.any())
    if baselines and "model" in df:
        df["model"] = df["model"].astype(object)
        df.loc[mark, "model"] = df.loc[mark, "model"].astype(str) + " (baseline)"
    cols = [
        c
        for c in [
            "trial_id",
            "cell",
            *(["model"] if baselines else []),
            "configuration",
            "seed",
            "role",
            *shown,
            "status",
            VAL_BLEU,
            "chosen",
            METRICS["test"]["bleu"],
            DECODE_SECONDS,
            "decode_seconds_iqr",
            "train_step_seconds",
            "train_peak_mb",
            VAL_LOSS,
            "train_time_s",
        ]
        if c in df
    ]
    for column in shown:  # K=3, not 3.000 (results.csv keeps Optuna's samples as sampled)
        values = pd.to_numeric(df[column], errors="coerce").dropna()
        if df[column].dtype.kind == "f" and not values.empty and (values == values.round()).all():
            df[column] = ["-" if pd.isna(v) else int(v) for v in df[column]]
        elif df[column].dtype.kind == "f":  # lr 0.001178 and 0.0009152, as the progress table
            df[column] = ["-" if pd.isna(v) else f"{v:.4g}" for v in df[column]]
    table = df[cols].rename(columns=shown)
    for c in table.columns:  # a figure not measured (a trial stopped before timing) is None: "-"
        values = table[c].dropna()
        if table[c].dtype == object and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
        ):
            table[c] = pd.to_numeric(table[c], errors="coerce")
        elif table[c].dtype == object:  # a value the trial's model has none of (a baseline's PE)
            table[c] = ["-" if v is None or v is pd.NA else v for v in table[c]]
    text = table.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.3f}")
    print(text, file=out)
