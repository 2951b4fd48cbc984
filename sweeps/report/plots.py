"""Plots for sweeps: attention heatmaps of one sentence, and the results figures of a sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lightning_modules.metric_names import VAL_BLEU  # noqa: E402
from sweeps.report.results import DECODE_SECONDS, headline_columns  # noqa: E402
from sweeps.report.summary import DAGGER, contended_mask  # noqa: E402
from sweeps.spec.signatures import headline_options  # noqa: E402

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


CONTENDED_LABEL = "† contended decode time: not a speed figure"
REFERENCE_STYLES = ["--", ":", "-.", (0, (5, 2, 1, 2, 1, 2))]
LINE_MARKERS = [
    "o",
    "s",
    "^",
    "D",
]  # mechanisms sharing a headline option (local_m, local_p) at one length


def colours() -> list:
    """Matplotlib's colour cycle, repeated: one colour per length (or model) across a figure."""
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(64)]


def contended_handle(kind: str = "x"):
    """The legend entry for contended decode times: an x marker (points) or a hatched bar."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if kind == "hatch":
        return Patch(facecolor="white", edgecolor="0.3", hatch="///", label=CONTENDED_LABEL)
    return Line2D(
        [], [], ls="none", marker="x", markersize=7, mew=1.6, color="0.3", label=CONTENDED_LABEL
    )


def seeds_handle():
    """The legend entry for error bars over seeds."""
    from matplotlib.lines import Line2D

    return Line2D(
        [], [], color="0.3", lw=0.8, marker="|", markersize=8, label="error bars: ± std over seeds"
    )


def plot_results(summary: pd.DataFrame, out_dir: Path) -> dict[str, Path]:
    """The report's figures from ``sweeps.report.summary.cell_summary`` (one row per cell, mean +- std
    over seeds of each seed's best trial), each only where the study has the axis it draws:

    - BLEU: ``bleu_vs_<option>.png`` per headline option (:func:`bleu_vs_headline_figure`; memory
      attention's ``bleu_vs_k.png``: BLEU against K, one line per length with at least two K
      values, error bars over seeds; other models as labelled reference lines) when some length
      has two or more of its values; else ``bleu_vs_length.png`` (one line per model) when there
      are two or more lengths; else ``bleu_by_model.png`` (a bar per model).
    - decode time: ``decode_vs_length.png`` (one line per model) with two or more lengths, else
      ``decode_by_model.png`` (a bar per model); contended times drawn as x / hatched bars.

    Returns the paths by name."""
    paths: dict[str, Path] = {}
    if summary.empty or VAL_BLEU not in summary:
        return paths
    lengths = summary["length"].dropna().nunique() if "length" in summary else 0
    for option in headline_columns():
        fig = bleu_vs_headline_figure(summary, option)
        if fig is not None:
            name = f"bleu_vs_{option.lower()}"
            paths[name] = _save(fig, out_dir / f"{name}.png")
    if not paths and lengths >= 2:  # no figure against a headline option
        paths["bleu_vs_length"] = _save(
            by_length_figure(summary, VAL_BLEU, "BLEU", "BLEU vs length"),
            out_dir / "bleu_vs_length.png",
        )
    elif not paths:
        paths["bleu_by_model"] = _save(
            by_model_figure(summary, VAL_BLEU, "BLEU", "BLEU per model"),
            out_dir / "bleu_by_model.png",
        )
    if DECODE_SECONDS in summary and summary[DECODE_SECONDS].notna().any():
        ylabel = "decode time over validation set (s)"
        if lengths >= 2:
            fig = by_length_figure(
                summary, DECODE_SECONDS, ylabel, "Decode time vs length", mark_contended=True
            )
            paths["decode_vs_length"] = _save(fig, out_dir / "decode_vs_length.png")
        else:
            fig = by_model_figure(
                summary, DECODE_SECONDS, ylabel, "Decode time per model", mark_contended=True
            )
            paths["decode_by_model"] = _save(fig, out_dir / "decode_by_model.png")
    return paths


def bleu_vs_headline_figure(summary: pd.DataFrame, option: str):
    """BLEU against a headline option (``Attention.headline``: memory attention's K, local
    attention's window): for each mechanism that declares ``option``, one line per length that has
    two or more of its values (error bars over seeds); at those lengths every model without the
    option is a reference line in the length's colour, labelled "<model> L=<length>" in the
    legend. None when no such line has two points (a one-point line says nothing)."""
    meanings = {
        name: meaning for name, (opt, meaning, _) in headline_options().items() if opt == option
    }
    if option not in summary or "attention" not in summary or not meanings:
        return None
    rows = summary[summary["attention"].isin(list(meanings)) & summary[option].notna()]
    by_length = (
        rows.groupby("length", dropna=False, sort=True) if "length" in rows else [(None, rows)]
    )
    drawn = []  # (length, [(mechanism, its points), ...]) for each length with a line
    for length, g in by_length:
        lines = [
            (name, m.sort_values(option))
            for name, m in g.groupby("attention", sort=True)
            if m[option].nunique() >= 2
        ]
        if lines:
            drawn.append((length, lines))
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(7.6, 4.4))
    line_labels = set()
    for (length, lines), colour in zip(drawn, colours()):
        at = f" L={length}" if length is not None and pd.notna(length) else ""
        for (name, g), marker in zip(lines, LINE_MARKERS * 8):
            ax.errorbar(
                g[option].astype(float),
                g[VAL_BLEU],
                yerr=g[f"{VAL_BLEU}_std"].fillna(0),
                marker=marker,
                capsize=3,
                color=colour,
                label=f"{name}{at}",
            )
            line_labels.add(f"{name}{at}")
        others = summary[~summary["attention"].isin(list(meanings))]
        if at:
            others = others[others["length"] == length]
        for (_, row), style in zip(others.iterrows(), REFERENCE_STYLES * 8):
            ax.axhline(
                row[VAL_BLEU],
                ls=style,
                lw=1.0,
                color=colour,
                alpha=0.75,
                label=f"{row['model']}{at}",
            )
    ax.set_xscale("log", base=2)
    values = sorted({int(v) for _, lines in drawn for _, g in lines for v in g[option]})
    ax.set_xticks(values, [str(v) for v in values])
    meaning = "; ".join(
        dict.fromkeys(meanings[name] for _, lines in drawn for name, _ in lines if meanings[name])
    )
    ax.set_xlabel(f"{option} ({meaning})" if meaning else option)
    ax.set_ylabel("BLEU")
    ax.set_title(
        f"BLEU vs {option} (reference lines: the other models at that length)"
        + _seeds_note(summary),
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(
        range(len(labels)), key=lambda i: labels[i] not in line_labels
    )  # the lines, then the references
    ax.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        fontsize=7,
        loc="center left",
        bbox_to_anchor=(1.01, 0.5),
    )
    return fig


def pareto_figure(points: pd.DataFrame):
    """BLEU vs decode seconds, one colour per length, front as a step line, front points labelled.

    With several seeds each point carries error bars (std over seeds of decode seconds and BLEU);
    a contended decode time is drawn as an x and its label carries the dagger.
    """
    fig, ax = plt.subplots(figsize=(6.8, 4.8))
    contended = contended_mask(points)
    several_seeds = bool("seeds" in points and (points["seeds"] > 1).any())
    groups = points.groupby("length", dropna=False) if "length" in points else [(None, points)]
    for (length, g), colour in zip(groups, colours()):
        marked = contended[g.index]
        label = f"L={int(length)}" if pd.notna(length) else "all"
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
                xerr=_std(g, DECODE_SECONDS),
                yerr=_std(g, VAL_BLEU),
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
    if len(points) and contended.all():
        title += "\nall decode times contended: not speed figures"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(handles, labels, fontsize=7)
    fig.tight_layout()
    return fig


def _std(frame: pd.DataFrame, column: str):
    name = f"{column}_std"
    return frame[name].astype(float).fillna(0.0).to_numpy() if name in frame else None


def by_length_figure(
    summary: pd.DataFrame, column: str, ylabel: str, title: str, mark_contended: bool = False
):
    """``column`` against length, one line per model (error bars over seeds); with
    ``mark_contended`` a contended point is an x."""
    fig, ax = plt.subplots(figsize=(7.6, 4.4))
    rows = summary.dropna(subset=[column, "length"])
    contended = contended_mask(rows) if mark_contended else pd.Series(False, index=rows.index)
    models = rows["model"].unique()  # the summary's order: natural, by length then model
    for model, colour in zip(models, colours()):
        g = rows[rows["model"] == model].sort_values("length")
        ax.errorbar(
            g["length"].astype(float),
            g[column],
            yerr=g[f"{column}_std"].fillna(0),
            marker="o",
            markersize=4,
            capsize=3,
            color=colour,
            label=model,
        )
        marked = g[contended[g.index]]
        ax.scatter(
            marked["length"].astype(float),
            marked[column],
            marker="x",
            s=70,
            lw=1.8,
            color=colour,
            zorder=3,
        )
    handles, labels = ax.get_legend_handles_labels()
    if contended.any():
        handles.append(contended_handle("x"))
        labels.append(CONTENDED_LABEL)
    ax.set_xticks(sorted(rows["length"].astype(int).unique()))
    ax.set_xlabel("sequence length L")
    ax.set_ylabel(ylabel)
    ax.set_title(title + _seeds_note(rows) + _all_contended_note(contended), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def by_model_figure(
    summary: pd.DataFrame, column: str, ylabel: str, title: str, mark_contended: bool = False
):
    """A bar per cell (labelled by model, or by cell when models repeat), error bars over seeds;
    with ``mark_contended`` a contended bar is hatched and its label carries the dagger."""
    rows = summary.dropna(subset=[column]).reset_index(drop=True)
    names = (
        rows["model"] if "model" in rows and not rows["model"].duplicated().any() else rows["cell"]
    )
    contended = contended_mask(rows) if mark_contended else pd.Series(False, index=rows.index)
    fig, ax = plt.subplots(figsize=(max(4.8, 0.9 * len(rows) + 2.4), 4.2))
    bars = ax.bar(
        range(len(rows)),
        rows[column],
        yerr=rows[f"{column}_std"].fillna(0),
        capsize=3,
        color=colours()[: len(rows)],
        edgecolor="0.25",
    )
    for bar, flag in zip(bars, contended):
        if flag:
            bar.set_hatch("///")
    ax.set_xticks(
        range(len(rows)),
        [f"{n} †" if flag else str(n) for n, flag in zip(names, contended)],
        rotation=30,
        ha="right",
        fontsize=8,
    )
    if "length" in rows and rows["length"].notna().any():
        title += f" (L={rows['length'].dropna().iloc[0]})"
    ax.set_ylabel(ylabel)
    ax.set_title(title + _seeds_note(rows) + _all_contended_note(contended), fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    if contended.any():
        ax.legend(handles=[contended_handle("hatch")], fontsize=7)
    return fig


def _seeds_note(summary: pd.DataFrame) -> str:
    return (
        "\nerror bars: ± std over seeds"
        if "seeds" in summary and (summary["seeds"] > 1).any()
        else ""
    )


def _all_contended_note(contended: pd.Series) -> str:
    return (
        "\nall decode times contended (†): not speed figures"
        if len(contended) and contended.all()
        else ""
    )


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legends outside the axes too
    plt.close(fig)
    return path


def save_figure(fig, path: Path, dpi: int | None = 110) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
