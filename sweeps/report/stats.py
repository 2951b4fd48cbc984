"""The statistics under results.md's seed sections (:mod:`sweeps.report.findings` judges and
writes them): intervals over seeds, paired differences, verdicts against a margin, and the paired
bootstrap over validation sentences.

- **Per cell**: the summary rule's per-seed values (:func:`sweeps.report.summary.cell_summary`), their
  mean ± std and a 95% Student-t interval over seeds (mean ± t(0.975, n-1) · std / √n).
- **Comparisons** between two models at one length are paired by seed (the same seed gives both
  the same training and validation data): the t-interval of the per-seed differences.
- **A verdict** on such a difference against a margin: *held* when the whole 95% interval lies on
  the finding's side of the margin, *contradicted* when it lies wholly on the other side, *not
  shown* when it straddles.
- **Paired bootstrap** (the validation sentences, not the seeds): sacrebleu's paired bootstrap
  resampling (``sacrebleu.significance.PairedTest``, ``test_type="bs"``, 1,000 resamples, its fixed
  seed 12345) over the validation hypotheses each trial saved beside its checkpoint
  (``val_hypotheses.txt``), the seeds' sentences pooled; its p-value and each system's 95%
  interval, and the 95% interval of the difference over the same resamples (sacrebleu's own BLEU
  statistics; PairedTest reports no interval on the difference itself).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lightning_modules.metric_names import VAL_BLEU
from sweeps.layout import HYPOTHESES_FILE, REFERENCES_FILE, SIGNATURE_FILE
from sweeps.report.columns import baseline_mask
from sweeps.report.results import FINISHED, natural_order
from sweeps.report.student_t import t975


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


def axis_of(frame: pd.DataFrame) -> str:
    """The column a report's tables, fronts and findings are laid out along: ``pair`` for a
    translation sweep (the paper's Table 2: one column per language pair; its ``length`` is the
    longest sentence kept, a filter), else ``length`` (Table 1: the copy task's sequence length)."""
    return "pair" if "pair" in frame and frame["pair"].notna().any() else "length"


def summary_cells(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with each relative constraint's baseline (results.csv's ``baseline`` column, trained
    in the cell it is the yardstick of) in a cell of its own, ``<cell>, baseline``, its model
    labelled ``<model> (baseline)``: the summary rule chooses the cell's best trial among the
    searched models, and shows the baseline beside it, never in its place."""
    mark = baseline_mask(df)
    if not mark.any():
        return df
    df = df.copy()
    df["cell"] = df["cell"].astype(object)
    df.loc[mark, "cell"] = df.loc[mark, "cell"].astype(str) + ", baseline"
    if "model" in df:
        df.loc[mark, "model"] = df.loc[mark, "model"].astype(str) + " (baseline)"
    return df


def summary_trials(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> pd.DataFrame:
    """The trials the summary rule chooses among, the same for every table, front, plot and seed
    section: the finished ones with ``metric``; where configurations are judged over seeds
    (results.csv's ``configuration``), only each cell's chosen configuration, all its seeds
    (:func:`sweeps.report.selection.chosen_trials`); a relative constraint's baseline in a cell of
    its own (:func:`summary_cells`); each model labelled apart from other cells at its length
    (:func:`told_apart`)."""
    from sweeps.report.selection import chosen_trials, seed_objective  # it imports this module

    done = df[df["status"].isin(FINISHED)] if "status" in df else df
    if metric in done:
        done = done.dropna(subset=[metric])
    if "configuration" in done and done["configuration"].notna().any():
        objective = seed_objective(done)  # the launch's (lcb), as results.csv records it
        ids = chosen_trials(done.to_dict("records"), metric, mode, objective)
        done = done[done["trial_id"].isin(ids)]
    return summary_cells(told_apart(done))


def per_seed(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> pd.DataFrame:
    """The summary rule's chosen trial per (cell, seed): the best of :func:`summary_trials` by
    ``metric``; all seeds of each cell's chosen configuration where configurations are judged
    over seeds, as the tables show them."""
    return best_of_cells(summary_trials(df, metric, mode), metric, mode)


def best_of_cells(done: pd.DataFrame, metric: str, mode: str) -> pd.DataFrame:
    """The best row by ``metric`` of each (cell, seed) of ``done`` (finished trials, their cells
    as :func:`summary_cells` made them)."""
    return (
        done.sort_values(metric, ascending=mode == "min", kind="stable")
        .groupby(["cell", "seed"], dropna=False)
        .head(1)
    )


#: results.csv's column of a cell's grid values besides its length (or pair) and its model
#: (``train_size=1000``): what its model's label adds to the model's own name
CONTEXT = "context"
_PART = re.compile(r" (?=[\w.]+=)")


def told_apart(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each model label that several cells share at one length (pair: an older
    results.csv, whose labels name the model's settings only, of a grid with an axis outside
    ``model``: ``task.train_size``) completed by the cell's other grid values, from its name
    (``bahdanau train_size=1000``), and those values in :data:`CONTEXT`; unchanged where the
    length and the model name one cell."""
    axis = axis_of(frame)
    if frame.empty or not {"cell", "model", axis} <= set(frame):
        return frame
    cells = frame.groupby([axis, "model"], dropna=False)["cell"].transform("nunique")
    if not (cells > 1).any():
        return frame
    frame = frame.copy()
    frame["model"] = frame["model"].astype(object)
    if CONTEXT not in frame:
        frame[CONTEXT] = pd.Series(pd.NA, index=frame.index, dtype=object)
    frame[CONTEXT] = frame[CONTEXT].astype(object)
    for idx in frame.index[cells > 1]:
        model, cell = str(frame.at[idx, "model"]), str(frame.at[idx, "cell"])
        own = {part.partition("=")[0] for part in _PART.split(model)} | {axis, "attention"}
        extra = [p for p in _PART.split(cell) if p.partition("=")[0] not in own]
        if extra:
            frame.at[idx, "model"] = " ".join([model, *extra])
            context = frame.at[idx, CONTEXT]
            frame.at[idx, CONTEXT] = " ".join(
                ([str(context)] if pd.notna(context) and str(context) else []) + extra
            )
    return frame


def told_apart_note(df: pd.DataFrame) -> str:
    """The page's line where :func:`told_apart` renamed models (an older results.csv); ""."""
    after = told_apart(df)
    if after is df:
        return ""
    names = after["model"].astype(str)
    renamed = pd.Series(names[names != df["model"].astype(str)].unique(), dtype=object)
    return (
        "Several cells share a model's name at one length here (their grid values outside "
        "`model` differ; results.csv's labels name the model's own settings only), so each is "
        "named with its cell's other grid values in every table, front, plot and finding: "
        + ", ".join(f"`{m}`" for m in renamed.sort_values(key=natural_order))
        + ". Findings compare models within one setting of those values."
    )


def contexts(best: pd.DataFrame):
    """(context, rows) per value of :data:`CONTEXT` in ``best`` ("" where none), each model's
    label without it (``bahdanau``, not ``bahdanau train_size=1000``): the findings compare models
    within one context only, by the names the paper's models have."""
    if CONTEXT not in best or best.empty or not best[CONTEXT].notna().any():
        yield "", best
        return
    keys = best[CONTEXT].fillna("").astype(str)
    for context in sorted(keys.unique(), key=lambda v: natural_order(pd.Series([v])).iloc[0]):
        rows = best[keys == context].copy()
        if context:
            rows["model"] = rows["model"].astype(str).str.replace(" " + context, "", regex=False)
        yield context, rows


def shared(best: pd.DataFrame, keys: list[str]) -> dict[tuple, list[str]]:
    """The values of ``keys`` (a length and a model) that more than one cell of ``best`` has, each
    with those cells' names: a statistic paired by seed there would pair rows of different cells."""
    if best.empty or not set(keys) <= set(best):
        return {}
    cells = best.groupby(keys, dropna=False)["cell"].unique()
    return {
        key if isinstance(key, tuple) else (key,): sorted(map(str, names))
        for key, names in cells.items()
        if len(names) > 1
    }


def cell_intervals(
    df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max", column: str = VAL_BLEU
) -> pd.DataFrame:
    """Per cell: ``length`` (a translation sweep's pair: :func:`axis_of`), ``model``, ``mean``,
    ``std``, ``ci`` (half-width), ``low``, ``high``, ``n``."""
    best = per_seed(df, metric, mode)
    axis = axis_of(best)  # ``length`` holds a translation sweep's language pair
    rows = []
    for cell, g in best.groupby("cell", sort=False):
        mean, sd, ci, n = interval(g[column])
        rows.append(
            {
                "cell": cell,
                "length": g[axis].iloc[0] if axis in g else None,
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
    """(mean, half-width, n) of ``a`` − ``b`` at ``length`` (a language pair: :func:`axis_of`),
    paired by seed."""
    axis = axis_of(best)
    at = best[best[axis] == length] if axis in best else best
    va = at[at["model"] == a].set_index("seed")[column]
    vb = at[at["model"] == b].set_index("seed")[column]
    if va.index.duplicated().any() or vb.index.duplicated().any():
        return math.nan, math.nan, 0  # several cells under one name: no pairing by seed
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


#: the decimals of a figure in seconds (decode time, a training step), as the tables print them
SECONDS_DIGITS = 4


def estimate(mean: float, ci: float, digits: int = 2) -> str:
    """A finding's estimate as the tables print it: ``+1.23 ± 0.45`` for BLEU (or MiB), ``digits``
    decimals (:data:`SECONDS_DIGITS` for seconds: ``+0.0049 ± 0.0012``); empty without a mean."""
    if pd.isna(mean):
        return ""
    return f"{mean:+.{digits}f}" + ("" if pd.isna(ci) else f" ± {ci:.{digits}f}")


def memory_models(best: pd.DataFrame) -> list[str]:
    return [m for m in best["model"].unique() if str(m).startswith("memory K=")]


def memory_k(model: str) -> int:
    return int(str(model).split("K=")[1].split()[0])


def best_memory(best: pd.DataFrame, length: Any) -> str | None:
    """The memory model with the highest mean BLEU at ``length`` (chosen on the same data it is
    judged on: a selection that flatters memory attention a little)."""
    at = best[(best[axis_of(best)] == length) & best["model"].isin(memory_models(best))]
    if at.empty:
        return None
    return str(at.groupby("model")[VAL_BLEU].mean().idxmax())


# -- the paired bootstrap on the validation sentences -----------------------------------------------


def sacrebleu_signatures(df: pd.DataFrame) -> list[str]:
    """The sacreBLEU signatures the trials' val/sacrebleu was computed with (the file each report
    leaves beside its checkpoint), each once: one, unless the trials ran different sacrebleu."""
    if "checkpoint" not in df:
        return []
    found = (_read_lines(c, SIGNATURE_FILE) for c in df["checkpoint"])
    return sorted({lines[0] for lines in found if lines})


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
    # sacrebleu counts centred resampled |differences| strictly above the observed one: with no
    # observed difference (the same statistics on every sentence, or both systems at BLEU 0 on
    # every resample) that count can be 0, p = 1/(n+1), "significant"; no difference is p = 1
    same = not np.any(s_sys != s_base) or sys_.score == base.score
    p = 1.0 if same else float(sys_.p_value)
    return {
        "diff": sys_.score - base.score,
        "low": float(np.percentile(diffs, 2.5)),
        "high": float(np.percentile(diffs, 97.5)),
        "p": p,
        "system_ci": float(sys_.ci),
        "baseline_ci": float(base.ci),
    }


#: paired_bootstrap.csv's columns naming the trials each row compared (results.csv's trial ids,
#: in the order of its ``seeds``); an older file has neither
BOOTSTRAP_TRIALS = ("memory_trials", "bahdanau_trials")


def bootstrap_table(df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max") -> pd.DataFrame:
    """Per length: the best memory model against Bahdanau, the seeds' validation sentences pooled
    (each paired with the same sentence of the same seed). Lengths whose trials saved no
    hypotheses (an older run) are left out."""
    rows = []
    for (length, memory), pairs in bootstrap_choice(df, metric, mode).items():
        sys_h, base_h, refs, seeds, ids = [], [], [], [], []
        for seed, (a, b) in pairs.items():
            ha, hb = (
                _read_lines(a["checkpoint"], HYPOTHESES_FILE),
                _read_lines(b["checkpoint"], HYPOTHESES_FILE),
            )
            ra, rb = (
                _read_lines(a["checkpoint"], REFERENCES_FILE),
                _read_lines(b["checkpoint"], REFERENCES_FILE),
            )
            if not (ha and hb and ra) or ra != rb or len(ha) != len(ra) or len(hb) != len(rb):
                continue
            sys_h += ha
            base_h += hb
            refs += ra
            seeds.append(int(seed))
            ids.append((a.get("trial_id"), b.get("trial_id")))
        if not refs:
            continue
        r = paired_bootstrap(sys_h, base_h, refs)
        row = {
            "pair" if isinstance(length, str) else "length": length,  # a pair under "pair"
            "memory": memory,
            "seeds": ",".join(map(str, seeds)),
            "sentences": len(refs),
            **{k: round(v, 4) for k, v in r.items()},
        }
        if all(pd.notna(i) for pair in ids for i in pair):  # results.csv names its trials
            for k, column in enumerate(BOOTSTRAP_TRIALS):
                row[column] = ",".join(str(pair[k]) for pair in ids)
        rows.append(row)
    return pd.DataFrame(rows)


def bootstrap_choice(
    df: pd.DataFrame, metric: str = VAL_BLEU, mode: str = "max"
) -> dict[tuple[Any, str], dict[int, tuple[dict[str, Any], dict[str, Any]]]]:
    """The trials the paired bootstrap compares, as results.csv chooses them now: per (length, or
    a translation sweep's pair; the best memory model's label, with its context) and per seed
    where both finished, (the memory model's row, Bahdanau's row). A length where one model name
    stands for several cells is left out (no seed pairs them)."""
    everything = per_seed(df, metric, mode)
    axis = axis_of(everything)  # length, or a translation sweep's language pair
    if everything.empty or axis not in everything or "checkpoint" not in everything:
        return {}
    chosen = {}
    for context, best in contexts(everything):  # within one setting of a grid's other axes
        mixed = {key[0] for key in shared(best, [axis, "model"])}
        for length in sorted(best[axis].dropna().unique()):
            top = best_memory(best, length)
            if top is None or "bahdanau" not in set(best["model"]) or length in mixed:
                continue
            at = best[best[axis] == length]
            pairs = {}
            for seed, g in at.groupby("seed"):
                a, b = g[g["model"] == top], g[g["model"] == "bahdanau"]
                if not a.empty and not b.empty:
                    pairs[int(seed)] = (a.iloc[0].to_dict(), b.iloc[0].to_dict())
            key = length if axis == "pair" else int(length)
            chosen[key, f"{top} {context}" if context else top] = pairs
    return chosen
