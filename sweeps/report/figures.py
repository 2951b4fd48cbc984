"""Figures of one sentence or one table, and what every figure of a report shares.

- :func:`heatmap_figure`: the attention heatmaps of one sentence (``sweeps.report.heatmaps``, the
  trial's W&B images).
- :func:`pareto_figure`: BLEU against decode seconds, the Pareto front per length and context
  (``pareto.png``),
  its points labelled where no label covers another (:func:`place_labels`).
- Shared by these and :mod:`sweeps.report.plots`' figures: the colours, each model's style
  (:func:`model_styles`), the legend entries for contended decode times (training steps) and for
  error bars over seeds, and :func:`save_figure`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import hsv_to_rgb  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from lightning_modules.metric_names import VAL_BLEU  # noqa: E402
from sweeps.report.results import DECODE_SECONDS, natural_order  # noqa: E402
from sweeps.report.summary import (  # noqa: E402
    CONTENDED_FIGURES,
    DAGGER,
    contended_mask,
    front_groups,
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

    Every panel is drawn on one fixed scale, :data:`WEIGHT_SCALE` (0 white, 1 black; widened to
    the largest value where a panel holds a larger one), shown by a colour bar: a cell's darkness
    is its weight, comparable across panels and figures. A panel whose weights are all near 0 is
    near white, and a flat alignment an even grey, not stretched to black and white.
    """
    weights = np.asarray(item["weights"], dtype=float)  # (T, S)
    src, out = list(item.get("source", [])), list(item.get("output", []))
    panels = [weights] + [np.asarray(item[k], dtype=float) for k in ("alpha", "beta") if k in item]
    scale = weight_scale(panels)
    if "alpha" not in item or "beta" not in item:
        fig, ax = plt.subplots(figsize=(4.6, 4.2))
        image = _heatmap(ax, weights, "alignment", "source", "output", scale)
        _ticks(ax, src, out, weights.shape)
        _colour_bar(fig, image, ax=ax)
    else:
        alpha = np.asarray(item["alpha"], dtype=float)  # (S, K)
        beta = np.asarray(item["beta"], dtype=float)  # (T, K)
        mass = beta.sum(axis=0)  # (K,) decoder mass per vector
        chosen = np.argsort(-mass, kind="stable")[: min(MAX_VECTOR_PANELS, alpha.shape[1])]
        ncols = max(3, len(chosen))
        fig = plt.figure(figsize=(3.0 * ncols, 6.4))
        # the panels' columns, and a narrow last one for the colour bar of them all
        grid = fig.add_gridspec(
            2, ncols + 1, height_ratios=[1.25, 1], width_ratios=[1.0] * ncols + [0.06]
        )
        third = ncols // 3
        ax_a = fig.add_subplot(grid[0, :third])
        ax_b = fig.add_subplot(grid[0, third : 2 * third])
        ax_c = fig.add_subplot(grid[0, 2 * third : ncols])
        _heatmap(
            ax_a,
            alpha.T,
            f"encoder scores alpha (K={alpha.shape[1]} x S)",
            "source",
            "memory vector k",
            scale,
        )
        vectors = [
            str(k + 1) for k in range(alpha.shape[1])
        ]  # 1-based, as in the per-vector titles
        _ticks(ax_a, src, vectors, alpha.T.shape)
        _heatmap(ax_b, beta, "decoder scores beta (T x K)", "memory vector k", "output", scale)
        _ticks(ax_b, vectors, out, beta.shape)
        image = _heatmap(ax_c, weights, "combined: sum_k beta_k alpha_k", "source", "output", scale)
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
                scale,
            )
            _ticks(
                ax, src if len(src) <= 20 else [], out if len(out) <= 20 else [], per_vector.shape
            )
        _colour_bar(fig, image, cax=fig.add_subplot(grid[:, ncols]))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


#: the colour scale of every heatmap panel (:func:`heatmap_figure`): attention weights lie in [0, 1]
WEIGHT_SCALE = (0.0, 1.0)
#: the colour bar's label
WEIGHT_LABEL = "attention weight"


def weight_scale(panels: Iterable[np.ndarray]) -> tuple[float, float]:
    """The colour limits of a heatmap figure: :data:`WEIGHT_SCALE`, widened to cover a value
    outside it (none of the shipped mechanisms gives one: softmax and sigmoid scores, and sums of
    their products, lie in [0, 1]), so that no weight is drawn clipped."""
    low, high = WEIGHT_SCALE
    for values in panels:
        finite = values[np.isfinite(values)]
        if finite.size:
            low, high = min(low, float(finite.min())), max(high, float(finite.max()))
    return low, high


def _heatmap(ax, values: np.ndarray, title: str, xlabel: str, ylabel: str, scale=WEIGHT_SCALE):
    """One panel on the figure's fixed colour ``scale`` (darker = more weight); its image."""
    low, high = scale
    image = ax.imshow(
        values, aspect="auto", cmap="Greys", interpolation="nearest", vmin=low, vmax=high
    )
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    return image


def _colour_bar(fig, image, **where) -> None:
    """The colour bar of the figure's one scale (``ax=`` beside a panel, or ``cax=`` its own axes)."""
    bar = fig.colorbar(image, **where)
    bar.set_label(WEIGHT_LABEL, fontsize=8)
    bar.ax.tick_params(labelsize=7)


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
    """Matplotlib's colour cycle, repeated: one colour per length across a figure (a model's:
    :func:`model_styles`)."""
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(64)]


#: with the colour cycle, what tells models apart past its length (:func:`model_styles`)
MODEL_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*")
MODEL_LINESTYLES = ("-", "--", ":", "-.")


def model_styles(models: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each model's ``color``, ``marker`` and ``linestyle``, the same in every figure of a report.

    The models in :func:`~sweeps.report.results.natural_order` (whatever order they come in, so
    a model missing from one figure shifts no other's style) take matplotlib's colour cycle, drawn
    solid with a dot; each further round of the cycle changes the marker and the line style, so no
    two models share colour and marker (the first 480; past those, a colour of their own)."""
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = pd.Series(list(dict.fromkeys(str(m) for m in models)), dtype=object)
    styles = {}
    for i, name in enumerate(names.sort_values(key=natural_order, kind="stable")):
        round_, c = divmod(i, len(cycle))
        colour = cycle[c]
        if round_ >= len(MODEL_MARKERS) * len(MODEL_LINESTYLES):  # a hue no other model has
            colour = tuple(hsv_to_rgb((i * 0.6180339887 % 1.0, 0.7, 0.75)))
        styles[name] = {
            "color": colour,
            "marker": MODEL_MARKERS[round_ % len(MODEL_MARKERS)],
            "linestyle": MODEL_LINESTYLES[
                (round_ + round_ // len(MODEL_MARKERS)) % len(MODEL_LINESTYLES)
            ],
        }
    return styles


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


#: the dots per inch the figures are saved at (:func:`save_figure`), and the Pareto figure drawn at,
#: so that its labels are placed on the pixels they are saved at
DPI = 110
#: a name label may sit this many label heights off its point (joined by a line); past that the
#: Pareto figure labels its points with numbers keyed beside it
NAME_RINGS = 2
#: pixels: a label keeps clear of the dots of other points by this much (a dot's radius), and the
#: points this close to a label's own are under it anyway
MARKER_RADIUS = 4.5
SAME_SPOT = 3.0


#: the data a decode time is of where results.csv does not say (the timing stage's default)
VALIDATION_WORDS = "the validation set"


def decode_label(split: str = VALIDATION_WORDS) -> str:
    """A decode-time axis label: ``decode time over the test set (s)`` for decode times of
    ``split`` (in words: :func:`sweeps.report.summary.timed_split`)."""
    return f"decode time over {split} (s)"


def pareto_figure(points: pd.DataFrame, untimed: str = "", split: str = VALIDATION_WORDS):
    """BLEU vs decode seconds, one colour per front (a length, and a context: :func:`front_groups`),
    the front as a step line, every point labelled.

    With several seeds each point carries error bars (std over seeds of decode seconds and BLEU);
    a contended decode time is drawn as an x and its label carries the dagger. ``untimed``: the
    title's line saying the decode times are not the timing stage's; ``split``: the data they are
    of, in words, the x axis label (:func:`decode_label`). A label is the model's name
    where every name finds a place near its point that no other label takes (:func:`place_labels`);
    otherwise each model gets a number (:func:`~sweeps.report.results.natural_order`), its points
    are labelled with it, and a key beside the axes names them.
    """
    for numbered in (False, True):
        fig, labels = _pareto_drawn(points, untimed, numbered, split)
        if place_labels(fig.axes[0], labels, None if numbered else NAME_RINGS):
            return fig
        plt.close(fig)
    raise AssertionError("numbered labels always find a place")


def _pareto_drawn(points: pd.DataFrame, untimed: str, numbered: bool, split: str):
    """The Pareto figure laid out, and its labels (:func:`place_labels`) not yet placed."""
    fig, ax = plt.subplots(figsize=(6.8, 4.8), dpi=DPI)
    contended = contended_mask(points)
    several_seeds = bool("seeds" in points and (points["seeds"] > 1).any())
    # one colour per front: a length (or a translation sweep's language pair), and a context
    groups = front_groups(points)
    numbers = {name: i + 1 for i, name in enumerate(model_styles(points["model"]))}
    labels = []
    for (label, g), colour in zip(groups, colours()):
        marked = contended[g.index]
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
            name = numbers[str(row["model"])] if numbered else row["model"]
            labels.append(
                {
                    "text": f"{name}" + (f" {DAGGER}" if contended[idx] else ""),
                    "xy": (row[DECODE_SECONDS], row[VAL_BLEU]),
                    "front": bool(row["pareto"]),
                }
            )
    handles, legend_labels = ax.get_legend_handles_labels()
    for extra, wanted in (
        (contended_handle("x"), contended.any()),
        (seeds_handle(), several_seeds),
    ):
        if wanted:
            handles.append(extra)
            legend_labels.append(extra.get_label())
    ax.set_xlabel(decode_label(split))
    ax.set_ylabel("BLEU")
    title = "Quality vs speed (circled + line: Pareto front)"
    if untimed:
        title += f"\n{untimed}"
    if len(points) and contended.all():
        title += "\nall decode times contended: not speed figures"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(handles, legend_labels, fontsize=7)
    if numbered:  # the key beside the axes, the figure widened by its width
        key = ax.text(
            1.02,
            1.0,
            "\n".join(["models"] + [f"{n}  {name}" for name, n in numbers.items()]),
            transform=ax.transAxes,
            va="top",
            ha="left",
            fontsize=7,
        )
        width = key.get_window_extent(fig.canvas.get_renderer()).width / fig.dpi
        fig.set_size_inches(6.8 + width + 0.2, 4.8)
    fig.tight_layout()
    return fig, labels


def place_labels(ax, labels: list[dict[str, Any]], rings: int | None = None) -> bool:
    """Annotate each of ``labels`` (``text``, data ``xy``, ``front``: a front point's label is
    larger and dark) where no other label, the legend nor (where it can) another point is, inside
    the axes. Front labels are placed first, each at the first free place of: above right of its
    point (as ever), below right, above left, below left; then the same one label height further
    out each ring, joined to the point by a thin line; points of one label on one another get one.
    Call it on a figure laid out: it fixes the axes' limits and the legend where they are. False,
    with no label drawn, when ``rings`` is given and a label has no free place that near; with
    ``rings`` None every label is drawn, inside the figure where a place is free, further out if
    none is, but never over another label."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax.set_xlim(ax.get_xlim())  # the leader lines must not move the axes
    ax.set_ylim(ax.get_ylim())
    taken: list[Bbox] = []
    legend = ax.get_legend()
    if legend is not None:
        box = legend.get_window_extent(renderer)
        legend.set_loc(tuple(ax.transAxes.inverted().transform((box.x0, box.y0))))
        taken.append(box)
    xy = np.array([label["xy"] for label in labels], dtype=float).reshape(-1, 2)
    dots = ax.transData.transform(xy)
    order = sorted(range(len(labels)), key=lambda i: not labels[i]["front"])
    placed, named = [], []  # what is drawn; (text, dot) of each label
    for i in order:
        label = labels[i]
        if any(t == label["text"] and np.hypot(*(d - dots[i])) <= SAME_SPOT for t, d in named):
            continue  # one label for the points of a model that lie on one another
        named.append((label["text"], dots[i]))
        ann = ax.annotate(
            label["text"],
            label["xy"],
            fontsize=7 if label["front"] else 6,
            alpha=1.0 if label["front"] else 0.55,
            xytext=(3, 3),
            textcoords="offset points",
        )
        box = ann.get_window_extent(renderer)  # above right of the dot, as ever
        others = dots[np.hypot(*(dots - dots[i]).T) > SAME_SPOT]  # not those under its own
        spot = _free_spot(box, dots[i], others, taken, ax.bbox, fig.bbox, rings)
        if spot is None:
            for drawn in placed:
                drawn.remove()
            ann.remove()
            return False
        (x0, y0), ring = spot
        points_per_pixel = 72 / fig.dpi
        ann.xyann = (
            3 + (x0 - box.x0) * points_per_pixel,
            3 + (y0 - box.y0) * points_per_pixel,
        )
        new = Bbox.from_bounds(x0, y0, box.width, box.height)
        taken.append(new)
        placed.append(ann)
        if ring:
            placed.append(_leader(ax, dots[i], new))
    return True


def _free_spot(box, dot, others, taken, axes_box, figure_box, rings):
    """The lower left corner and ring of the first free place for a label of ``box``'s size
    (see :func:`place_labels`), None when there is none within ``rings``."""
    w, h = box.width, box.height
    gap_x, gap_y = box.x0 - dot[0], box.y0 - dot[1]
    below = max(gap_y, MARKER_RADIUS)  # under the dot: the text's top clear of its marker
    step = h + 1

    def corners(ring):
        up, down = dot[1] + gap_y + ring * step, dot[1] - below - h - ring * step
        right, left = box.x0, dot[0] - gap_x - w
        return ((right, up), (right, down), (left, up), (left, down))

    def free(corner, inside, dots_too):
        here = Bbox.from_bounds(corner[0] - 1, corner[1] - 1, w + 2, h + 2)
        if inside is not None and not (
            inside.x0 <= here.x0
            and here.x1 <= inside.x1
            and inside.y0 <= here.y0 <= here.y1 <= inside.y1
        ):
            return False
        if any(here.overlaps(t) for t in taken):
            return False
        if not (dots_too and len(others)):
            return True
        return not here.padded(MARKER_RADIUS).count_contains(others)

    near = rings if rings is not None else int(axes_box.height / step) + 1
    searches = [(near, axes_box, True), (near, axes_box, False)]
    if rings is None:
        searches.append((int(figure_box.height / step) + 1, figure_box, False))
    for last, inside, dots_too in searches:
        for ring in range(last + 1):
            for corner in corners(ring):
                if free(corner, inside, dots_too):
                    return corner, ring
    if rings is not None:
        return None
    ring = 0
    while True:  # past the figure: never over another label
        for corner in corners(ring):
            if free(corner, None, False):
                return corner, ring
        ring += 1


def _leader(ax, dot, box):
    """A thin line from the point at display ``dot`` to the nearest edge of its label's ``box``."""
    end = (min(max(dot[0], box.x0), box.x1), min(max(dot[1], box.y0), box.y1))
    (x0, y0), (x1, y1) = ax.transData.inverted().transform([dot, end])
    (line,) = ax.plot([x0, x1], [y0, y1], color="0.5", lw=0.5, alpha=0.8, zorder=1)
    return line


def seed_spread(frame: pd.DataFrame, column: str):
    """The column's spread over seeds (its ``_std`` column) as error bars: NaN where one seed gives
    none, and matplotlib draws no bar there (a 0 would draw a cap, as if the spread were measured
    and nil); None without the column."""
    name = f"{column}_std"
    return frame[name].astype(float).to_numpy() if name in frame else None


def save_figure(
    fig, path: Path, dpi: int | None = DPI, metadata: dict[str, str] | None = None
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, metadata=metadata)
    plt.close(fig)
    return path
