"""The report's text, shared by results.md and the W&B Report: the tables (the paper's Table 1
layout by model and length, the long table, the Pareto front's table) and the paragraphs around
them (the summary rule, seeds, what the decode times are and which are contended), as
(heading, Markdown) sections (:func:`results_sections`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from lightning_modules.metric_names import VAL_BLEU, VAL_LOSS, VAL_SACREBLEU
from sweeps.report.columns import FINISHED
from sweeps.report.results import DECODE_SECONDS, TIMING_DEVICE, natural_order
from sweeps.report.stats import sacrebleu_signatures, summary_cells, told_apart_note
from sweeps.report.summary import (
    DAGGER,
    axis_of,
    cell_summary,
    chosen_columns,
    chosen_text,
    contended_count,
    contended_mask,
    contended_notes,
    front_groups,
    front_points,
    over_fewer_seeds,
    pareto_rule,
    seconds_column,
    summary_rule,
    timed_split,
)
from sweeps.report.table_text import mean_std, to_markdown
from sweeps.report.train_cost import train_cost_sections

CONTENDED_MEANING = (
    "measured while the machine was busy (the timing stage got too few passes on a quiet core of a machine at "
    "full speed, so the median includes disturbed ones)"
)
RETIME_HINT = "time the checkpoints again on a quiet machine (python -m sweeps.timing CKPT)"
PARETO_RULE = (
    pareto_rule()
)  # the decode front's (the training-cost front's: sweeps.report.train_cost)


def paper_table(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> pd.DataFrame:
    """Rows (length, model), columns BLEU / decode seconds / loss / seeds: :func:`cell_summary`,
    with ``mean +- std`` where there are several seeds and a contended decode time marked †."""
    return _long_table(cell_summary(df, metric, mode))


def _long_table(summary: pd.DataFrame) -> pd.DataFrame:
    if summary.empty:
        return pd.DataFrame()
    keys = [k for k in (axis_of(summary), "model") if k in summary and summary[k].notna().any()]
    if summary[keys].duplicated().any():  # cells differing in more than length and model
        keys = ["cell"]
    table = summary[keys].copy()
    for column, option in chosen_columns(summary).items():
        table[option] = summary[column].fillna("")
    for name, column, digits in (
        ("BLEU", VAL_BLEU, 2),
        ("sacreBLEU", VAL_SACREBLEU, 2),
        (DECODE_SECONDS, DECODE_SECONDS, 4),
        ("loss", VAL_LOSS, 3),
    ):
        if column in summary and summary[column].notna().any():  # sacreBLEU: a WMT sweep's
            table[name] = [
                mean_std(m, sd, digits) for m, sd in zip(summary[column], summary[f"{column}_std"])
            ]
    if DECODE_SECONDS in table:
        table[DECODE_SECONDS] = _seconds_text(summary)
    table["seeds"] = summary["seeds"]
    return table


def length_table(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> pd.DataFrame:
    """The paper's Table 1 layout: one row per model (:func:`natural_order`), per length the
    columns ``L=<n> BLEU`` and ``L=<n> decode s`` (:func:`cell_summary`'s mean ± std over seeds,
    a contended decode time marked †, "–" where the model was not run at that length).

    Empty when the sweep has no length axis, or its cells differ in more than length and model
    (then the long table, by cell, is the table)."""
    return _length_table(cell_summary(df, metric, mode))


def _length_table(summary: pd.DataFrame) -> pd.DataFrame:
    axis = axis_of(summary)
    if summary.empty or "model" not in summary or axis not in summary or summary[axis].isna().all():
        return pd.DataFrame()
    cells = summary.dropna(subset=[axis])
    if cells[[axis, "model"]].duplicated().any():
        return pd.DataFrame()
    label = (lambda v: str(v)) if axis == "pair" else (lambda v: f"L={v}")
    with_seconds = DECODE_SECONDS in cells and cells[DECODE_SECONDS].notna().any()
    seconds = pd.Series(_seconds_text(cells), index=cells.index) if with_seconds else None
    models = pd.Series(cells["model"].unique()).sort_values(key=natural_order, kind="stable")
    rows = []
    for model in models:
        row: dict[str, str] = {"model": model}
        for value in sorted(cells[axis].unique(), key=str if axis == "pair" else None):
            match = cells[(cells["model"] == model) & (cells[axis] == value)]
            found = not match.empty
            r = match.iloc[0] if found else None
            row[f"{label(value)} BLEU"] = (
                mean_std(r[VAL_BLEU], r[f"{VAL_BLEU}_std"], 2) + _chosen_text(r) if found else "–"
            )
            if with_seconds:
                row[f"{label(value)} decode s"] = seconds[match.index[0]] if found else "–"
        rows.append(row)
    return pd.DataFrame(rows)


def dash_note(wide: pd.DataFrame) -> str:
    """:data:`DASH_NOTE`, where the paper's layout ``wide`` has a "–"."""
    return DASH_NOTE if wide.isin(["–"]).any().any() else ""


def _chosen_text(row: pd.Series) -> str:
    """`` (K=3)``: the searched headline options' values the cell's chosen trials have."""
    chosen = chosen_text(row)
    return f" ({chosen})" if chosen else ""


def chosen_note(summary: pd.DataFrame) -> str:
    """What ``(K=3)`` beside a figure means, where a table shows one."""
    options = list(chosen_columns(summary).values())
    if not options:
        return ""
    names = " and ".join(options)
    return (
        f"({names}=...) beside a figure: the value of the trial chosen there, searched rather than "
        "a grid value, so the model's name does not say it; several, split by /, where the seeds' "
        "chosen trials differ."
    )


def _seconds_text(summary: pd.DataFrame) -> list[str]:
    marked = contended_mask(summary)
    timed = summary["timed_seeds"] if "timed_seeds" in summary else summary["seeds"]
    return [
        mean_std(m, sd, 4)
        + (f" {DAGGER}" if flag and pd.notna(m) else "")
        + (over_fewer_seeds(n, seeds) if pd.notna(m) else "")
        for m, sd, flag, n, seeds in zip(
            summary[DECODE_SECONDS],
            summary[f"{DECODE_SECONDS}_std"],
            marked,
            timed,
            summary["seeds"],
        )
    ]


def timing_failed_note(df: pd.DataFrame, summary: pd.DataFrame) -> str:
    """What ``(2 of 3 seeds)`` beside a decode time means, and each finished trial whose timing
    failed, with its error ("" when none did)."""
    if "timing_error" not in df or DECODE_SECONDS not in df:
        return ""
    errors = df["timing_error"].fillna("").astype(str)
    done = df["status"].isin(FINISHED) if "status" in df else pd.Series(True, index=df.index)
    failed = df[
        done & df[DECODE_SECONDS].isna() & (errors != "") & ~errors.str.startswith("not timed:")
    ]
    if failed.empty:
        return ""
    fewer = "timed_seeds" in summary and (summary["timed_seeds"] < summary["seeds"]).any()
    return (
        (
            "(n of N seeds) beside a decode time: its mean and spread are over the n seeds whose model "
            "was timed. "
            if fewer
            else ""
        )
        + "The timing stage failed for "
        + "; ".join(f"{r.cell} seed={r.seed} ({r.timing_error})" for r in failed.itertuples())
        + " (results.csv's timing_error; a `--resume` times them again, but not a model whose "
        "checkpoint is gone or damaged: delete its trial folder, and a sweep warm-started from "
        "this one trains it again)."
    )


def pareto_markdown(points: pd.DataFrame) -> str:
    """The front per length (or pair: :func:`axis_of`; and per context: :func:`front_groups`) as a
    table: model, BLEU, seconds (contended ones marked †), BLEU gained and time paid vs the
    previous point of the same front."""
    axis = axis_of(points)
    lines = [
        f"| {axis} | model | BLEU | decode s | +BLEU | +seconds |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    contended = contended_mask(points)
    for _, g in front_groups(points):
        previous = None
        for idx, row in g[g["pareto"]].sort_values(DECODE_SECONDS).iterrows():
            length = row.get(axis)
            bleu, seconds = float(row[VAL_BLEU]), float(row[DECODE_SECONDS])
            gain = "" if previous is None else f"{bleu - previous[0]:+.2f}"
            paid = "" if previous is None else f"{seconds - previous[1]:+.4f}"
            mark = (f" {DAGGER}" if contended[idx] else "") + over_fewer_seeds(
                row.get("timed_seeds"), row.get("seeds")
            )
            lines.append(
                f"| {length} | {row['model']}{_chosen_text(row)} | {bleu:.2f} | {seconds:.4f}{mark} "
                f"| {gain} | {paid} |"
            )
            previous = (bleu, seconds)
    return "\n".join(lines)


def pareto_notes(points: pd.DataFrame, timed: bool = True, pending: bool = False) -> list[str]:
    """What the front table means, the rule for contended times (when the timing stage ran) and
    the lengths whose front was computed among contended figures."""
    lines = ["Each step along the front: the BLEU a slower model buys and the seconds it costs."]
    if not timed:
        why = "not timed yet: `--resume` times them" if pending else "no timing stage ran"
        return lines + [
            f"The front orders training-time decode signals ({why}): not speed figures."
        ]
    return lines + contended_notes(points)


def seeds_line(df: pd.DataFrame, summary: pd.DataFrame, metric: str = VAL_BLEU) -> str:
    """How many seeds the sweep has, what a figure is over them, and the cells with fewer: every
    cell results.csv plans (whatever its trials' status), a cell where no seed finished among
    them, each with how many of its seeds finished and how the others ended."""
    seeds = sorted(pd.unique(df["seed"].dropna())) if "seed" in df else []
    names = ", ".join(str(s) for s in seeds)
    if len(seeds) <= 1:
        return (
            f"Seeds: 1 (seed {names}): each figure is one trial's, no spread."
            if seeds
            else "Seeds: none recorded."
        )
    line = f"Seeds: {len(seeds)} ({names}): each figure is the mean ± std over seeds."
    fewer = fewer_seeds(df, summary, len(seeds), metric)
    if fewer:
        line += " Fewer finished in: " + ", ".join(fewer) + "."
    return line


def fewer_seeds(df: pd.DataFrame, summary: pd.DataFrame, seeds: int, metric: str) -> list[str]:
    """``length=40 attention=bahdanau (0 of 3: 3 error)`` for each cell of ``df`` (results.csv's,
    any status) whose figures are over fewer than ``seeds`` seeds: how many finished, and what
    each other seed's trials ended as (``no val/bleu``: finished without a value of ``metric``)."""
    if "cell" not in df or "status" not in df:
        return []
    planned = summary_cells(df)
    finished = dict(zip(summary["cell"], summary["seeds"])) if "seeds" in summary else {}
    out = []
    for cell, trials in planned.groupby("cell", sort=False):
        n = int(finished.get(cell, 0))
        if n >= seeds:
            continue
        ended = []
        for _, seed in trials.groupby("seed", sort=False):
            done = seed["status"].isin(FINISHED)
            if metric in seed and (done & seed[metric].notna()).any():
                continue
            ended.append(f"no {metric}" if done.any() else str(seed["status"].iloc[-1]))
        counts = pd.Series(ended, dtype=object).value_counts(sort=False)
        how = ", ".join(f"{count} {ended_as}" for ended_as, count in counts.items())
        out.append(f"{cell} ({n} of {seeds}{': ' + how if how else ''})")
    return out


def unmeasured_line(df: pd.DataFrame, metric: str = VAL_BLEU) -> str:
    """The finished trials results.csv holds no value of ``metric`` for (a NaN, an empty field),
    by trial id: no table or figure shows them, there being nothing to choose them by."""
    if "status" not in df or metric not in df:
        return ""
    lost = df[df["status"].isin(FINISHED) & pd.to_numeric(df[metric], errors="coerce").isna()]
    if lost.empty:
        return ""
    ids = lost["trial_id"] if "trial_id" in lost else lost["cell"]
    named = ", ".join(
        f"{i} ({r.cell} seed={r.seed})" if "trial_id" in lost else str(i)
        for i, r in zip(ids, lost.itertuples())
    )
    return (
        f"Finished without a value of {metric}, so in no table or figure (nothing to choose them "
        f"by): {named}. Their results.csv rows say what they reported."
    )


#: what "–" in the paper's layout means, where the table has one
DASH_NOTE = (
    "–: no finished trial of the model at that length, either not planned there or every seed "
    "failed (the seeds line above names such cells)."
)


def fused_line(df: pd.DataFrame) -> str:
    """How many trials trained fused (results.csv's ``fused_with``; docs/fusion.md), or ""."""
    if "fused_with" not in df or not df["fused_with"].notna().any():
        return ""
    fused = df[df["fused_with"].notna()]
    timed = "train_step_seconds" in df and fused["train_step_seconds"].notna().any()
    waiting = (
        "status" in fused and fused["status"].isin(["unfinished", "preempted", "budget"]).any()
    )
    verb = "train" if waiting else "trained"  # a stopped sweep's groups train on --resume
    return (
        f"Fused: {len(fused)} of {len(df)} trials {verb} in {fused['fused_with'].nunique()} fused "
        "group(s) (results.csv's fused_with), each judged as a trial of its own"
        + (
            "; a training step and the peaks of memory were measured once for each cell of a "
            "group, on one member's model alone, and copied to that cell's other members, so in "
            "the findings they count once per cell, not once per seed (a cell trained in one "
            "group has no interval over seeds for them: not shown)."
            if timed
            else "."
        )
    )


def timing_pending(df: pd.DataFrame) -> bool:
    """Whether some trial waits for the timing stage (a stop came first: ``--resume`` times it)."""
    errors = df["timing_error"] if "timing_error" in df else pd.Series(dtype=object)
    return bool(errors.fillna("").astype(str).str.startswith("not timed:").any())


def timing_warning(summary: pd.DataFrame, timed: bool, pending: bool = False) -> str:
    """The page's opening warning when none of its decode times is a speed figure ("" otherwise);
    ``pending``: a stop came before the timing stage timed the models (:func:`timing_pending`)."""
    if summary.empty or DECODE_SECONDS not in summary or not summary[DECODE_SECONDS].notna().any():
        return ""
    if not timed:
        why = (
            "the sweep stopped before its timing stage timed these models (`--resume` times them)"
            if pending
            else "the timing stage did not run"
        )
        return (
            f"**The decode times here are not speed figures:** {why}, so they are "
            "val/decode_seconds, measured during training beside other trials."
        )
    marked, shown = contended_count(summary)
    if marked and marked == shown:
        return (
            f"**The decode times in this sweep are not speed figures:** all {shown} are contended ({DAGGER}): "
            f"{CONTENDED_MEANING}; {RETIME_HINT}."
        )
    return ""


def contended_line(summary: pd.DataFrame) -> str:
    """ "3 of 12 decode times are contended (†): ..." ("" when none is)."""
    marked, shown = contended_count(summary)
    if not marked:
        return ""
    several = "seeds" in summary and (summary["seeds"] > 1).any()
    return (
        f"{marked} of {shown} decode times {'is' if marked == 1 else 'are'} contended ({DAGGER}): {CONTENDED_MEANING}"
        + ("; a mean over seeds is marked when any seed's time is" if several else "")
        + f"; not speed figures: {RETIME_HINT}."
    )


def timed_on(df: pd.DataFrame) -> str:
    """Where the timing stage ran, from results.csv's ``timing_device(_name)``: "on CPU (AMD EPYC
    [Zen 3; family 25, model 1]) in processes pinned to their core(s)", "on GPU (NVIDIA H200)",
    both when a sweep's trials were timed on both. Results written before the columns existed
    were all timed on CPU."""
    pinned = " in processes pinned to their core(s)"
    if TIMING_DEVICE not in df or df[TIMING_DEVICE].dropna().empty:
        return "on CPU" + pinned
    named = "timing_device_name" in df
    places = []
    for device, kind in (("cpu", "CPU"), ("cuda", "GPU")):
        rows = df[df[TIMING_DEVICE] == device]
        if rows.empty:
            continue
        names = sorted(set(rows["timing_device_name"].dropna())) if named else []
        place = f"on {kind}" + (f" ({', '.join(names)})" if names else "")
        places.append(place + (pinned if device == "cpu" else ""))
    return " and ".join(places)


#: the settings a decode time is taken under, as results.csv has them, and their names in words
TIMING_SETTINGS = {"timing_split": "split", "timing_threads": "threads", TIMING_DEVICE: "device"}


def mixed_timing_line(df: pd.DataFrame) -> str:
    """The line saying a sweep's decode times were taken under more than one setting of the
    timing stage (another split, thread count or device: a warm start's reused rows keep theirs,
    as they were), how many of each; "" where all share one."""
    keys = [c for c in TIMING_SETTINGS if c in df]
    if DECODE_SECONDS not in df or not keys:
        return ""
    timed = df[df[DECODE_SECONDS].notna()]
    counts = timed[keys].astype(object).where(timed[keys].notna(), "?").value_counts(sort=False)
    if len(counts) <= 1:
        return ""
    parts = [
        " ".join(f"{TIMING_SETTINGS[k]} {v}" for k, v in zip(keys, key)) + f": {n} model(s)"
        for key, n in sorted(counts.items(), key=lambda kv: tuple(map(str, kv[0])))
    ]
    return (
        "These decode times were not all taken under one setting ("
        + "; ".join(parts)
        + "; ? where results.csv does not say): compare a figure only with those of its own "
        "setting. A warm start keeps a reused row's figures as they were; `python -m "
        "sweeps.timing CKPT` times any checkpoint again under one setting."
    )


def timing_text(df: pd.DataFrame) -> str:
    """What BLEU and the decode times are, and how the decode times were measured."""
    if seconds_column(df) == DECODE_SECONDS:

        def spread(column: str) -> str:
            values = sorted({int(v) for v in df[column].dropna()}) if column in df else []
            return (
                f"{values[0]}-{values[-1]}"
                if len(values) > 1
                else (str(values[0]) if values else "")
            )

        repeats, passes, processes = (
            spread("decode_repeats"),
            spread("decode_passes_per_repeat"),
            spread("decode_processes"),
        )
        precision = (
            df["decode_precision"].dropna() if "decode_precision" in df else pd.Series(dtype=float)
        )
        how = (f" over {repeats} timed repeats" if repeats else "") + (
            f" of {passes} passes" if passes not in ("", "1") else ""
        )
        how += (
            f", median known to within {100 * precision.max():.1f}% (95%)"
            if not precision.empty
            else ""
        )
        how += f", the fastest of {processes} fresh processes" if processes not in ("", "1") else ""
        timing = (
            f"decode_seconds: the seconds to decode {timed_split(df)}, the decode-timing stage's median{how}; "
            f"each model alone on its node after the Tune run, {timed_on(df)}; "
            "repeats that found their core shared or the machine running slow were run again (data loading "
            "excluded; per trial in results.csv: decode_seconds_iqr/min/max, decode_repeats, "
            "decode_precision, decode_interrupted, decode_contended; every repeat in timing.json). "
            "val/decode_seconds in results.csv and W&B is measured during training beside other trials: "
            "a training-time signal only."
        )
        if mixed := mixed_timing_line(df):
            timing += " " + mixed
    else:
        timing = (
            "decode_seconds: val/decode_seconds, measured during training beside other trials (the timing "
            "stage did not run): a training-time signal, not a speed measurement."
        )
    if VAL_SACREBLEU in df and df[VAL_SACREBLEU].notna().any():  # a translation sweep
        signatures = sacrebleu_signatures(df)
        signed = f", signature {' / '.join(f'`{s}`' for s in signatures)}" if signatures else ""
        return (
            "BLEU: sacrebleu corpus BLEU (tokenize=none) on the validation set's tokenized text, as "
            "the data files hold it (val/bleu, tokenized BLEU); sacreBLEU: hypotheses and "
            "references detokenized, then sacreBLEU's default 13a tokenizer (val/sacrebleu"
            f"{signed}): the metric WMT results are compared by, its references here the data "
            "files' tokenized text detokenized rather than WMT's raw references, so an "
            "approximation of a published score's protocol; " + timing
        )
    return "BLEU: sacrebleu corpus BLEU (tokenize=none) on the validation set; " + timing


#: the heading of results.md's list of failed trials, each with its error
FAILED_TRIALS = "Failed trials"


def results_sections(
    df: pd.DataFrame,
    metric: str = VAL_BLEU,
    mode: str = "max",
    summary: pd.DataFrame | None = None,
) -> list[tuple[str, str]]:
    """The report's text, shared by results.md and the W&B Report: (heading, Markdown) pairs, the
    first with heading "" (the preamble: a warning when no decode time is a speed figure, the
    summary rule, seeds and trial counts). Then, for a sweep with a length axis, the paper's
    layout (:func:`length_table`); the long table (:func:`paper_table`); the Pareto front; the
    failed trials. ``summary``: :func:`cell_summary` of ``df`` where the caller made it already."""
    summary = cell_summary(df, metric, mode) if summary is None else summary
    timed = seconds_column(df) == DECODE_SECONDS
    counts = df["status"].value_counts().to_dict() if "status" in df and not df.empty else {}
    pending = timing_pending(df)
    preamble = [timing_warning(summary, timed, pending), summary_rule(df, metric, mode)]
    preamble += [seeds_line(df, summary, metric) if not summary.empty else ""]
    preamble += [unmeasured_line(df, metric)]
    preamble += ["Trials: " + (", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none")]
    preamble += [fused_line(df), told_apart_note(df)]
    sections = [("", _paragraphs(preamble))]
    errors = df[df["status"] == "error"] if "status" in df else df.iloc[0:0]
    failed = [
        (
            FAILED_TRIALS,
            "\n".join(f"- {r.cell} seed={r.seed}: {r.error}" for r in errors.itertuples()),
        )
    ]
    if summary.empty:
        return (
            sections
            + [("Results", "No finished trials yet.")]
            + (failed if not errors.empty else [])
        )
    marks = contended_line(summary)
    wide, axis = _length_table(summary), axis_of(summary)
    if not wide.empty:
        table = "Table 2" if axis == "pair" else "Table 1"
        sections.append(
            (
                f"Results by model and {axis} (the paper's {table} layout)",
                _paragraphs([to_markdown(wide), dash_note(wide), chosen_note(summary), marks]),
            )
        )
        marks = ""
    heading = f"Results by {axis} and model" if not wide.empty else "Results"
    failed_timing = timing_failed_note(df, summary)
    sections.append(
        (
            heading,
            _paragraphs([to_markdown(_long_table(summary)), marks, failed_timing, timing_text(df)]),
        )
    )
    points = front_points(summary)
    if not points.empty:
        sections.append(
            (
                "Quality vs speed: the Pareto front",
                _paragraphs([pareto_markdown(points), *pareto_notes(points, timed, pending)]),
            )
        )
    sections += train_cost_sections(df, summary)  # the timing stage's training cost
    return sections + (failed if not errors.empty else [])


def _paragraphs(parts: Sequence[str]) -> str:
    return "\n\n".join(p for p in parts if p)
