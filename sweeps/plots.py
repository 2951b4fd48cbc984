"""Plots for sweeps: attention heatmaps of one sentence, and the results figures of a sweep."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


#: most memory vectors drawn as their own panel in :func:`heatmap_figure` (the ones used most)
MAX_VECTOR_PANELS = 6


def heatmap_figure(item: dict[str, Any], title: str = ""):
    """Alignment heatmaps of one sentence from ``Seq2SeqModule.attention_heatmaps``, Britz et al. style.

    Every mechanism: the alignment (output rows x source columns, T x S). Memory attention
    (``alpha`` (S, K) and ``beta`` (T, K) present), as in the paper's Fig. 6-8: a first row with the
    encoder scores alpha (K x S), the decoder scores beta (T x K) and the combined alignment
    sum_k beta_tk alpha_sk (T x S); a second row with the per-vector alignments beta_tk alpha_sk
    (T x S) of the ``MAX_VECTOR_PANELS`` vectors with the most decoder mass, each titled with k and
    its share of that mass. Returns the matplotlib Figure (the caller saves or logs and closes it).
    """
    weights = np.asarray(item["weights"], dtype=float)  # (T, S)
    src, out = list(item.get("source", [])), list(item.get("output", []))
    if "alpha" not in item or "beta" not in item:
        fig, ax = plt.subplots(figsize=(4.6, 4.2))
        _heatmap(ax, weights, "alignment", "source", "output")
        _ticks(ax, src, out, weights.shape)
    else:
        alpha = np.asarray(item["alpha"], dtype=float)  # (S, K)
        beta = np.asarray(item["beta"], dtype=float)  # (T, K)
        mass = beta.sum(axis=0)  # (K,) decoder mass per vector
        chosen = np.argsort(-mass, kind="stable")[: min(MAX_VECTOR_PANELS, alpha.shape[1])]
        ncols = max(3, len(chosen))
        fig = plt.figure(figsize=(3.0 * ncols, 6.4))
        grid = fig.add_gridspec(2, ncols, height_ratios=[1.25, 1])
        third = ncols // 3
        ax_a = fig.add_subplot(grid[0, :third])
        ax_b = fig.add_subplot(grid[0, third : 2 * third])
        ax_c = fig.add_subplot(grid[0, 2 * third :])
        _heatmap(ax_a, alpha.T, f"encoder scores alpha (K={alpha.shape[1]} x S)", "source", "memory vector k")
        vectors = [str(k + 1) for k in range(alpha.shape[1])]  # 1-based, as in the per-vector titles
        _ticks(ax_a, src, vectors, alpha.T.shape)
        _heatmap(ax_b, beta, "decoder scores beta (T x K)", "memory vector k", "output")
        _ticks(ax_b, vectors, out, beta.shape)
        _heatmap(ax_c, weights, "combined: sum_k beta_k alpha_k", "source", "output")
        _ticks(ax_c, src, out, weights.shape)
        total = float(mass.sum()) or 1.0
        for col, k in enumerate(chosen):
            ax = fig.add_subplot(grid[1, col])
            per_vector = np.outer(beta[:, k], alpha[:, k])  # (T, S)
            _heatmap(ax, per_vector, f"vector k={k + 1} ({100 * mass[k] / total:.0f}% of beta)", "source", "output")
            _ticks(ax, src if len(src) <= 20 else [], out if len(out) <= 20 else [], per_vector.shape)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _heatmap(ax, values: np.ndarray, title: str, xlabel: str, ylabel: str) -> None:
    ax.imshow(values, aspect="auto", cmap="Greys", interpolation="nearest")  # darker = more weight
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)


def _ticks(ax, src: list, out: list, shape: tuple) -> None:
    if src and len(src) == shape[1] and len(src) <= 40:
        ax.set_xticks(range(len(src)), src, rotation=90, fontsize=7)
    if out and len(out) == shape[0] and len(out) <= 40:
        ax.set_yticks(range(len(out)), out, fontsize=7)


def plot_results(summary: pd.DataFrame, out_dir: Path) -> dict[str, Path]:
    """The report's figures from ``sweeps.report.cell_summary`` (one row per cell, mean +- std
    over seeds of each seed's best trial): BLEU vs K per length (memory attention, error bars over
    seeds; other models as dashed lines) and decode time vs length per model. Returns the paths."""
    paths: dict[str, Path] = {}
    if summary.empty or "val/bleu" not in summary:
        return paths
    mem = summary[(summary["attention"] == "memory") & summary["K"].notna()] if "K" in summary else summary.iloc[0:0]
    if not mem.empty:
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for length, g in mem.groupby("length", dropna=False):
            g = g.sort_values("K")
            line = ax.errorbar(g["K"].astype(float), g["val/bleu"], yerr=g["val/bleu_std"].fillna(0), marker="o",
                               capsize=3, label=f"L={length}")[0]
            others = summary[summary["attention"] != "memory"]
            if pd.notna(length):
                others = others[others["length"] == length]
            for bleu in others["val/bleu"]:
                ax.axhline(bleu, ls="--", lw=0.8, color=line.get_color(), alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("K (memory vectors)")
        ax.set_ylabel("BLEU")
        ax.set_title("BLEU vs K (dashed: other models at that length)")
        ax.legend(fontsize=8)
        paths["bleu_vs_k"] = _save(fig, out_dir / "bleu_vs_k.png")
    if "length" in summary and summary["length"].notna().any() and summary["decode_seconds"].notna().any():
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for model, g in summary.dropna(subset=["decode_seconds"]).groupby("model"):
            g = g.sort_values("length")
            ax.errorbar(g["length"].astype(float), g["decode_seconds"], yerr=g["decode_seconds_std"].fillna(0),
                        marker="o", capsize=3, label=model)
        ax.set_xlabel("sequence length L")
        ax.set_ylabel("decode time over validation set (s)")
        ax.set_title("Decode time vs length")
        ax.legend(fontsize=7)
        paths["decode_vs_length"] = _save(fig, out_dir / "decode_vs_length.png")
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def save_figure(fig, path: Path, dpi: Optional[int] = 110) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
