"""The checks the report commands make of a sweep's folder before they write anything
(``python -m sweeps.report``, ``python -m sweeps.report.moo``): a results.csv cut short, edited or
of another kind, an Optuna journal that is not whole, a launch still running the sweep; each
refusal one line with the fix, and the report already there kept."""

from __future__ import annotations

import errno
import json
import math
from csv import reader
from pathlib import Path

from lightning_modules.metric_names import VAL_BLEU
from sweeps.layout import OPTUNA_JOURNAL, RESULTS_CSV, lock_holder, missing_in_sweep_folder

#: how a damaged results.csv is made again (every refusal of one says it)
REWRITES = "A launch's --resume writes it again from the sweep's trials"
#: the errors of a report that cannot be written where it goes (not a fault of the sweep's files)
UNWRITABLE = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOSPC, errno.EDQUOT}
)


#: the columns every results.csv holds (:data:`~sweeps.report.columns.FIRST_COLUMNS`): which trial,
#: which cell and seed, how it ended
REQUIRED = ("trial_id", "cell", "model", "length", "seed", "status")


def input_problem(sweep_dir: Path, metric: str) -> str | None:
    """What is wrong with the command's folder, its results.csv or ``--metric``, with the fix;
    None when nothing. A results.csv that is cut short, holds no trial, lacks a column every
    results.csv has (or val/bleu, which every table shows), or has no finite value of the metric
    is refused: the rebuild would replace the
    report already there with one of nothing."""
    if sweep_dir.name == RESULTS_CSV and sweep_dir.is_file():
        return f"{sweep_dir}: give the sweep's folder, {sweep_dir.parent}, not its {RESULTS_CSV}"
    missing = missing_in_sweep_folder(sweep_dir, RESULTS_CSV)
    if missing:
        return missing
    csv = sweep_dir / RESULTS_CSV
    kept = "; results.md and the plots are left as they are"
    holder = lock_holder(sweep_dir)
    if holder is not None:
        return (
            f"{sweep_dir}: a launch is running this sweep ({holder}); its results.csv is an "
            f"earlier run's until the launch writes it at its end, so a report now would show "
            f"the unfinished sweep as it was{kept}. Run this again when the launch has ended"
        )
    try:
        with csv.open(newline="", encoding="utf-8") as f:
            rows = list(reader(f))
    except UnicodeDecodeError as exc:
        return (
            f"{csv}: not UTF-8 text (byte {exc.start}): not a results.csv the launch wrote{kept}. "
            f"{REWRITES}"
        )
    columns, rows = (rows[0], rows[1:]) if rows else ([], [])
    if not rows:
        return (
            f"{csv}: no trial rows ({'only a header' if columns else 'empty'}): nothing to build "
            f"a report from{kept}. {REWRITES}"
        )
    short = [n + 2 for n, row in enumerate(rows) if len(row) != len(columns)]
    if short:
        return (
            f"{csv}: line {short[0]} has {len(rows[short[0] - 2])} fields where the header has "
            f"{len(columns)}: the file is cut short or edited{kept}. {REWRITES}"
        )
    lacking = [c for c in REQUIRED if c not in columns]
    if lacking:
        return (
            f"{csv}: no {', '.join(lacking)} column: not a results.csv the launch wrote{kept}. "
            f"{REWRITES}"
        )
    for k, column in enumerate(columns):
        if not _numeric_column(column):
            continue
        bad = next(
            ((n + 2, row[k]) for n, row in enumerate(rows) if row[k] and _float(row[k]) is None),
            None,
        )
        if bad is not None:
            line, text = bad
            return (
                f"{csv}: line {line}, column {column}: {text!r} is not a number (edited by hand? "
                f"a launch's --resume writes it again from the sweep's trials){kept}"
            )
    bleu = columns.index(VAL_BLEU) if VAL_BLEU in columns else None
    if bleu is None or not any(_number(row[bleu]) for row in rows):
        # whatever --metric chooses by, every table shows BLEU: another --metric is no way out
        return (
            f"{csv}: "
            + (f"no {VAL_BLEU} column" if bleu is None else f"no finite {VAL_BLEU} in any trial")
            + f": the report's tables, findings and figures show each chosen trial's {VAL_BLEU}, "
            "whatever --metric chooses by, so none can be built (edited by hand? a launch's "
            f"--resume writes it again from the sweep's trials){kept}"
        )
    if metric not in columns:
        metrics = [c for c in columns if "/" in c or c.endswith("_seconds")] or columns
        return f"--metric {metric}: not a column of {csv}; its metrics: {', '.join(metrics)}"
    journal = sweep_dir / OPTUNA_JOURNAL
    if journal.is_file() and (damaged := journal_problem(journal)):
        return damaged
    at = columns.index(metric)
    values = [row[at] for row in rows if row[at] != ""]
    numbers = [v for v in values if _number(v)]
    if not numbers:
        filled = [
            c for k, c in enumerate(columns)
            if ("/" in c or c.endswith("_seconds")) and any(_number(r[k]) for r in rows)
        ]  # fmt: skip
        return (
            f"--metric {metric}: "
            + (
                "no trial has a value of it"
                if not values
                else "not a finite number in any trial (nan, inf or text)"
            )
            + f" in {csv}; the metrics with values: {', '.join(filled) or 'none'}"
        )
    return None


#: results.csv's columns of numbers besides the metrics (``val/bleu``) and the ``_seconds`` ones
NUMBER_COLUMNS = frozenset(
    {"length", "seed", "K", "step", "retries", "train_time_s", "train_peak_mb", "decode_peak_mb"}
    | {"decode_repeats", "decode_passes_per_repeat", "decode_precision", "decode_processes"}
    | {"decode_interrupted"}
)


def _numeric_column(column: str) -> bool:
    """Whether the report reads ``column`` as numbers: text there stops it half-way."""
    return "/" in column or "_seconds" in column or column in NUMBER_COLUMNS


def _float(text: str) -> float | None:
    """``text`` as a number (NaN and the infinities too: a trial without the figure); None for
    text that is none."""
    try:
        return float(text)
    except ValueError:
        return None


def _number(text: str) -> bool:
    """Whether ``text`` is a finite number: a NaN or an infinity chooses no trial."""
    value = _float(text)
    return value is not None and math.isfinite(value)


def journal_problem(
    journal: Path, kept: str = "; results.md is left as it is", cut_ok: bool = False
) -> str | None:
    """What makes ``journal`` (Optuna's JournalFileBackend: one JSON record a line) unfit to
    rebuild a report from, with what is kept (``kept``: said after it); None when every line is
    whole. A journal cut short (a copy stopped midway, a full disk) would give a section of part
    of its studies. ``cut_ok``: a last line cut short is not a problem (Optuna reads the journal
    without it, as it does a record still being written), only a garbled whole line is."""
    try:
        text = journal.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{journal}: not UTF-8 text (byte {exc.start}): not a journal Optuna wrote{kept}"
    if text and not text.endswith("\n"):
        if not cut_ok:
            lines = text.count("\n") + 1
            return (
                f"{journal}: its last line ({lines}) is cut short: the journal is incomplete{kept}"
            )
        text = text[: text.rfind("\n") + 1]
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or "op_code" not in record:  # each record names its op
            return f"{journal}: line {n} is not one of Optuna's records (garbled){kept}"
    return None
