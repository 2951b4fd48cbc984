"""The §3.1 objective's results (docs/distillation.md): its finding judged on 95% intervals over
seeds, and BLEU against its weight lambda per K.

- **The finding** (:func:`distill_findings`): "the §3.1 term improves BLEU", at each length, K and
  encoder start (``init_from_teacher``), for each lambda > 0: the per-seed BLEU of the student
  with that lambda minus the student with lambda = 0 (the same K, start, length and seed: the
  same data), its 95% t-interval over seeds, *held* when the interval lies above 0,
  *contradicted* when below, *not shown* when it straddles 0 (:func:`sweeps.report.stats.verdict`).
  Rows with K < L are the "small K" finding (the memory has fewer rows than the sentence has
  symbols); K >= L rows are labelled apart.
- **The figure** (:func:`lambda_figure`, ``bleu_vs_lambda.png``): BLEU (mean ± std over seeds)
  against lambda on a symmetric-log axis (lambda = 0 included), one line per length, K and start;
  the other models (the teachers) as grey reference lines.

Both read results.csv's grid columns ``distill_weight``, ``K`` and ``init_from_teacher`` (absent:
``none``): the students are the cells that set ``distill_weight`` (the lambda = 0 baseline too),
the others are reference lines. The report's summary rule applies (per cell and seed, the best
trial by the sweep's metric).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from lightning_modules.metric_names import VAL_BLEU  # noqa: E402
from sweeps.report.figures import colours  # noqa: E402
from sweeps.report.stats import (  # noqa: E402
    CONTEXT,
    estimate,
    interval,
    per_seed,
    shared,
    verdict,
)

WEIGHT, INIT = "distill_weight", "init_from_teacher"
SMALL_K = "the §3.1 term improves BLEU at small K (K < L)"
LARGE_K = "the §3.1 term improves BLEU at K >= L"


def students(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> pd.DataFrame:
    """The summary rule's rows (one per cell and seed) of the cells that set ``distill_weight``
    and ``K``, with ``init_from_teacher`` filled in, or an empty frame when lambda does not vary.
    A (length, K, start) where several cells share one lambda (another grid value varies) is
    left out: no seed pairs one student there (:func:`mixed_students`)."""
    memory = _students(df, metric, mode)
    if mixed := shared(memory, STUDENT):
        groups = {key[:-1] for key in mixed}
        keys = pd.Series(list(zip(*(memory[k] for k in STUDENT[:-1]))), index=memory.index)
        memory = memory[~keys.isin(groups)]
    return memory if not memory.empty and memory[WEIGHT].nunique() >= 2 else pd.DataFrame()


def mixed_students(
    df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max"
) -> dict[tuple, list[str]]:
    """The (length, K, start, context, lambda) that several cells share, each with their names."""
    return shared(_students(df, metric, mode), STUDENT)


def _students(df: pd.DataFrame, metric: str, mode: str) -> pd.DataFrame:
    if WEIGHT not in df or "K" not in df:
        return pd.DataFrame()
    best = per_seed(df, metric, mode)
    weights = pd.to_numeric(best[WEIGHT], errors="coerce")
    memory = best[weights.notna() & best["K"].notna()].copy()
    if memory.empty:
        return memory
    memory[WEIGHT] = pd.to_numeric(memory[WEIGHT], errors="coerce")
    memory[INIT] = memory[INIT].fillna("none").astype(str) if INIT in memory else "none"
    if "length" not in memory:
        memory["length"] = pd.NA
    memory[CONTEXT] = memory[CONTEXT].fillna("").astype(str) if CONTEXT in memory else ""
    return memory


#: what names one student of a distillation sweep at a length (with its context)
STUDENT = ["length", "K", INIT, CONTEXT, WEIGHT]


def distill_findings(
    df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max"
) -> list[dict[str, Any]]:
    """One row per (length, K, start, lambda > 0): lambda − (lambda = 0), paired by seed."""
    rows: list[dict[str, Any]] = []
    memory = students(df, metric, mode)
    if memory.empty:
        return rows
    starts = memory[INIT].nunique() > 1  # name the start in each row only when it varies
    for (length, k, init, context), g in memory.groupby(STUDENT[:-1], dropna=False, sort=True):
        base = g[g[WEIGHT] == 0].set_index("seed")[VAL_BLEU]
        if base.empty:
            continue
        for weight in sorted(w for w in g[WEIGHT].unique() if w > 0):
            diffs = (g[g[WEIGHT] == weight].set_index("seed")[VAL_BLEU] - base).dropna()
            mean, _, ci, n = interval(diffs)
            start = f", init {init}" if starts or init != "none" else ""
            at = "" if pd.isna(length) else int(length)
            small = pd.notna(length) and int(k) < int(length)
            rows.append(
                {
                    "finding": SMALL_K if small or pd.isna(length) else LARGE_K,
                    "length": f"{at}, {context}" if context else at,
                    "quantity": f"λ={weight:g} − λ=0 (K={int(k)}{start})",
                    "estimate": estimate(mean, ci),
                    "seeds": n,
                    "verdict": verdict(mean, ci, n, 0.0, "above"),
                }
            )
    return rows


def lambda_figure(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max"):
    """BLEU against lambda, one line per (length, K, start), or None when lambda does not vary."""
    memory = students(df, metric, mode)
    if memory.empty:
        return None
    summary = (
        memory.groupby(STUDENT, dropna=False)[VAL_BLEU].agg(["mean", "std", "count"]).reset_index()
    )
    lines = list(summary.groupby(STUDENT[:-1], dropna=False, sort=True))
    ks = sorted(summary["K"].unique())
    lengths = sorted(summary["length"].dropna().unique())
    styles = ["-", "--", ":", "-."]
    fig, ax = plt.subplots(figsize=(7.6, 4.4))
    for (length, k, init, context), g in lines:
        g = g.sort_values(WEIGHT)
        at = f"L={int(length)} " if pd.notna(length) else ""
        style = styles[(lengths.index(length) if pd.notna(length) else 0) % len(styles)]
        ax.errorbar(
            g[WEIGHT].astype(float),
            g["mean"],
            yerr=g["std"].astype(float),  # NaN (one seed): no bar
            marker="o" if init == "none" else "s",
            ls=style,
            capsize=3,
            color=colours()[ks.index(k) % len(colours())],
            label=f"{at}K={int(k)}"
            + ("" if init == "none" else f" init {init}")
            + (f" {context}" if context else ""),
        )
    best = per_seed(df, metric, mode)
    others = best[pd.to_numeric(best[WEIGHT], errors="coerce").isna()]  # the teachers
    by = [c for c in ("length", "model") if c in others]
    for (key, g), style in zip(others.groupby(by, dropna=False, sort=True), styles * 8):
        length, model = key if len(by) == 2 else (None, key[0] if isinstance(key, tuple) else key)
        at = f" L={int(length)}" if length is not None and pd.notna(length) else ""
        ax.axhline(g[VAL_BLEU].mean(), ls=style, lw=1.0, color="0.35", label=f"{model}{at}")
    positive = summary.loc[summary[WEIGHT] > 0, WEIGHT]
    linthresh = float(positive.min()) if not positive.empty else 1.0
    ax.set_xscale("symlog", linthresh=linthresh)
    weights = sorted(summary[WEIGHT].unique())
    ax.set_xlim(min(weights) - 0.4 * linthresh, max(weights) * 1.6 if max(weights) > 0 else 1.0)
    ax.set_xticks(weights, [f"{w:g}" for w in weights])
    ax.set_xlabel("λ (distill_weight: the §3.1 term's weight; symmetric log scale)")
    ax.set_ylabel("BLEU")
    seeds = "\nerror bars: ± std over seeds" if (summary["count"] > 1).any() else ""
    ax.set_title(f"BLEU vs λ per K (memory attention taught by its teacher){seeds}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def distill_plots(
    df: pd.DataFrame, out_dir: Path, metric: str = VAL_BLEU, mode: str = "max"
) -> dict[str, Path]:
    """``bleu_vs_lambda.png`` when lambda varies; ``{}`` otherwise."""
    fig = lambda_figure(df, metric, mode)
    if fig is None:
        return {}
    path = out_dir / "bleu_vs_lambda.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legend outside the axes too
    plt.close(fig)
    return {"bleu_vs_lambda": path}
