"""Figures of one sentence or one table, and what every figure of a report shares.

- :func:`heatmap_figure`: the attention heatmaps of one sentence (``sweeps.report.heatmaps``, the
  trial's W&B images).
- :func:`pareto_figure`: BLEU against decode seconds, the Pareto front per length (``pareto.png``).
- Shared by these and :mod:`sweeps.report.plots`' figures: the colours, the legend entries for
  contended decode times (training steps) and for error bars over seeds, and :func:`save_figure`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lightning_modules.metric_names import VAL_BLEU  # noqa: E402
from sweeps.report.results import DECODE_SECONDS  # noqa: E402
from sweeps.report.summary import (  # noqa: E402
    CONTENDED_FIGURES,
    DAGGER,
    axis_of,
    contended_mask,
)

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
        _heatmap(
            ax_a,
            alpha.T,
            f"encoder scores alpha (K={alpha.shape[1]} x S)",
            "source",
            "memory vector k",
        )
        vectors = [
            str(k + 1) for k in range(alpha.shape[1])
        ]  # 1-based, as in the per-vector titles
        _ticks(ax_a, src, vectors, alpha.T.shape)
        _heatmap(ax_b, beta, "decoder scores beta (T x K)", "memory vector k", "output")
        _ticks(ax_b, vectors, out, beta.shape)
        _heatmap(ax_c, weights, "combined: sum_k beta_k alpha_k", "source", "output")
        _ticks(ax_c, src, out, weights.shape)
        total = float(mass.sum()) or 1.0
        for col, k in enumerate(chosen):
            ax = fig.add_subplot(grid[1, col])
            per_vector = np.outer(beta[:, k], alpha[:, k])  # (T, S)
            _heatmap(
                ax,
                per_vector,
                f"vector k={k + 1} ({100 * mass[k] / total:.0f}% of beta)",
                "source",
                "output",
            )
            _ticks(
                ax, src if len(src) <= 20 else [], out if len(out) <= 20 else [], per_vector.shape
            )
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


def contended_label(figure: str = DECODE_SECONDS) -> str:
    """The legend entry's text for a contended ``figure`` (decode time, training step time)."""
    return f"{DAGGER} contended {CONTENDED_FIGURES[figure][1]}: not a speed figure"


CONTENDED_LABEL = contended_label()


def colours() -> list:
    """Matplotlib's colour cycle, repeated: one colour per length (or model) across a figure."""
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(64)]


def contended_handle(kind: str = "x", label: str = CONTENDED_LABEL):
    """The legend entry for contended decode times (``label``: another figure's,
    :func:`contended_label`): an x marker (points) or a hatched bar."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if kind == "hatch":
        return Patch(facecolor="white", edgecolor="0.3", hatch="///", label=label)
    return Line2D([], [], ls="none", marker="x", markersize=7, mew=1.6, color="0.3", label=label)


def seeds_handle():
    """The legend entry for error bars over seeds."""
    from matplotlib.lines import Line2D

    return Line2D(
        [], [], color="0.3", lw=0.8, marker="|", markersize=8, label="error bars: ± std over seeds"
    )


def pareto_figure(points: pd.DataFrame, untimed: str = ""):
    """BLEU vs decode seconds, one colour per length, front as a step line, front points labelled.

    With several seeds each point carries error bars (std over seeds of decode seconds and BLEU);
    a contended decode time is drawn as an x and its label carries the dagger. ``untimed``: the
    title's line saying the decode times are not the timing stage's.
    """
    fig, ax = plt.subplots(figsize=(6.8, 4.8))
    contended = contended_mask(points)
    several_seeds = bool("seeds" in points and (points["seeds"] > 1).any())
    axis = axis_of(points)  # length, or a translation sweep's language pair
    groups = points.groupby(axis, dropna=False) if axis in points else [(None, points)]
    for (length, g), colour in zip(groups, colours()):
        marked = contended[g.index]
        label = "all" if pd.isna(length) else str(length) if axis == "pair" else f"L={int(length)}"
        ax.scatter(
            g.loc[~marked, DECODE_SECONDS],
            g.loc[~marked, VAL_BLEU],
            s=22,
            alpha=0.7,
            color=colour,
            label=label,
        )
        ax.scatter(
            g.loc[marked, DECODE_SECONDS],
            g.loc[marked, VAL_BLEU],
            s=55,
            marker="x",
            color=colour,
            lw=1.6,
        )
        if several_seeds:
            ax.errorbar(
                g[DECODE_SECONDS].astype(float),
                g[VAL_BLEU].astype(float),
                xerr=seed_spread(g, DECODE_SECONDS),
                yerr=seed_spread(g, VAL_BLEU),
                fmt="none",
                ecolor=colour,
                elinewidth=0.8,
                capsize=2,
                alpha=0.6,
            )
        front = g[g["pareto"]].sort_values(DECODE_SECONDS)
        ax.step(front[DECODE_SECONDS], front[VAL_BLEU], where="post", color=colour, lw=1.2)
        ax.scatter(
            front[DECODE_SECONDS],
            front[VAL_BLEU],
            s=70,
            facecolors="none",
            edgecolors=colour,
            lw=1.5,
        )
        for idx, row in g.iterrows():
            ax.annotate(
                str(row["model"]) + (f" {DAGGER}" if contended[idx] else ""),
                (row[DECODE_SECONDS], row[VAL_BLEU]),
                fontsize=7 if row["pareto"] else 6,
                alpha=1.0 if row["pareto"] else 0.55,
                xytext=(3, 3),
                textcoords="offset points",
            )
    handles, labels = ax.get_legend_handles_labels()
    for extra, wanted in (
        (contended_handle("x"), contended.any()),
        (seeds_handle(), several_seeds),
    ):
        if wanted:
            handles.append(extra)
            labels.append(extra.get_label())
    ax.set_xlabel("decode time over the validation set (s)")
    ax.set_ylabel("BLEU")
    title = "Quality vs speed (circled + line: Pareto front)"
    if untimed:
        title += f"\n{untimed}"
    if len(points) and contended.all():
        title += "\nall decode times contended: not speed figures"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(handles, labels, fontsize=7)
    fig.tight_layout()
    return fig


def seed_spread(frame: pd.DataFrame, column: str):
    """The column's spread over seeds (its ``_std`` column) as error bars: NaN where one seed gives
    none, and matplotlib draws no bar there (a 0 would draw a cap, as if the spread were measured
    and nil); None without the column."""
    name = f"{column}_std"
    return frame[name].astype(float).to_numpy() if name in frame else None


def save_figure(fig, path: Path, dpi: int | None = 110) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
