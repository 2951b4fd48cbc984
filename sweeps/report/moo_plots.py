"""The multi-objective search's figures: each (cell, seed)'s Pareto front, and hypervolume against
the training steps spent (``moo_front.png``, ``moo_hypervolume.png`` beside results.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sweeps.report.figures import save_figure


def plot_moo(
    views: Sequence[Any], out_dir: Path, history: Callable[[Any], list[tuple[int, float]]]
) -> dict[str, Path]:
    """Both figures for the views of :func:`sweeps.report.moo_views.load_views`; ``history``: a view's
    (steps spent, hypervolume) steps (:func:`sweeps.report.moo_views.history`)."""
    import matplotlib

    matplotlib.use("Agg")

    if not views:
        return {}
    return {
        "moo_front": save_figure(front_figure(views), Path(out_dir) / "moo_front.png"),
        "moo_hypervolume": save_figure(
            hypervolume_figure(views, history), Path(out_dir) / "moo_hypervolume.png"
        ),
    }


def front_figure(views: Sequence[Any]):
    """One panel per (cell, seed): decode seconds (x) against the first objective (y); the front
    joined and labelled with its K, constrained-out trials as crosses, stopped trials faint at
    their last report, the baseline as a star."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    n = len(views)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False)
    for ax, v in zip(axes.flat, views):
        names = v.metric_names
        finished = [p for p in v.finished if len(p.values) > 1]
        pruned = [p for p in v.points if p.state == "PRUNED" and len(p.values) > 1]
        ok = [p for p in finished if p.feasible]
        out = [p for p in finished if not p.feasible]
        if pruned:
            ax.scatter(
                [p.values[1] for p in pruned],
                [p.values[0] for p in pruned],
                c="0.75",
                s=14,
                label="stopped (last report)",
            )
        if ok:
            ax.scatter(
                [p.values[1] for p in ok],
                [p.values[0] for p in ok],
                c="C0",
                s=22,
                label="finished, feasible",
            )
        if out:
            ax.scatter(
                [p.values[1] for p in out],
                [p.values[0] for p in out],
                c="C3",
                marker="x",
                s=30,
                label="constrained out",
            )
        front = v.front()
        if front:
            ax.plot(
                [p.values[1] for p in front],
                [p.values[0] for p in front],
                "-o",
                c="C1",
                ms=6,
                label="Pareto front",
            )
            for p in front:
                label = " ".join(
                    f"{k}={val}" for k, val in p.params.items() if k in ("K", "position_encoding")
                )
                ax.annotate(
                    label.replace("position_encoding", "PE"),
                    (p.values[1], p.values[0]),
                    fontsize=7,
                    xytext=(3, -9),
                    textcoords="offset points",
                )
        base = (v.baseline or {}).get("metrics") or {}
        if base.get(names[0]) is not None and base.get(names[1]) is not None:
            ax.scatter(
                [base[names[1]]], [base[names[0]]], marker="*", s=120, c="k", label="baseline"
            )
        elif base.get(names[0]) is not None:
            ax.axhline(base[names[0]], c="k", lw=0.8, ls="--", label="baseline")
        ax.set_title(f"{v.cell}, {v.seed_label}", fontsize=9)
        ax.set_xlabel(f"{names[1]} (probe)")
        ax.xaxis.set_major_locator(MaxNLocator(5))  # seconds' long tick labels overlap beyond that
        ax.set_ylabel(names[0])
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    legend: dict[str, Any] = {}  # one legend below the panels: inside one it covered points
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    if legend:
        fig.legend(
            list(legend.values()),
            list(legend),
            loc="lower center",
            ncol=len(legend),
            fontsize=7,
            frameon=False,
        )
    fig.tight_layout(rect=(0, 0.06 if legend else 0, 1, 1))
    return fig


def hypervolume_figure(views: Sequence[Any], history: Callable[[Any], list[tuple[int, float]]]):
    """Hypervolume of the feasible finished trials against training steps spent, per (cell, seed)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for v in views:
        h = history(v)
        if h:
            ax.step(
                [s for s, _ in h],
                [x for _, x in h],
                where="post",
                marker="o",
                ms=3,
                label=f"{v.cell}, {v.seed_label}",
            )
    ax.set_xlabel("training steps spent (all trials of the study, stopped ones included)")
    ax.set_ylabel("hypervolume (feasible front)")
    ax.set_title("Hypervolume against compute", fontsize=10)
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
