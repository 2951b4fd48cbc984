"""Seeds into findings: 95% intervals per cell, the paper's findings judged on them, and the paired
bootstrap between the best memory model and Bahdanau per length (results.md's sections on seeds).

- **Per cell**: the summary rule's per-seed values (:func:`sweeps.report.summary.cell_summary`), their
  mean ± std and a 95% Student-t interval over seeds (mean ± t(0.975, n-1) · std / √n).
- **Comparisons** between two models at one length are paired by seed (the same seed gives both
  the same training and validation data): the t-interval of the per-seed differences.
- **A finding** is a statement about such a difference with a margin ("Bahdanau at most 2 BLEU
  above the best memory model"): *held* when the whole 95% interval lies on the finding's side of
  the margin, *contradicted* when it lies wholly on the other side, *not shown* when it straddles.
- **Paired bootstrap** (the validation sentences, not the seeds): sacrebleu's paired bootstrap
  resampling (``sacrebleu.significance.PairedTest``, ``test_type="bs"``, 1,000 resamples, its fixed
  seed 12345) over the validation hypotheses each trial saved beside its checkpoint
  (``val_hypotheses.txt``), the seeds' sentences pooled; its p-value and each system's 95%
  interval, and the 95% interval of the difference over the same resamples (sacrebleu's own BLEU
  statistics; PairedTest reports no interval on the difference itself).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lightning_modules.metric_names import VAL_BLEU
from sweeps.report.results import (
    DECODE_SECONDS,
    FINISHED,
    HYPOTHESES_FILE,
    REFERENCES_FILE,
    natural_order,
)

# Student's t, 0.975 quantile, by degrees of freedom (no scipy in the sweep extra)
_T975 = [
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
]
INTERVAL_RULE = (
    "Intervals: 95% Student-t intervals over seeds (mean ± t(0.975, n−1)·std/√n); a difference between two "
    "models at one length is paired by seed (same seed, same data) and its interval is the t-interval of the "
    "per-seed differences. A finding is **held** when its whole interval lies on the finding's side of its "
    "margin (for 'within N', inside ±N), **contradicted** when the whole interval lies on the other side, "
    "**not shown** when the interval straddles the margin (or fewer than 2 seeds finished)."
)
from sweeps.layout import BOOTSTRAP_FILE  # noqa: E402,F401


def t975(df: int) -> float:
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.96


def interval(values) -> tuple[float, float, float, int]:
    """(mean, std, half-width of the 95% t-interval, n) of ``values`` (NaN spread below 2 values)."""
    v = np.asarray([x for x in values if pd.notna(x)], dtype=float)
    n = len(v)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    if n == 1:
        return float(v[0]), math.nan, math.nan, 1
    sd = float(v.std(ddof=1))
    return float(v.mean()), sd, t975(n - 1) * sd / math.sqrt(n), n


def per_seed(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> pd.DataFrame:
    """The summary rule's chosen trial per (cell, seed): the best finished one by ``metric``."""
    done = df[df["status"].isin(FINISHED)] if "status" in df else df
    done = done.dropna(subset=[metric]) if metric in done else done
    return (
        done.sort_values(metric, ascending=mode == "min", kind="stable")
        .groupby(["cell", "seed"], dropna=False)
        .head(1)
    )


def cell_intervals(
    df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max", column: str = VAL_BLEU
) -> pd.DataFrame:
    """Per cell: ``length``, ``model``, ``mean``, ``std``, ``ci`` (half-width), ``low``, ``high``, ``n``."""
    best = per_seed(df, metric, mode)
    rows = []
    for cell, g in best.groupby("cell", sort=False):
        mean, sd, ci, n = interval(g[column])
        rows.append(
            {
                "cell": cell,
                "length": g["length"].iloc[0] if "length" in g else None,
                "model": g["model"].iloc[0],
                "mean": mean,
                "std": sd,
                "ci": ci,
                "low": mean - ci,
                "high": mean + ci,
                "n": n,
            }
        )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return out.sort_values(
        ["length", "model"], na_position="first", kind="stable", key=natural_order
    ).reset_index(drop=True)


def paired_difference(
    best: pd.DataFrame, length: Any, a: str, b: str, column: str = VAL_BLEU
) -> tuple[float, float, int]:
    """(mean, half-width, n) of ``a`` − ``b`` at ``length``, paired by seed."""
    at = best[best["length"] == length] if "length" in best else best
    va = at[at["model"] == a].set_index("seed")[column]
    vb = at[at["model"] == b].set_index("seed")[column]
    diffs = (va - vb).dropna()
    mean, _, ci, n = interval(diffs)
    return mean, ci, n


def verdict(mean: float, ci: float, n: int, margin: float, side: str) -> str:
    """``side`` "above": the finding says the quantity exceeds ``margin``; "below": it stays under;
    "within": it stays between -``margin`` and ``margin``."""
    if n < 2 or pd.isna(ci):
        return "not shown"
    low, high = mean - ci, mean + ci
    if side == "within":
        return (
            "held"
            if -margin < low and high < margin
            else "contradicted"
            if low > margin or high < -margin
            else "not shown"
        )
    if side == "above":
        return "held" if low > margin else "contradicted" if high < margin else "not shown"
    return "held" if high < margin else "contradicted" if low > margin else "not shown"


def estimate(mean: float, ci: float) -> str:
    """A finding's estimate as the tables print it: ``+1.23 ± 0.45`` (empty without a mean)."""
    return "" if pd.isna(mean) else f"{mean:+.2f}" + ("" if pd.isna(ci) else f" ± {ci:.2f}")


def _memory_models(best: pd.DataFrame) -> list[str]:
    return [m for m in best["model"].unique() if str(m).startswith("memory K=")]


def _k(model: str) -> int:
    return int(str(model).split("K=")[1].split()[0])


def best_memory(best: pd.DataFrame, length: Any) -> str | None:
    """The memory model with the highest mean BLEU at ``length`` (chosen on the same data it is
    judged on: a selection that flatters memory attention a little)."""
    at = best[(best["length"] == length) & best["model"].isin(_memory_models(best))]
    if at.empty:
        return None
    return str(at.groupby("model")[VAL_BLEU].mean().idxmax())


def findings(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> list[dict[str, Any]]:
    """The paper's Table 1 findings (§4.1.2) that this study's cells can judge, one row per finding
    and length: ``finding``, ``length``, ``quantity``, ``estimate`` (mean ± 95% half-width),
    ``verdict``. Empty when the study lacks the models a finding compares."""
    best = per_seed(df, metric, mode)
    if best.empty or "length" not in best or best["length"].isna().all():
        return []
    models = set(best["model"])
    lengths = sorted(best["length"].dropna().unique())
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
    ) -> None:
        out.append(
            {
                "finding": finding,
                "length": length,
                "quantity": quantity,
                "estimate": estimate(mean, ci),
                "seeds": n,
                "verdict": verdict(mean, ci, n, margin, side),
            }
        )

    memories = _memory_models(best)
    for length in lengths:
        top = best_memory(best, length)
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
    small = min(memories, key=_k, default=None)
    big = max(memories, key=_k, default=None)
    if (
        len(lengths) >= 2 and small is not None and _k(small) < _k(big)
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
    if (
        DECODE_SECONDS in best
        and best[DECODE_SECONDS].notna().any()
        and "bahdanau" in models
        and memories
        and len(lengths) >= 2
    ):
        mem = max(memories, key=_k)
        gaps = {}
        for length in (lengths[0], lengths[-1]):
            at = best[best["length"] == length]
            gaps[length] = (
                at[at["model"] == "bahdanau"].set_index("seed")[DECODE_SECONDS]
                - at[at["model"] == mem].set_index("seed")[DECODE_SECONDS]
            )
        m, _, ci, n = interval((gaps[lengths[-1]] - gaps[lengths[0]]).dropna())
        row(
            f"the decode-time gap (Bahdanau − {mem}, seconds) grows with length",
            f"{lengths[0]}→{lengths[-1]}",
            "gap(L_max) − gap(L_min)",
            m,
            ci,
            n,
            0.0,
            "above",
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
    best = per_seed(df, metric, mode).copy()
    best["pair"] = best["encoder_scoring"].astype(str) + "/" + best["decoder_scoring"].astype(str)
    best["model"] = best["pair"]
    out = []
    for length in sorted(best["length"].dropna().unique()):
        at = best[best["length"] == length]
        others = sorted(p for p in at["pair"].unique() if p != "softmax/softmax")
        if "softmax/softmax" not in set(at["pair"]) or not others:
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


# -- the paired bootstrap on the validation sentences -----------------------------------------------


def _read_lines(checkpoint: Any, name: str) -> list[str] | None:
    if not isinstance(checkpoint, str) or not checkpoint:
        return None
    path = Path(checkpoint).parent / name
    return path.read_text().splitlines() if path.is_file() else None


def paired_bootstrap(
    system: list[str], baseline: list[str], refs: list[str], n_samples: int = 1000
) -> dict[str, float]:
    """sacrebleu's paired bootstrap of ``system`` against ``baseline`` (BLEU, tokenize none):
    ``diff`` (system − baseline), ``low``/``high`` (95% over the resamples), ``p`` and each
    system's bootstrap 95% half-width."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    metric = BLEU(tokenize="none")
    test = PairedTest(
        [("baseline", baseline), ("system", system)],
        {"BLEU": metric},
        [refs],
        test_type="bs",
        n_samples=n_samples,
    )
    _, scores = test()
    base, sys_ = scores["BLEU"][0], scores["BLEU"][1]
    # the difference's interval over resamples drawn as PairedTest draws them (seed 12345)
    rng = np.random.default_rng(test._seed)
    idx = rng.choice(len(system), size=(n_samples, len(system)), replace=True)
    s_sys = np.array(metric._extract_corpus_statistics(system, [refs]), dtype="float64")
    s_base = np.array(metric._extract_corpus_statistics(baseline, [refs]), dtype="float64")
    diffs = np.array(
        [
            metric._compute_score_from_stats(s_sys[i].sum(0)).score
            - metric._compute_score_from_stats(s_base[i].sum(0)).score
            for i in idx
        ]
    )
    # sacrebleu counts resampled |differences| strictly above the observed one: two systems with the
    # same statistics on every sentence (both at BLEU 100, say) would get p = 1/(n+1); they differ in nothing
    p = 1.0 if not np.any(s_sys != s_base) else float(sys_.p_value)
    return {
        "diff": sys_.score - base.score,
        "low": float(np.percentile(diffs, 2.5)),
        "high": float(np.percentile(diffs, 97.5)),
        "p": p,
        "system_ci": float(sys_.ci),
        "baseline_ci": float(base.ci),
    }


def bootstrap_table(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> pd.DataFrame:
    """Per length: the best memory model against Bahdanau, the seeds' validation sentences pooled
    (each paired with the same sentence of the same seed). Lengths whose trials saved no
    hypotheses (an older run) are left out."""
    best = per_seed(df, metric, mode)
    rows = []
    if best.empty or "length" not in best or "checkpoint" not in best:
        return pd.DataFrame()
    for length in sorted(best["length"].dropna().unique()):
        top = best_memory(best, length)
        if top is None or "bahdanau" not in set(best["model"]):
            continue
        at = best[best["length"] == length]
        sys_h, base_h, refs, seeds = [], [], [], []
        for seed, g in at.groupby("seed"):
            a, b = g[g["model"] == top], g[g["model"] == "bahdanau"]
            if a.empty or b.empty:
                continue
            ha, hb = (
                _read_lines(a["checkpoint"].iloc[0], HYPOTHESES_FILE),
                _read_lines(b["checkpoint"].iloc[0], HYPOTHESES_FILE),
            )
            ra, rb = (
                _read_lines(a["checkpoint"].iloc[0], REFERENCES_FILE),
                _read_lines(b["checkpoint"].iloc[0], REFERENCES_FILE),
            )
            if not (ha and hb and ra) or ra != rb or len(ha) != len(ra) or len(hb) != len(rb):
                continue
            sys_h += ha
            base_h += hb
            refs += ra
            seeds.append(int(seed))
        if not refs:
            continue
        r = paired_bootstrap(sys_h, base_h, refs)
        rows.append(
            {
                "length": int(length),
                "memory": top,
                "seeds": ",".join(map(str, seeds)),
                "sentences": len(refs),
                **{k: round(v, 4) for k, v in r.items()},
            }
        )
    return pd.DataFrame(rows)


def bootstrap_markdown(table: pd.DataFrame) -> str:
    lines = [
        "| L | best memory | − Bahdanau (BLEU) | 95% interval | p | sentences (seeds) |",
        "| ---: | --- | ---: | --- | ---: | --- |",
    ]
    for r in table.itertuples():
        lines.append(
            f"| {r.length} | {r.memory} | {r.diff:+.2f} | [{r.low:+.2f}, {r.high:+.2f}] | {r.p:.3f} | "
            f"{r.sentences} ({r.seeds}) |"
        )
    return "\n".join(lines)


# -- results.md's sections -------------------------------------------------------------------------


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
    if not cells.empty and (cells["n"] >= 2).any():
        rows = [
            {
                "L": "" if pd.isna(r.length) else int(r.length),
                "model": r.model,
                "BLEU mean ± std": f"{r.mean:.2f} ± {r.std:.2f}",
                "95% interval": f"[{r.low:.2f}, {r.high:.2f}]",
                "seeds": r.n,
            }
            for r in cells.itertuples()
            if r.n >= 2
        ]
        sections.append(
            (
                "BLEU over seeds: 95% intervals per cell",
                _table(rows, list(rows[0])) + "\n\n" + INTERVAL_RULE,
            )
        )
    judged = findings(df, metric, mode) + scoring_findings(df, metric, mode)
    if judged:
        counts = pd.Series([j["verdict"] for j in judged]).value_counts().to_dict()
        tally = ", ".join(f"{v} {k}" for k, v in counts.items())
        sections.append(
            (
                "The paper's findings, judged on the intervals",
                f"{tally}. Each row: the quantity, its mean over seeds ± the 95% half-width, and the verdict.\n\n"
                + _table(judged, ["finding", "length", "quantity", "estimate", "seeds", "verdict"])
                + "\n\n"
                + INTERVAL_RULE,
            )
        )
    table = bootstrap_table(df, metric, mode)
    cache = sweep_dir / BOOTSTRAP_FILE if sweep_dir is not None else None
    if not table.empty and cache is not None:
        table.to_csv(cache, index=False)
    elif table.empty and cache is not None and cache.is_file():
        table = pd.read_csv(cache, dtype={"seeds": str})
    if not table.empty:
        sections.append(
            (
                "Best memory model vs Bahdanau: paired bootstrap on the validation sentences",
                bootstrap_markdown(table) + "\n\n"
                "sacrebleu's paired bootstrap resampling (`sacrebleu.significance.PairedTest`, test_type bs, "
                "1,000 resamples, seed 12345) over each trial's saved validation hypotheses "
                f"(`{HYPOTHESES_FILE}` beside its checkpoint), every seed's sentences pooled, each paired with "
                "the same sentence of the same seed; p: sacrebleu's p-value for the difference; the interval: "
                "the 2.5-97.5 percentiles of the difference over the same resamples. This interval is over "
                "validation sentences for these trained models, not over training seeds (those are above); "
                "the best memory model is chosen by its mean BLEU on the same data.",
            )
        )
    return sections
