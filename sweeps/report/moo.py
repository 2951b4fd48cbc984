"""results.md's multi-objective section, rebuilt from the Optuna journal and results.csv.

    python -m sweeps.report.moo sweep-results/minimal_k      # appends/replaces the section, writes the plots

Per (cell, seed) study: the Pareto front of the feasible finished trials (objective values as the
search saw them: ``decode_seconds`` is the decode probe's figure, with the timing stage's beside
it), the trials the constraints ruled out (shown apart, with the constraint each broke), how many
the rung rule stopped, the hypervolume and its history against the training steps spent, and one
line per cell answering the sweep's question: the smallest K that met every constraint. Then how
close the probe came to the timing stage. The sweeps are read by :mod:`sweeps.report.moo_views`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_modules.metric_names import VAL_BLEU
from sweeps.layout import OPTUNA_JOURNAL, RESULTS_CSV, RESULTS_MD, missing_in_sweep_folder
from sweeps.report.inputs import UNWRITABLE, input_problem, journal_problem
from sweeps.report.moo_plots import plot_moo
from sweeps.report.moo_views import (
    Point,
    StudyView,
    history,
    hypervolume,
    load_views,
    reference_point,
)
from sweeps.report.wandb_report import add_target_args, publish_report, sweep_report
from sweeps.spec.search_schema import PROBED

SECTION = "## Multi-objective search"


def answer_line(views: Sequence[StudyView], cell: str, constraint: str | None) -> str:
    """``L=20: smallest K within 1 BLEU of bahdanau: K=16 (BLEU 99.1 vs 99.6; decode 0.0123 s)``."""
    label = _short_cell(cell)
    what = f"smallest K with {constraint}" if constraint else "smallest K meeting the constraints"
    parts = []
    for v in views:
        ok = [p for p in v.finished if p.feasible and "K" in p.params]
        base = (v.baseline or {}).get("metrics") or {}
        base_text = (
            f" vs {base.get(v.metric_names[0]):.2f}"
            if base.get(v.metric_names[0]) is not None
            else ""
        )
        if not ok:
            best = max(v.finished, key=lambda p: p.values[0], default=None)
            near = (
                f" (best finished: K={best.params.get('K')}, {v.metric_names[0]} "
                f"{best.values[0]:.2f}{base_text}{_broke(best, constraint)})"
                if best
                else ""
            )
            parts.append((None, f"none of the searched K{near}" + _untried_below(v, None)))
            continue
        p = min(ok, key=lambda p: (p.params["K"], -p.values[0]))
        extra = "".join(f", {k}={val}" for k, val in p.params.items() if k != "K")
        extra += f", trial {p.trial_id}" if p.trial_id else ""
        timed = f" / {p.timed:.4f} s timed" if p.timed is not None else ""
        parts.append(
            (
                p.params["K"],
                f"K={p.params['K']} ({v.metric_names[0]} {p.values[0]:.2f}{base_text}; "
                f"decode {p.values[1]:.4f} s probe{timed}{extra})"
                + _untried_below(v, p.params["K"]),
            )
        )
    seeds = (
        "; ".join(f"{v.seed_label}: {text}" for v, (_, text) in zip(views, parts))
        if len(views) > 1
        else parts[0][1]
    )
    return f"{label}: {what}: {seeds}"


def _broke(point: Point, constraint: str | None) -> str:
    """``, broke val/bleu >= 50``: the constraints a finished trial failed, unless it failed only
    the one the answer is about (which its figures beside the baseline's show)."""
    if not point.broken or point.broken == [constraint]:
        return ""
    return f", broke {', '.join(point.broken)}"


def _baseline_figure(name: str, value: float) -> str:
    """``val/bleu 100.00``, ``decode_seconds 0.0160 (probe)``: a probed objective is the probe's
    figure, as the trials it is compared with (the timing stage's is in the tables above)."""
    return f"{name} {value:.4g}" + (" (probe)" if name in PROBED else "")


def _objectives_first(figures: dict[str, float], v: StudyView) -> list[str]:
    """The names of a baseline's figures: the study's objectives in their order, then the others
    (a relative constraint's) by name; not as stored, which once followed a set's order."""
    ours = [n for n in v.metric_names if n in figures]
    return ours + sorted(n for n in figures if n not in ours)


def _untried_below(v: StudyView, k: int | None) -> str:
    """The smaller K (``k`` None: any K, where none met the constraints) the rule stopped before
    their end: the answer is the smallest K that finished within the bound, not a proof that no
    smaller K would have (a stop on decode time is a stop on time, and where K hardly changes the
    time, the probe's noise decides it)."""
    stopped = sorted(
        {
            (int(p.params["K"]), _other_than_finished(v, p))
            for p in v.points
            if p.state == "PRUNED" and "K" in p.params and (k is None or int(p.params["K"]) < k)
        }
    )
    if not stopped:
        return ""
    return (
        f"; {'smaller ' if k is not None else ''}K stopped by the rule before the end, their "
        f"final BLEU unknown: {', '.join(f'K={x}{o}' for x, o in stopped)} (not ruled out)"
    )


def _other_than_finished(v: StudyView, stopped: Point) -> str:
    """`` (position_encoding=True)``: what sets a stopped trial apart from the finished trials of
    its K, where there are any (their final BLEU is known, so the K alone would say too much);
    empty where no trial of its K finished."""
    k = stopped.params["K"]
    same = [p for p in v.finished if p.params.get("K") == k]
    if not same:
        return ""
    apart = {
        name: value
        for name, value in stopped.params.items()
        if name != "K" and any(p.params.get(name) != value for p in same)
    }
    return f" ({', '.join(f'{n}={x}' for n, x in apart.items())})" if apart else ""


def second_objective_note(name: str) -> str:
    """Where the search's second objective comes from: a probe measured before training (decode
    time, or a training step's time or peak), or the trial's own report."""
    if name == "decode_seconds":
        return (
            f"{name} is the decode probe's figure for the trial's architecture (measured alone "
            "before training; the timing stage's figure after training beside it)."
        )
    if name in PROBED:
        return (
            f"{name} is the training probe's figure for the trial's architecture (a training step "
            "of the untrained model, measured alone before training)."
        )
    return f"{name} is what the trial reported."


def section(sweep_dir: Path, views: list[StudyView] | None = None) -> str:
    """The Markdown of the section (empty when the journal holds no multi-objective study)."""
    views = load_views(sweep_dir) if views is None else views
    if not views:
        return ""
    names = views[0].metric_names
    constraint = next((c for v in views for c in v.constraints if " within " in c), None)
    lines = [
        SECTION,
        "",
        f"Objectives: {names[0]} ({views[0].directions[0]}), {names[1]} ({views[0].directions[1]}); "
        f"{second_objective_note(names[1])} Fronts: the feasible finished trials no other "
        f"dominates. Hypervolume: reference {names[0]} 0 and 1.1 x the study's slowest {names[1]}. "
        f"Early stopping: the Pareto rung rule (docs/moo_early_stopping.md){_ties(views)}. "
        "The answers count finished trials only (a stopped one is named as not ruled out); the "
        "tables above take each cell's best trial by its last report, a stopped one included, so "
        "the two can name different models.",
        "",
        "### Answers",
        "",
    ]
    by_cell: dict[str, list[StudyView]] = {}
    for v in views:
        by_cell.setdefault(v.cell, []).append(v)
    for cell, vs in by_cell.items():
        lines.append("- " + answer_line(sorted(vs, key=lambda v: v.seed), cell, constraint))
    for v in views:
        lines += ["", f"### {v.cell}, {v.seed_label}", ""]
        front, ref = v.front(), reference_point(v)
        base = (v.baseline or {}).get("metrics")
        if v.baseline:
            model = " ".join(
                f"{k.split('.')[-1]}={val}" for k, val in (v.baseline.get("model") or {}).items()
            )
            lines.append(
                f"Baseline ({model}): "
                + (
                    ", ".join(_baseline_figure(k, base[k]) for k in _objectives_first(base, v))
                    if base
                    else "failed"
                )
            )
            lines.append("")
        lines += ["Pareto front:", "", _table(front, v), ""]
        out = [p for p in v.finished if not p.feasible]
        if out:
            lines += [
                "Constrained out (finished, but broke a constraint):",
                "",
                _table(out, v, broken=True),
                "",
            ]
        pruned = [p for p in v.points if p.state == "PRUNED"]
        total = sum(p.steps for p in v.points)
        hist = history(v)
        lines.append(
            f"{len(v.finished)} finished, {len(pruned)} stopped by the rung rule"
            + (f" ({_stop_reasons(p.rung for p in pruned)})" if pruned else "")
            + f", {sum(p.state == 'FAIL' for p in v.points)} failed; {total} training steps in all. "
            f"Hypervolume {hypervolume(v.finished, v, ref):.4g}."
        )
        if hist:
            lines += ["", "| training steps spent | hypervolume |", "| --- | --- |"]
            lines += [f"| {s} | {h:.4g} |" for s, h in hist]
    lines += ["", probe_agreement(views)]
    return "\n".join(lines) + "\n"


def probe_agreement(views: Sequence[StudyView]) -> str:
    """How close the decode probe's estimates were to the timing stage's figures."""
    pairs = [
        (p.values[1], p.timed)
        for v in views
        for p in v.points
        if p.timed is not None and len(p.values) > 1 and p.state in ("COMPLETE", "PRUNED")
    ]
    if not pairs:
        return "Decode probe vs timing stage: no trial was timed by the timing stage (timing disabled?)."
    errors = [abs(est - t) / t for est, t in pairs]
    return (
        f"Decode probe vs timing stage, {len(pairs)} trials: the probe's estimate was within "
        f"{100 * statistics.median(errors):.1f}% of the timing stage's figure (median), {100 * max(errors):.1f}% at "
        f"worst; mean ratio timed/probe {statistics.mean(t / e for e, t in pairs):.3f}."
    )


def section_with_plots(sweep_dir: Path) -> tuple[str, dict[str, Path]]:
    """The section's Markdown (with its figures linked) and its plots, drawn; ("", {}) when the
    journal holds no multi-objective study."""
    sweep_dir = Path(sweep_dir)
    views = load_views(sweep_dir)
    if not views:
        return "", {}

    paths = plot_moo(views, sweep_dir, history)
    text = section(sweep_dir, views)
    if paths:
        text += "\n" + "\n".join(f"![{name}]({p.name})" for name, p in paths.items()) + "\n"
    return text, paths


def write_section(sweep_dir: Path) -> dict[str, Path]:
    """Put the section into results.md (replacing an earlier one) and draw its plots."""
    text, paths = section_with_plots(sweep_dir)
    if not text:
        return {}
    md = Path(sweep_dir) / RESULTS_MD
    old = md.read_text() if md.exists() else ""
    md.write_text(with_section(old, text))
    paths["md"] = md
    return paths


def with_section(page: str, text: str) -> str:
    """``page`` with its multi-objective section (if any) replaced by ``text``."""
    old = page.split(SECTION)[0].rstrip()
    return (old + "\n\n" if old else "") + text


def _table(points: Sequence[Point], v: StudyView, broken: bool = False) -> str:
    if not points:
        return "(none)"
    keys = list(dict.fromkeys(k for p in points for k in p.params))
    head = [
        "trial (Optuna #)",
        *keys,
        v.metric_names[0],
        f"{v.metric_names[1]} (probe)",
        f"{v.metric_names[1]} (timed)",
        "steps",
    ]
    head += ["broke"] if broken else []
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for p in sorted(points, key=lambda p: p.values[1] if len(p.values) > 1 else 0):
        cells = [
            f"{p.trial_id} (#{p.number})" if p.trial_id else f"#{p.number}",
            *(str(p.params.get(k, "")) for k in keys),
            f"{p.values[0]:.2f}",
            f"{p.values[1]:.4f}",
            f"{p.timed:.4f}" if p.timed is not None else "",
            str(p.steps),
        ]
        cells += [", ".join(p.broken)] if broken else []
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _short_cell(cell: str) -> str:
    return cell.replace("length=", "L=")


def report_sections(sweep_dir: Path) -> list[tuple[str, str]]:
    """The section as the W&B Report's (heading, Markdown) (its figures are the Report's panels);
    [] when the journal holds no multi-objective study."""
    text = section(Path(sweep_dir))
    return [(SECTION.lstrip("# "), text.split("\n", 1)[1].lstrip("\n"))] if text else []


def wandb_report(
    sweep_dir: Path,
    entity: str | None,
    project: str | None,
    group: str | None,
    title: str | None = None,
) -> Any:
    """The sweep's W&B Report (:func:`sweeps.report.wandb_report.sweep_report`, as
    ``python -m sweeps.report DIR --wandb`` builds it): results.md's text, then this section's
    fronts, constrained-out trials, hypervolume history and answer lines as Markdown, then the
    panels over the runs of this sweep (BLEU and decode seconds per cell, BLEU against the timing
    stage's decode seconds). Not saved."""
    sweep_dir = Path(sweep_dir)
    return sweep_report(
        sweep_dir, entity, project, group, title, extra=report_sections(sweep_dir)
    ).report


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sweeps.report.moo", description=__doc__.splitlines()[0]
    )
    p.add_argument("sweep_dir", help="<output>/<name>, the folder holding optuna.journal")
    p.add_argument(
        "--wandb",
        action="store_true",
        help="also build and save the sweep's W&B Report, as python -m sweeps.report DIR --wandb "
        "does (API key, network)",
    )
    add_target_args(p)
    args = p.parse_args(argv)
    sweep_dir = Path(args.sweep_dir)
    missing = missing_in_sweep_folder(sweep_dir, OPTUNA_JOURNAL, "sweep-results/minimal_k")
    if missing:
        p.error(missing)
    damaged = journal_problem(sweep_dir / OPTUNA_JOURNAL)
    if damaged:
        p.error(damaged)
    # the checks python -m sweeps.report makes of a results.csv: cut short, without its columns,
    # a launch still running (without one, the section is the journal's alone)
    if (sweep_dir / RESULTS_CSV).is_file() and (problem := input_problem(sweep_dir, VAL_BLEU)):
        p.error(problem)
    try:
        written = write_section(sweep_dir)
    except OSError as exc:
        if exc.errno not in UNWRITABLE:
            raise
        p.exit(
            1,
            f"error: cannot write {exc.filename or sweep_dir} ({exc.strerror}): the section is "
            "written beside results.csv; run it where that folder can be written, or on a copy "
            "of the sweep's folder\n",
        )
    print(
        "wrote " + ", ".join(str(x) for x in written.values())
        if written
        else f"no multi-objective study in {sweep_dir / OPTUNA_JOURNAL}: nothing written"
    )
    if not args.wandb:
        return 0
    return publish_report(
        sweep_dir,
        "the section above is written",
        entity=args.entity,
        project=args.project,
        group=args.group,
        extra=report_sections(sweep_dir),
    )


def _ties(views: Sequence[StudyView]) -> str:
    """How the rule compared (its tolerance per objective, as its decisions recorded it)."""
    tolerance = next(
        (p.rung["tolerance"] for v in views for p in v.points if (p.rung or {}).get("tolerance")),
        None,
    )
    names = views[0].metric_names
    ties = [f"{name} by more than {t:.0%}" for name, t in zip(names, tolerance or []) if t]
    return (
        f"; a trial was hopeless only when a finished one was better in {' or '.join(ties)}"
        if ties
        else ""
    )


def _stop_reasons(rungs) -> str:
    """Why the rule stopped the trials, counted: at a rung (ranked out, on arrival or, when trials
    wait at rungs, once the rung was complete), later by the trials that reached the rung after it
    (pushed out, rule 2b), or at a report because a finished trial dominates the best each could
    still reach ("hopeless", no rung)."""
    from collections import Counter

    def reason(rung: dict | None) -> str:
        rung = rung or {}
        if rung.get("hopeless"):
            return f"hopeless at report {rung.get('report', '?')}"
        # a rung is named by the report it is at (the scheduler's milestone): the second rung of
        # a grace period of 1 and rf 3 is report 3's, which docs/moo_early_stopping.md calls rung 2
        at = f"the rung at report {rung.get('rung', '?')}"
        if rung.get("report") is not None:
            return f"pushed out of {at} by later arrivals"
        if rung.get("waited"):
            return f"ranked out at {at} after waiting for it to fill"
        return f"ranked out at {at}"

    return ", ".join(f"{n} {why}" for why, n in Counter(reason(r) for r in rungs).items())


if __name__ == "__main__":
    sys.exit(main())
