"""The held-out stage as the launcher runs it, after training and the timing stage: the trials the
validation metric chose (:func:`sweeps.report.selection.chosen_trials`) are evaluated once each on
their task's test split (:func:`sweeps.heldout.evaluate.evaluate_checkpoint`), each in a Ray task
that holds one trial's resources (a GPU share where trials had one), and ``heldout.json`` is written
beside the trial: a resumed sweep finds it and does not evaluate the same checkpoint again.
The figures go into the rows (``test/bleu`` ...), the trial's W&B run summary and its Optuna study
(:func:`publish_heldout`).

A stop (a preemption, Ctrl-C, the budget: the launcher's :class:`~sweeps.timing.jobs.StageWatch`)
is checked every :data:`~sweeps.timing.jobs.POLL_S` seconds: the running evaluations' Ray tasks
are ended at once, nothing of them is written, and their rows say that ``--resume`` evaluates them
(:data:`NOT_EVALUATED`).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeps.heldout.evaluate import TEST_COLUMNS, evaluate_checkpoint, split_name
from sweeps.layout import HELDOUT_FILE, write_atomic
from sweeps.report.columns import FINISHED
from sweeps.report.selection import is_confirm, mark_chosen
from sweeps.timing.files import (
    checkpoint_fingerprint,
    checkpoint_gone,
    gone_in_launch,
    measured_this,
    same_checkpoint,
)
from sweeps.timing.jobs import POLL_S, StageWatch, end_tasks, tasks_end_with
from sweeps.trial.lifecycle import quiet_logs

#: results.csv's column for a chosen trial that could not be evaluated on test
HELDOUT_ERROR = "heldout_error"
#: results.csv's column naming the test split a row's test figures come from
TEST_SPLIT = "test_split"
#: a chosen trial's ``heldout_error`` when the sweep stopped before it was evaluated
NOT_EVALUATED = "not evaluated: the sweep stopped first (--resume evaluates it)"


def stopped_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows a stop left unevaluated (:data:`NOT_EVALUATED`)."""
    return [row for row in rows if row.get(HELDOUT_ERROR) == NOT_EVALUATED]


def _mark_chosen(rows: list[dict[str, Any]], spec: Any) -> set[str]:
    """``chosen`` written into the rows by the sweep's metric (over seeds, its objective, where
    configurations are judged over seeds); the chosen trial ids."""
    return mark_chosen(rows, spec.metric.name, spec.metric.mode, spec.seed_objective)


def mark_not_evaluated(rows: list[dict[str, Any]], spec: Any) -> int:
    """A stop after training, before the held-out stage: the trials the metric chose (``chosen``
    written as the stage writes it) say they are not evaluated yet (:data:`NOT_EVALUATED`).
    Nothing where a trial is unfinished: the choice may change once it finishes. Returns how many
    rows say so."""
    if any(row.get("status") in ("unfinished", "preempted", "budget") for row in rows):
        return 0
    chosen = _mark_chosen(rows, spec)
    marked = 0
    for row in rows:
        if row.get("trial_id") in chosen and not _present(row.get(TEST_COLUMNS[0])):
            row[HELDOUT_ERROR] = NOT_EVALUATED
            marked += 1
    return marked


def _evaluate_task(checkpoint: str, task: dict[str, Any], seed: int) -> dict[str, float]:
    """The body of the stage's Ray task: the GPU when Ray gave this task one."""
    import ray
    import torch

    quiet_logs()
    device = "cuda" if ray.get_gpu_ids() and torch.cuda.is_available() else "cpu"
    return evaluate_checkpoint(checkpoint, task, seed, device)


def _record_path(trial_dir: str, out_dir: Path, trial_id: str) -> Path:
    # beside the trial's results; a bucket's trial folder is not the driver's to write
    folder = Path(trial_dir) if "://" not in trial_dir else out_dir / "heldout" / trial_id
    return folder / HELDOUT_FILE


def evaluated_before(plans: Mapping[str, tuple[Any, str]], out_dir: Path) -> list[str]:
    """The trials of ``plans`` ({trial id: (plan, folder)}) with a held-out record on disk: those
    a launch evaluated, chosen then or not now."""
    return [t for t, (_, folder) in plans.items() if _record_path(folder, out_dir, t).is_file()]


def _present(value: Any) -> bool:
    try:
        return value is not None and float(value) == float(value)
    except (TypeError, ValueError):
        return False


def _already_evaluated(path: Path, checkpoint: str, fingerprint: str) -> dict[str, float] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    same = same_checkpoint(record.get("fingerprint"), checkpoint, current=fingerprint)
    return record.get("metrics") if same else None


def _kept_when_gone(path: Path, checkpoint: str) -> tuple[str, dict[str, float]] | None:
    """(split, test figures) of the record at ``path`` where it measured ``checkpoint``, a
    checkpoint whose file is gone (:func:`~sweeps.timing.files.measured_this`): the figures of
    that model, which nothing can evaluate again; None where there is no such record."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not measured_this(record.get("checkpoint"), checkpoint):
        return None
    metrics = record.get("metrics")
    return (record.get("split") or "", metrics) if isinstance(metrics, dict) else None


def evaluate_chosen_trials(
    rows: list[dict[str, Any]],
    plans: Mapping[str, tuple[Any, str]],
    out_dir: Path,
    spec: Any,
    log: Callable[[str], None] | None = print,
    watch: StageWatch | None = None,
) -> dict[str, dict[str, float]]:
    """Mark the chosen rows (``chosen``), evaluate them and the finished confirm trials (or, with
    ``heldout.trials: all``, every finished row) on test and write ``test/bleu`` ... and
    ``test_split`` into them, or ``heldout_error``. ``plans`` maps a trial id to its plan and
    folder; ``spec`` is the sweep's. ``watch`` is polled between evaluations; a stop leaves the
    rows not evaluated with :data:`NOT_EVALUATED`. Returns ``{trial id: test figures}`` of the
    rows that have them. Needs a running Ray."""
    say = log or (lambda _msg: None)
    chosen = _mark_chosen(rows, spec)
    every = spec.heldout.trials == "all"
    todo, results = [], {}
    for row in rows:
        tid = row.get("trial_id")
        if not tid or not row.get("checkpoint") or tid not in plans:
            continue
        finished = row.get("status") in FINISHED
        if tid not in chosen and not ((every or is_confirm(row)) and finished):
            continue
        if _present(row.get(TEST_COLUMNS[0])):  # a reused row tested in its earlier sweep
            continue
        plan, trial_dir = plans[tid]
        path = _record_path(trial_dir, out_dir, tid)
        if checkpoint_gone(row["checkpoint"]):  # nothing can evaluate that model again
            kept = _kept_when_gone(path, row["checkpoint"])
            if kept is None:
                row[HELDOUT_ERROR] = gone_in_launch(row["checkpoint"], "evaluate")
                say(f"[heldout] trial {tid}: {row[HELDOUT_ERROR]}")
                continue
            row[TEST_SPLIT], metrics = kept
            row.update(metrics)
            results[tid] = metrics
            say(
                f"[heldout] trial {tid}: its checkpoint is gone; the figures evaluated for it "
                f"before are kept ({path})"
            )
            continue
        try:
            fingerprint = checkpoint_fingerprint(row["checkpoint"])
        except Exception as exc:  # noqa: BLE001 -- a missing checkpoint is said in the row
            row[HELDOUT_ERROR] = str(exc)[:300]
            continue
        row[TEST_SPLIT] = split_name(plan.task)
        found = _already_evaluated(path, row["checkpoint"], fingerprint)
        if found is not None:
            row.update(found)
            results[tid] = found
            say(f"[heldout] trial {tid}: already evaluated on {row[TEST_SPLIT]} ({path})")
            continue
        todo.append((row, plan, path, fingerprint))
    if not todo:
        return results
    confirm = sum(1 for row, *_ in todo if is_confirm(row))
    say(
        f"\nevaluating {len(todo) - confirm} trial(s) chosen on validation ({spec.metric.name}, "
        f"{spec.metric.mode})"
        + (f" and {confirm} confirm trial(s)" if confirm else "")
        + " once on the test split:"
    )
    for row, metrics, path, fingerprint in _evaluate(todo, spec.resources, say, watch):
        row.update(metrics)
        results[row["trial_id"]] = metrics
        record = {
            "trial_id": row["trial_id"],
            "checkpoint": str(row["checkpoint"]),
            "fingerprint": fingerprint,
            "split": row[TEST_SPLIT],
            "metrics": metrics,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(record, indent=2))
        figures = ", ".join(f"{k} {v:.2f}" for k, v in metrics.items() if k in TEST_COLUMNS[:2])
        say(
            f"[heldout] trial {row['trial_id']} ({row['cell']} seed={row['seed']}): {figures} on "
            f"{row[TEST_SPLIT]}"
        )
        if watch is not None:
            watch.done("heldout")
    return results


def _slots(resources: Any) -> int:
    """How many evaluations of ``resources`` (one trial's CPUs and GPU share) the alive nodes hold
    at once (at least one): the stage starts no more, so what it holds is what runs."""
    import ray

    fits = 0
    for node in ray.nodes():
        have = (node.get("Resources") or {}) if node.get("Alive") else {}
        by_cpu = int(have.get("CPU", 0) // resources.cpu) if resources.cpu else 1 << 30
        by_gpu = int(have.get("GPU", 0) // resources.gpu) if resources.gpu else 1 << 30
        fits += min(by_cpu, by_gpu) if have else 0
    return max(1, fits)


def _evaluate(todo: list, resources: Any, say: Callable[[str], None], watch: StageWatch | None):
    """Evaluate ``todo`` ((row, plan, path, fingerprint) each) in Ray tasks, as many at once as
    the cluster holds; yields (row, metrics, path, fingerprint) as each one finishes. A failed one
    gets its ``heldout_error``; a stop from ``watch`` ends the running tasks and marks theirs and
    the ones not started :data:`NOT_EVALUATED`."""
    import ray

    task = ray.remote(max_retries=0)(_evaluate_task).options(
        num_cpus=resources.cpu, num_gpus=resources.gpu
    )
    waiting, running, slots = deque(todo), {}, _slots(resources)
    with tasks_end_with(running):
        while waiting or running:
            n = len(running)
            if watch is not None and watch.poll(n * resources.cpu, n * (resources.gpu or 0.0)):
                end_tasks(list(running))
                for row, *_ in [*running.values(), *waiting]:
                    row[HELDOUT_ERROR] = NOT_EVALUATED
                say(f"[heldout] stopped: {n + len(waiting)} evaluation(s) left for --resume")
                return
            while waiting and len(running) < slots:
                row, plan, path, fingerprint = item = waiting.popleft()
                running[task.remote(str(row["checkpoint"]), dict(plan.task), int(plan.seed))] = item
                if watch is not None:
                    watch.started("heldout")
            done, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
            if not done:
                continue
            row, _plan, path, fingerprint = running.pop(done[0])
            try:
                metrics = ray.get(done[0])
            except Exception as exc:  # noqa: BLE001 -- one failed evaluation must not lose the others
                cause = getattr(exc, "cause", None) or exc
                lines = str(cause).strip().splitlines()
                row[HELDOUT_ERROR] = (lines[-1] if lines else type(cause).__name__)[:300]
                say(f"[heldout] trial {row['trial_id']}: failed: {row[HELDOUT_ERROR]}")
                continue
            yield row, metrics, path, fingerprint
