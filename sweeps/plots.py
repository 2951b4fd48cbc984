"""Plots for sweeps: attention heatmaps of one sentence, and the results figures of a sweep."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def heatmap_figure(item: dict[str, Any], title: str = ""):
    """Alignment heatmap (target rows x source columns) from ``Seq2SeqModule.attention_heatmaps``.

    For memory attention (``alpha``/``beta`` present) three panels, as in Britz et al. Fig. 6-8:
    encoder scores alpha (S x K), decoder scores beta (T x K) and their product (T x S).
    """
    weights = np.asarray(item["weights"])
    src, out = list(item.get("source", [])), list(item.get("output", []))
    has_memory = "alpha" in item and "beta" in item
    ncols = 3 if has_memory else 1
    fig, axes = plt.subplots(1, ncols, figsize=(4.2 * ncols, 4), squeeze=False)
    ax = axes[0, -1]
    ax.imshow(weights, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    ax.set_title("alignment" + (" (alpha x beta)" if has_memory else ""))
    _ticks(ax, src, out, weights.shape)
    if has_memory:
        alpha, beta = np.asarray(item["alpha"]), np.asarray(item["beta"])
        axes[0, 0].imshow(alpha.T, aspect="auto", cmap="viridis", interpolation="nearest")
        axes[0, 0].set_title("encoder scores alpha (K x S)")
        axes[0, 0].set_xlabel("source")
        axes[0, 0].set_ylabel("k")
        axes[0, 1].imshow(beta, aspect="auto", cmap="viridis", interpolation="nearest")
        axes[0, 1].set_title("decoder scores beta (T x K)")
        axes[0, 1].set_xlabel("k")
        axes[0, 1].set_ylabel("output")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _ticks(ax, src: list, out: list, shape: tuple) -> None:
    if src and len(src) == shape[1] and len(src) <= 40:
        ax.set_xticks(range(len(src)), src, rotation=90, fontsize=7)
    if out and len(out) == shape[0] and len(out) <= 40:
        ax.set_yticks(range(len(out)), out, fontsize=7)


def plot_results(df: pd.DataFrame, out_dir: Path) -> dict[str, Path]:
    """BLEU vs K per length (memory attention, baselines as dashed lines), decode time vs length
    per model, and BLEU vs decode time. Returns the paths written."""
    paths: dict[str, Path] = {}
    ok = df[df["status"].isin(["done", "stopped"])] if not df.empty else df
    if ok.empty or "val/bleu" not in ok:
        return paths
    mem = ok[(ok["attention"] == "memory") & ok["K"].notna()]
    if not mem.empty:
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for length, g in mem.groupby("length", dropna=False):
            s = g.groupby("K")["val/bleu"].max().sort_index()
            line = ax.plot(s.index, s.values, marker="o", label=f"L={length}")[0]
            base = ok[(ok["length"] == length) & (ok["attention"] != "memory")] if pd.notna(length) else ok[ok["attention"] != "memory"]
            for model, b in base.groupby("model"):
                ax.axhline(b["val/bleu"].max(), ls="--", lw=0.8, color=line.get_color(), alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("K (memory vectors)")
        ax.set_ylabel("BLEU")
        ax.set_title("BLEU vs K (dashed: other models at that length)")
        ax.legend(fontsize=8)
        paths["bleu_vs_k"] = _save(fig, out_dir / "bleu_vs_k.png")
    if ok["length"].notna().any() and ok["val/decode_seconds"].notna().any():
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for model, g in ok.groupby("model"):
            s = g.groupby("length")["val/decode_seconds"].median().sort_index()
            ax.plot(s.index, s.values, marker="o", label=model)
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
