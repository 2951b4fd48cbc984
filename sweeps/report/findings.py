"""Seeds into findings: the paper's findings judged on 95% intervals over seeds, and results.md's
sections on seeds (per-cell intervals, the judged findings, the paired bootstrap between the best
memory model and Bahdanau per length). The statistics live in :mod:`sweeps.report.stats`.

- **A finding** is a statement about a difference between two models at one length, paired by
  seed, with a margin ("Bahdanau at most 2 BLEU above the best memory model"): *held* when the
  whole 95% interval lies on the finding's side of the margin, *contradicted* when it lies wholly
  on the other side, *not shown* when it straddles (:func:`sweeps.report.stats.verdict`).
- **Sections** (:func:`seed_sections`): BLEU's 95% interval per cell, the findings with the rule
  that judged them, and the paired bootstrap table (cached in ``paired_bootstrap.csv``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from lightning_modules.metric_names import VAL_BLEU
from sweeps.layout import BOOTSTRAP_FILE, HYPOTHESES_FILE
from sweeps.report.bootstrap_text import (
    BOOTSTRAP_HEADING,
    bootstrap_markdown,
    current_bootstrap,
    stale_note,
)
from sweeps.report.distill import distill_findings, mixed_students
from sweeps.report.results import DECODE_SECONDS, TRAIN_PEAK_MB, TRAIN_STEP_SECONDS
from sweeps.report.stats import (
    BOOTSTRAP_TRIALS,
    SECONDS_DIGITS,
    axis_of,
    best_memory,
    bootstrap_choice,
    bootstrap_table,
    cell_intervals,
    contexts,
    estimate,
    interval,
    memory_k,
    memory_models,
    paired_difference,
    per_seed,
    shared,
    verdict,
)
from sweeps.report.summary import CONTENDED, DAGGER, TRAIN_CONTENDED, contended_flags

#: the costs whose Bahdanau − memory gap is judged to grow with length: (results.csv column, (what,
#: unit)); decode time and the training step are the timing stage's (each model alone on its node),
#: the training peak its fresh process's (sweeps.timing.memory)
COST_GAPS = (
    (DECODE_SECONDS, ("decode-time", "seconds")),
    (TRAIN_STEP_SECONDS, ("training-step", "seconds per step")),
    (TRAIN_PEAK_MB, ("training peak-memory", "MiB")),
)
#: the decimals of each gap's estimate: seconds as the tables print them, MiB as BLEU
GAP_DIGITS = {DECODE_SECONDS: SECONDS_DIGITS, TRAIN_STEP_SECONDS: SECONDS_DIGITS}

#: the timing stage's figures measured once per fused group (on one member's model), not per trial
ONCE_PER_GROUP = (TRAIN_STEP_SECONDS, TRAIN_PEAK_MB, "train_tokens_per_second", "decode_peak_mb")


def distinct(
    diffs: pd.Series, best: pd.DataFrame, lengths: tuple, models: tuple, column: str
) -> pd.Series:
    """``diffs`` (one value per seed, indexed by seed) keeping one seed of each set whose values
    of ``column`` come from the same measurements: for a figure measured once per fused group
    (:data:`ONCE_PER_GROUP`), two seeds that were fused in the same group in every cell of
    ``lengths`` × ``models`` hold copies of one figure, and an interval over the copies would be
    narrower than the measurements allow."""
    if "fused_with" not in best or column not in ONCE_PER_GROUP:
        return diffs
    source = {
        key: group if pd.notna(group) else ("alone", key[2])
        for key, group in best.set_index([axis_of(best), "model", "seed"])["fused_with"].items()
    }
    keys = [tuple(source.get((at, m, s)) for at in lengths for m in models) for s in diffs.index]
    return diffs[~pd.Series(keys, index=diffs.index).duplicated()]


INTERVAL_RULE = (
    "Intervals: 95% Student-t intervals over seeds (mean ± t(0.975, n−1)·std/√n); a difference between two "
    "models at one length is paired by seed (same seed, same data) and its interval is the t-interval of the "
    "per-seed differences. A finding is **held** when its whole interval lies on the finding's side of its "
    "margin (for 'within N', inside ±N), **contradicted** when the whole interval lies on the other side, "
    "**not shown** when the interval straddles the margin (or fewer than 2 seeds finished)."
)


#: the findings section's heading (:func:`seed_sections`)
FINDINGS_HEADING = "The paper's findings, judged on the intervals"
#: what a smoke run's findings section says first (:func:`smoke_caveat`)
SMOKE_FINDINGS = (
    "**A smoke run** (`--smoke`: the plumbing's tiny model and few steps): the verdicts below are "
    "computed as for a study, but they say nothing of the paper's claims."
)


def smoke_caveat(heading: str, text: str, smoke: bool) -> str:
    """A section's text, the findings' opened by :data:`SMOKE_FINDINGS` for a smoke run."""
    return f"{SMOKE_FINDINGS}\n\n{text}" if smoke and heading == FINDINGS_HEADING else text


#: what the per-cell table says where an interval reaches past BLEU's range
CUT_NOTE = (
    "An interval that reaches past BLEU's range (0 to 100) is cut at its end: a mean of BLEU "
    "scores lies in it."
)

#: what a finding marked † means
CONTENDED_FINDING = (
    f"{DAGGER} the finding compares times of which some were flagged contended (measured while the "
    "machine was busy, marked † in the tables): they are not speed figures, and neither is the "
    "verdict."
)


#: a finding row's key: its memory model is the best K at the length (:func:`best_memory`)
BEST_K = "best_k"
#: what the findings table says where a finding compares the best K
BEST_K_NOTE = (
    "The best memory model (its best K) at a length is picked by mean BLEU on the same seeds "
    "its finding is then judged on, and the interval does not allow for that pick: it flatters "
    "memory attention a little."
)


def multiplicity_note(judged: int) -> str:
    """What judging ``judged`` findings at once means for their verdicts."""
    if judged < 2:
        return ""
    return (
        f"Each interval is a 95% one on its own, with no correction for judging {judged} findings "
        "together: about one interval in 20 misses the true value, so one verdict among them may "
        "be wrong by chance alone."
    )


def findings(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> list[dict[str, Any]]:
    """The paper's Table 1 findings (§4.1.2) that this sweep's cells can judge, one row per finding
    and length: ``finding``, ``length``, ``quantity``, ``estimate`` (mean ± 95% half-width),
    ``verdict``. Empty when the sweep lacks the models a finding compares. A grid with an axis
    outside ``model`` (``task.train_size``) is judged within each of its settings (its
    ``context``, named in the row's length); a length where one model name stands for several
    cells is left out (:func:`unpaired_note` says so)."""
    best = per_seed(df, metric, mode)
    axis = axis_of(best)  # length, or a translation sweep's language pair (each judged alone)
    if best.empty or axis not in best or best[axis].isna().all():
        return []
    return [in_context(r, context) for context, rows in contexts(best) for r in _judged(rows)]


def in_context(row: dict[str, Any], context: str) -> dict[str, Any]:
    """A finding's row judged within ``context`` (:func:`~sweeps.report.stats.contexts`): its
    length followed by the context's grid values."""
    return {**row, "length": f"{row['length']}, {context}"} if context else row


def _judged(best: pd.DataFrame) -> list[dict[str, Any]]:
    """:func:`findings` among ``best``'s rows (one context's)."""
    axis = axis_of(best)
    mixed = {key[0] for key in shared(best, [axis, "model"])}  # lengths that cannot be paired
    best = best[~best[axis].isin(mixed)]
    if best.empty:
        return []
    models = set(best["model"])
    lengths = sorted(best[axis].dropna().unique())
    grows = axis == "length" and len(lengths) >= 2 and not mixed  # the findings on longer sequences
    out: list[dict[str, Any]] = []

    def row(
        finding: str,
        length: Any,
        quantity: str,
        mean: float,
        ci: float,
        n: int,
        margin: float,
        side: str,
        digits: int = 2,
        best_k: bool = False,
    ) -> None:
        out.append(
            {
                "finding": finding,
                "length": length,
                "quantity": quantity,
                "estimate": estimate(mean, ci, digits),
                "seeds": n,
                "verdict": verdict(mean, ci, n, margin, side),
                BEST_K: best_k,
            }
        )

    memories = memory_models(best)
    for length in lengths:
        top = best_memory(best, length)
        # picked among several K, on the seeds the finding is judged on (BEST_K_NOTE)
        named = best.loc[best[axis] == length, "model"]
        picked = named[named.isin(memories)].nunique() > 1
        if top and "bahdanau" in models:
            m, ci, n = paired_difference(best, length, "bahdanau", top)
            row(
                "memory attention (its best K) fits about as well as Bahdanau: Bahdanau at most 2 BLEU above",
                length,
                f"bahdanau − {top}",
                m,
                ci,
                n,
                2.0,
                "below",
                best_k=picked,
            )
        if top and "none" in models:
            m, ci, n = paired_difference(best, length, top, "none")
            row(
                "memory attention beats no attention by a large margin (> 10 BLEU)",
                length,
                f"{top} − none",
                m,
                ci,
                n,
                10.0,
                "above",
                best_k=picked,
            )
        if "memory K=1" in models and "none" in models:
            m, ci, n = paired_difference(best, length, "memory K=1", "none")
            row(
                "K=1 behaves like no attention (within 10 BLEU of it)",
                length,
                "memory K=1 − none",
                m,
                ci,
                n,
                10.0,
                "within",
            )
    small = min(memories, key=memory_k, default=None)
    big = max(memories, key=memory_k, default=None)
    if (
        grows and small is not None and memory_k(small) < memory_k(big)
    ):  # two K to compare (not one K, other settings)
        gains = {}
        for length in (lengths[0], lengths[-1]):
            at = best[best["length"] == length]
            va, vb = (
                at[at["model"] == big].set_index("seed")[VAL_BLEU],
                at[at["model"] == small].set_index("seed")[VAL_BLEU],
            )
            gains[length] = va - vb
        m, _, ci, n = interval((gains[lengths[-1]] - gains[lengths[0]]).dropna())
        row(
            f"longer sequences need larger K: {big}'s gain over {small} grows from L={lengths[0]} to L={lengths[-1]}",
            f"{lengths[0]}→{lengths[-1]}",
            "gain(L_max) − gain(L_min)",
            m,
            ci,
            n,
            0.0,
            "above",
        )
    if "bahdanau" in models and memories and grows:
        mem = max(memories, key=memory_k)
        for column, what in COST_GAPS:
            if column not in best or best[column].isna().all():
                continue
            gaps = {}
            for length in (lengths[0], lengths[-1]):
                at = best[best["length"] == length]
                gaps[length] = (
                    at[at["model"] == "bahdanau"].set_index("seed")[column]
                    - at[at["model"] == mem].set_index("seed")[column]
                )
            diffs = (gaps[lengths[-1]] - gaps[lengths[0]]).dropna()
            # a fused group's step and peaks are one measurement, copied to each member: seeds
            # that read the same groups repeat one figure, which the interval counts once
            m, _, ci, n = interval(
                distinct(diffs, best, (lengths[0], lengths[-1]), ("bahdanau", mem), column)
            )
            ends = (lengths[0], lengths[-1])
            used = best[best["length"].isin(ends) & best["model"].isin(["bahdanau", mem])]
            flag = {DECODE_SECONDS: CONTENDED, TRAIN_STEP_SECONDS: TRAIN_CONTENDED}.get(column)
            busy = flag is not None and contended_flags(used, flag).any()  # (a peak never is)
            row(
                f"the {what[0]} gap (Bahdanau − {mem}, {what[1]}) grows with length"
                + (f" {DAGGER}" if busy else ""),
                f"{lengths[0]}→{lengths[-1]}",
                "gap(L_max) − gap(L_min)",
                m,
                ci,
                n,
                0.0,
                "above",
                GAP_DIGITS.get(column, 2),
            )
    return out


def scoring_findings(
    df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max"
) -> list[dict[str, Any]]:
    """Fig. 3b/5's "softmax/softmax converges worst", at each length, judged against every other
    scoring pair (paired by seed): held when each other pair is above softmax/softmax (every
    interval above 0), contradicted when some pair is below it (an interval wholly under 0), not
    shown otherwise. The row names the pair that decides: the one below it when contradicted, else
    the closest (lowest mean difference)."""
    if "encoder_scoring" not in df or "decoder_scoring" not in df:
        return []
    return [
        in_context(r, context)
        for context, rows in contexts(per_seed(df, metric, mode))
        for r in _scoring_judged(scoring_pairs(rows))
    ]


def scoring_pairs(best: pd.DataFrame) -> pd.DataFrame:
    """``best``'s rows of a model with scoring functions (not Bahdanau's, nor no attention's),
    each row's ``model`` its scoring pair (``softmax/sigmoid``)."""
    best = best.dropna(subset=["encoder_scoring", "decoder_scoring"]).copy()
    best["model"] = best["encoder_scoring"].astype(str) + "/" + best["decoder_scoring"].astype(str)
    return best


def _scoring_judged(best: pd.DataFrame) -> list[dict[str, Any]]:
    """:func:`scoring_findings` among ``best``'s rows (one context's, ``model`` the scoring pair);
    a length where one pair stands for several cells (another grid value varies) is left out."""
    axis = axis_of(best)  # length, or a translation sweep's language pair
    mixed = {key[0] for key in shared(best, [axis, "model"])}
    out = []
    for length in sorted(best[axis].dropna().unique()):
        if length in mixed:
            continue
        at = best[best[axis] == length]
        others = sorted(p for p in at["model"].unique() if p != "softmax/softmax")
        if "softmax/softmax" not in set(at["model"]) or not others:
            continue
        diffs = {p: paired_difference(best, length, p, "softmax/softmax") for p in others}
        verdicts = {p: verdict(m, ci, n, 0.0, "above") for p, (m, ci, n) in diffs.items()}
        below = [p for p in others if verdicts[p] == "contradicted"]
        if below:
            pair, judged = min(below, key=lambda p: diffs[p][0]), "contradicted"
        else:
            pair = min(others, key=lambda p: (pd.isna(diffs[p][0]), diffs[p][0]))
            judged = "held" if all(v == "held" for v in verdicts.values()) else "not shown"
        m, ci, n = diffs[pair]
        out.append(
            {
                "finding": f"softmax/softmax scoring ends worst (each of the {len(others)} other pairs above it)",
                "length": length,
                "quantity": f"{pair} − softmax/softmax",
                "estimate": estimate(m, ci),
                "seeds": n,
                "verdict": judged,
            }
        )
    return out


#: the reading of a row with position encodings that names none (the memory attention default)
DEFAULT_PE_READING = "sentence"


def position_findings(
    df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max"
) -> list[dict[str, Any]]:
    """position_encoding.yaml's question, at each length and K: do position encodings raise BLEU?
    Memory attention with them (each ``position_encoding_normalization`` reading apart) against
    the same K without, paired by seed: held when the interval lies above 0, contradicted when
    below, not shown otherwise. K=1 is left out (with or without, one model: the encoder's softmax
    over one slot is 1 whatever the score), as is a K where another grid value varies beside it."""
    if "position_encoding" not in df or "K" not in df:
        return []
    return [
        in_context(r, context)
        for context, rows in contexts(per_seed(df, metric, mode))
        for r in _position_judged(rows)
    ]


def _position_judged(best: pd.DataFrame) -> list[dict[str, Any]]:
    """:func:`position_findings` among ``best``'s rows (one context's, each seed's trial chosen by
    the selection metric): the finding is about BLEU, so BLEU is what is paired, whatever metric
    chose the trials."""
    axis = axis_of(best)
    best = best[(best["attention"].astype(str) == "memory") & best["K"].notna()].copy()
    if best.empty or axis not in best:
        return []
    best["pe"] = best["position_encoding"].map(lambda v: str(v).lower() in ("true", "1", "1.0"))
    reading = (
        best["position_encoding_normalization"].fillna(DEFAULT_PE_READING).astype(str)
        if "position_encoding_normalization" in best
        else pd.Series(DEFAULT_PE_READING, index=best.index)
    )
    best["reading"] = reading.where(best["pe"], "")
    out = []
    for (length, k), at in best.groupby([axis, "K"], sort=True):
        if int(k) == 1:
            continue
        off = at[~at["pe"]].set_index("seed")[VAL_BLEU]
        readings = sorted(at.loc[at["pe"], "reading"].unique())
        if off.empty or off.index.duplicated().any():
            continue
        for name in readings:
            on = at[at["pe"] & (at["reading"] == name)].set_index("seed")[VAL_BLEU]
            if on.index.duplicated().any():
                continue
            m, _, ci, n = interval((on - off).dropna())
            label = "PE on" if len(readings) == 1 else f"PE on ({name})"
            out.append(
                {
                    "finding": f"position encodings raise BLEU at K={int(k)} (the study's question)",
                    "length": length,
                    "quantity": f"{label} − PE off",
                    "estimate": estimate(m, ci),
                    "seeds": n,
                    "verdict": verdict(m, ci, n, 0.0, "above"),
                }
            )
    return out


def unpaired_note(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> str:
    """The line that says which findings (and paired bootstrap rows) were left out because one
    model name stands for several cells at a length (a scoring pair or a student with another
    grid value varied beside it), which a pairing by seed would mix; "" where none was."""
    best = per_seed(df, metric, mode)
    axis = axis_of(best)
    if best.empty or axis not in best:
        return ""
    found: list[tuple[tuple, list[str]]] = []
    scored = "encoder_scoring" in best and "decoder_scoring" in best
    for _, rows in contexts(best):
        found += shared(rows, [axis, "model"]).items()
        if scored:  # where the scoring finding is judged: softmax/softmax among the pairs
            pairs = scoring_pairs(rows)
            judged = pairs.groupby(axis)["model"].transform(
                lambda m: (m == "softmax/softmax").any()
            )
            found += shared(pairs[judged.astype(bool)], [axis, "model"]).items()
    found += mixed_students(df, metric, mode).items()
    if not found:
        return ""
    named = "; ".join(
        f"{' '.join(str(v) for v in key if str(v) not in ('', 'nan', '<NA>'))}: "
        + ", ".join(f"`{c}`" for c in cells)
        for key, cells in found
    )
    return (
        "Left out of the findings and the paired bootstrap: where one name stands for several "
        "cells (their other grid values differ), a pairing by seed would mix them, so nothing "
        f"is judged there ({named})."
    )


def taught_models(df: pd.DataFrame) -> set[str]:
    """The models whose trials a teacher taught (§3.1): by its attention contexts (a weight above
    0) or by its trained encoder to start from. A student of neither is memory attention alone."""
    if "teacher" not in df:
        return set()
    rows = df[df["teacher"].notna() & (df["teacher"].astype(str) != "")]
    weight = pd.to_numeric(
        rows.get("distill_weight", pd.Series(0, index=rows.index)), errors="coerce"
    )
    start = rows.get("init_from_teacher", pd.Series("none", index=rows.index)).astype(str)
    return set(rows.loc[(weight.fillna(0) > 0) | ~start.isin(["none", "nan", ""]), "model"])


def taught_note(df: pd.DataFrame, named: set[str]) -> str:
    """The sentence a comparison of memory attention with Bahdanau needs where its best memory
    model (among ``named``) was taught by a Bahdanau teacher; empty where none was."""
    students = sorted(named & taught_models(df))
    if not students:
        return ""
    return (
        f"{', '.join(students)} {'was' if len(students) == 1 else 'were'} taught by a teacher "
        "(its attention contexts, or its trained encoder to start from): a comparison of "
        f"{'it' if len(students) == 1 else 'them'} with the teacher's mechanism is not the "
        "paper's, of memory attention trained alone."
    )


# -- results.md's sections -------------------------------------------------------------------------

#: the findings table's columns after the finding and where it is judged
JUDGED_FIGURES = ("quantity", "estimate", "seeds", "verdict")


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def seed_sections(
    df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max", sweep_dir: Path | None = None
) -> list[tuple[str, str]]:
    """(heading, Markdown) sections: BLEU's 95% interval per cell, the paper's findings judged on
    the intervals (with the rule), and the paired bootstrap per length (recomputed from the trials'
    hypotheses when they are there, else read from ``paired_bootstrap.csv`` written the last time)."""
    if df.empty or "status" not in df:
        return []
    sections = []
    cells = cell_intervals(df, metric, mode)
    pairs = axis_of(df) == "pair"  # a translation sweep: its cells by language pair
    axis_label = "pair" if pairs else "L"
    if not cells.empty and (cells["n"] >= 2).any():
        rows = [
            {
                axis_label: "" if pd.isna(r.length) else r.length if pairs else int(r.length),
                "model": r.model,
                "BLEU mean ± std": f"{r.mean:.2f} ± {r.std:.2f}",
                # BLEU's range: a mean of scores in [0, 100] lies there, whatever the t-interval
                "95% interval": f"[{max(r.low, 0.0):.2f}, {min(r.high, 100.0):.2f}]",
                "seeds": r.n,
            }
            for r in cells.itertuples()
            if r.n >= 2
        ]
        sections.append(
            (
                "BLEU over seeds: 95% intervals per cell",
                _table(rows, list(rows[0]))
                + "\n\n"
                + INTERVAL_RULE
                + (f" {CUT_NOTE}" if ((cells["low"] < 0) | (cells["high"] > 100)).any() else ""),
            )
        )

    judged = (
        findings(df, metric, mode)
        + scoring_findings(df, metric, mode)
        + position_findings(df, metric, mode)
        + distill_findings(df, metric, mode)
    )
    if judged:
        counts = pd.Series([j["verdict"] for j in judged]).value_counts().to_dict()
        tally = ", ".join(f"{v} {k}" for k, v in counts.items())
        compared = {m.strip() for j in judged for m in str(j["quantity"]).split(" − ")}
        taught = taught_note(df, compared)
        sections.append(
            (
                FINDINGS_HEADING,
                f"{tally}. Each row: the quantity, its mean over seeds ± the 95% half-width, and the verdict.\n\n"
                + _table(
                    [{**j, "pair": j["length"]} for j in judged] if pairs else judged,
                    ["finding", "pair" if pairs else "length", *JUDGED_FIGURES],
                )
                + "\n\n"
                + INTERVAL_RULE
                + (f" {many}" if (many := multiplicity_note(len(judged))) else "")
                + (f" {BEST_K_NOTE}" if any(j.get(BEST_K) for j in judged) else "")
                + (
                    f"\n\n{CONTENDED_FINDING}"
                    if any(str(j["finding"]).endswith(DAGGER) for j in judged)
                    else ""
                )
                + (f"\n\n{taught}" if taught else ""),
            )
        )
    if note := unpaired_note(df, metric, mode):
        sections.append(("Findings left out", note))
    table = bootstrap_table(df, metric, mode)
    cache = sweep_dir / BOOTSTRAP_FILE if sweep_dir is not None else None
    stale: list[str] = []  # the cached rows that no longer compare the chosen trials
    if not table.empty and cache is not None:
        table.to_csv(cache, index=False)
    elif table.empty and cache is not None and cache.is_file():
        cached = pd.read_csv(cache, dtype={"seeds": str, **dict.fromkeys(BOOTSTRAP_TRIALS, str)})
        table, stale = current_bootstrap(cached, bootstrap_choice(df, metric, mode))
    if table.empty and stale:
        sections.append((BOOTSTRAP_HEADING, stale_note(stale)))
    if not table.empty:
        sections.append(
            (
                BOOTSTRAP_HEADING,
                bootstrap_markdown(table) + "\n\n"
                "sacrebleu's paired bootstrap resampling (`sacrebleu.significance.PairedTest`, test_type bs, "
                "1,000 resamples, seed 12345) over each trial's saved validation hypotheses "
                f"(`{HYPOTHESES_FILE}` beside its checkpoint), every seed's sentences pooled, each paired with "
                "the same sentence of the same seed; p: sacrebleu's p-value for the difference (1 where there "
                "is none); the interval: the 2.5-97.5 percentiles of the difference over the same "
                "resamples. The two are different rules (sacrebleu's p compares centred |differences|), so "
                "near p = 0.05 the interval can exclude 0 while p is above 0.05, or the reverse. This "
                "interval is over "
                "validation sentences for these trained models, not over training seeds (those are above); "
                "the best memory model is chosen by its mean BLEU on the same data."
                + (f" {note}" if (note := taught_note(df, set(table["memory"]))) else "")
                + (f"\n\n{stale_note(stale)}" if stale else ""),
            )
        )
    return sections
