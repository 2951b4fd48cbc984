"""The results figures of a sweep (:func:`plot_results`): BLEU against a headline option, and BLEU
or decode time per length (one line per model) or per model (a bar each). The Pareto and heatmap
figures, and the colours and legend entries all figures share, are in :mod:`sweeps.report.figures`.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lightning_modules.metric_names import VAL_BLEU  # noqa: E402
from sweeps.report.figures import (  # noqa: E402
    VALIDATION_WORDS,
    colours,
    contended_handle,
    contended_label,
    decode_label,
    model_styles,
    seed_spread,
)
from sweeps.report.results import DECODE_SECONDS, headline_columns  # noqa: E402
from sweeps.report.summary import (  # noqa: E402
    CONTENDED_FIGURES,
    axis_of,
    chosen_text,
    contended_mask,
)
from sweeps.spec.signatures import headline_options  # noqa: E402

#: (summary column, axis label, file stem) of the training-cost figures
TRAIN_PLOTS = (
    ("train_step_seconds", "training step (s)", "train_step"),
    ("train_peak_mb", "training step peak memory (MiB)", "train_peak"),
)
REFERENCE_STYLES = ["--", ":", "-.", (0, (5, 2, 1, 2, 1, 2))]
#: the markers of a headline figure's models at one value of its option (no line to draw)
POINT_MARKERS = ["*", "X", "P", "h"]
LINE_MARKERS = [
    "o",
    "s",
    "^",
    "D",
]  # mechanisms sharing a headline option (local_m, local_p) at one length


def plot_results(
    summary: pd.DataFrame,
    out_dir: Path,
    copied: bool | Collection[str] = (),
    timed: bool = True,
    split: str = VALIDATION_WORDS,
) -> dict[str, Path]:
    """The report's figures from ``sweeps.report.summary.cell_summary`` (one row per cell, mean +- std
    over seeds of each seed's best trial), each only where the sweep has the axis it draws:

    - BLEU: ``bleu_vs_<option>.png`` per headline option (:func:`bleu_vs_headline_figure`; memory
      attention's ``bleu_vs_k.png``: BLEU against K, one line per length with at least two K
      values and per combination of the model's other grid values (position encodings on and
      off), error bars over seeds; other models as labelled reference lines) when some length
      has two or more of its values; else ``bleu_vs_length.png`` (one line per model) when there
      are two or more lengths; else ``bleu_by_model.png`` (a bar per model).
    - decode time: ``decode_vs_length.png`` (one line per model) with two or more lengths, else
      ``decode_by_model.png`` (a bar per model); contended times drawn as x / hatched bars.
    - training cost, when the timing stage measured it: ``train_step_vs_length.png`` and
      ``train_peak_vs_length.png`` (seconds per training step, its peak memory; one line per
      model), or ``train_step_by_model.png`` / ``train_peak_by_model.png`` for one length; a
      contended training step drawn apart as a contended decode time is. ``copied``: the cells
      whose figures the timing stage measured once, on one member of a fused group, and copied
      to their seeds (:func:`sweeps.report.train_cost.copied_cells`; True: every cell): those
      get no error bar, the cells measured per seed keep theirs, and the title says which is
      which (:func:`cost_note`).

    ``timed``: the decode times are the timing stage's; without it they are val/decode_seconds
    (:func:`~sweeps.report.summary.seconds_column`), and the decode figure's title says they are
    not speed figures (:data:`UNTIMED_NOTE`). ``split``: the data the decode times are of, in
    words (:func:`sweeps.report.summary.timed_split`), the decode figure's axis label.

    Returns the paths by name."""
    paths: dict[str, Path] = {}
    if summary.empty or VAL_BLEU not in summary:
        return paths
    axis = axis_of(summary)  # a translation sweep's pairs are no length axis
    lengths = summary["length"].dropna().nunique() if axis == "length" and axis in summary else 0
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
        ylabel = decode_label(split)
        untimed = "" if timed else f"\n{UNTIMED_NOTE}"
        if lengths >= 2:
            fig = by_length_figure(
                summary, DECODE_SECONDS, ylabel, "Decode time vs length" + untimed, True
            )
            paths["decode_vs_length"] = _save(fig, out_dir / "decode_vs_length.png")
        else:
            fig = by_model_figure(
                summary, DECODE_SECONDS, ylabel, "Decode time per model" + untimed, True
            )
            paths["decode_by_model"] = _save(fig, out_dir / "decode_by_model.png")
    cells = set(summary["cell"]) if copied is True else set(copied or ())
    for column, ylabel, stem in TRAIN_PLOTS:  # the timing stage's training cost
        if column not in summary or not summary[column].notna().any():
            continue
        note, apart = cost_note(summary.dropna(subset=[column]), cells)
        marked = column in CONTENDED_FIGURES  # the training step, as decode time: not its peak
        if lengths >= 2:
            title = f"{ylabel} vs length"
            fig = by_length_figure(summary, column, ylabel, title, marked, note, apart)
            paths[f"{stem}_vs_length"] = _save(fig, out_dir / f"{stem}_vs_length.png")
        else:
            title = f"{ylabel} per model"
            fig = by_model_figure(summary, column, ylabel, title, marked, note, apart)
            paths[f"{stem}_by_model"] = _save(fig, out_dir / f"{stem}_by_model.png")
    return paths


def cost_note(rows: pd.DataFrame, copied: Collection[str]) -> tuple[str | None, set[str]]:
    """A training-cost figure's second title line and the cells drawn without an error bar, for
    its ``rows`` of which ``copied`` were measured once and copied to their seeds: where every
    cell of several seeds is such a copy, :data:`ONCE_PER_GROUP_NOTE` and no bars at all (None:
    the note is the figure's); where copies sit beside cells measured per seed,
    :data:`SOME_COPIED_NOTE` and the copies' cells; else (None, {}): bars over seeds as in every
    figure."""
    several = rows["seeds"] > 1 if "seeds" in rows else pd.Series(False, index=rows.index)
    is_copy = rows["cell"].isin(set(copied))
    if not (several & is_copy).any():
        return None, set()
    if not (several & ~is_copy).any():
        return ONCE_PER_GROUP_NOTE, set()
    return SOME_COPIED_NOTE, set(rows.loc[is_copy, "cell"])


def bleu_vs_headline_figure(summary: pd.DataFrame, option: str):
    """BLEU against a headline option (``Attention.headline``: memory attention's K, local
    attention's window): for each mechanism that declares ``option``, one line per length and per
    combination of the model's other grid values (:func:`variant_of`: position encodings on and
    off, a scoring function) that has two or more of its values (error bars over seeds); at those
    lengths every model without the option is a reference line in the length's colour, labelled
    "<model> L=<length>" in the legend. A line is labelled "<mechanism> L=<length>", then its
    other values ("memory L=10, PE on"); with one length, each such combination has a colour of
    its own, with several a line style. A model of such a mechanism at one value only (memory
    attention at one K: memory_distill's random-start students) is a lone marker at that value,
    with its error bar, labelled as a line is, and the title says so. None when no such line has
    two points (a one-point line says nothing)."""
    meanings = {
        name: meaning for name, (opt, meaning, _) in headline_options().items() if opt == option
    }
    if option not in summary or "attention" not in summary or not meanings:
        return None
    rows = summary[summary["attention"].isin(list(meanings)) & summary[option].notna()]
    axis = axis_of(summary)  # length, or a translation sweep's language pair
    by_length = rows.groupby(axis, dropna=False, sort=True) if axis in rows else [(None, rows)]
    variants = pd.Series([variant_of(r, option) for _, r in rows.iterrows()], rows.index, object)
    drawn = []  # (length, [(mechanism, variant, its points), ...]) for each length with a line
    alone = {}  # length -> [(mechanism, variant, its one point), ...]: a model at one value
    for length, g in by_length:
        lines, points = [], []
        for (name, variant), m in g.groupby(["attention", variants[g.index]], sort=True):
            # one point per value: not when a grid axis the label does not name repeats them
            if m[option].nunique() >= 2 and m[option].is_unique:
                lines.append((name, variant, m.sort_values(option)))
            elif len(m) == 1:  # a model at one value (a control): a point of its own
                points.append((name, variant, m))
        if lines:
            lines.sort(key=lambda line: (line[0], _natural(line[1])))
            drawn.append((length, lines))
            alone[length] = sorted(points, key=lambda point: (point[0], _natural(point[1])))
    if not drawn:
        return None
    kinds = sorted({v for _, lines in drawn for _, v, _ in lines}, key=_natural)
    by_variant = len(drawn) == 1 and len(kinds) > 1  # one length: a colour per combination
    fig, ax = plt.subplots(figsize=(7.6, 4.4))
    line_labels, references, points = set(), 0, 0
    for (length, lines), colour in zip(drawn, colours()):
        at = (
            ""
            if length is None or pd.isna(length)
            else f" {length}"
            if axis == "pair"
            else f" L={length}"
        )
        mechanisms = list(dict.fromkeys(name for name, _, _ in lines))
        for name, variant, g in lines:
            label = f"{name}{at}" + (f", {variant_label(variant)}" if variant else "")
            style = {"color": colour, "marker": LINE_MARKERS[mechanisms.index(name) % 4]}
            if variant:  # else as drawn before lines had other values
                style.update(variant_style(kinds.index(variant), mechanisms.index(name)))
                if by_variant:
                    style["color"] = colours()[kinds.index(variant)]
            ax.errorbar(
                g[option].astype(float),
                g[VAL_BLEU],
                yerr=seed_spread(g, VAL_BLEU),
                capsize=3,
                **style,
                label=label,
            )
            line_labels.add(label)
        for name, variant, g in alone[length]:  # after the lines: their styles stay as they were
            label = f"{name}{at}" + (f", {variant_label(variant)}" if variant else "")
            colour_at = colours()[len(kinds) + points] if by_variant else colour
            ax.errorbar(
                g[option].astype(float),
                g[VAL_BLEU],
                yerr=seed_spread(g, VAL_BLEU),
                capsize=3,
                ls="none",
                marker=POINT_MARKERS[points % len(POINT_MARKERS)],
                markersize=9,
                color=colour_at,
                label=label,
            )
            line_labels.add(label)
            points += 1
        others = summary[~summary["attention"].isin(list(meanings))]
        if at:
            others = others[others[axis] == length]
        for (_, row), style in zip(others.iterrows(), REFERENCE_STYLES * 8):
            references += 1
            ax.axhline(
                row[VAL_BLEU],
                ls=style,
                lw=1.0,
                color=colour,
                alpha=0.75,
                label=f"{row['model']}{at}",
            )
    ax.set_xscale("log", base=2)
    values = sorted(
        {int(v) for _, lines in drawn for _, _, g in lines for v in g[option]}
        | {int(v) for found in alone.values() for _, _, g in found for v in g[option]}
    )
    ax.set_xticks(values, [str(v) for v in values])
    meaning = "; ".join(
        dict.fromkeys(
            meanings[name] for _, lines in drawn for name, _, _ in lines if meanings[name]
        )
    )
    ax.set_xlabel(f"{option} ({meaning})" if meaning else option)
    ax.set_ylabel("BLEU")
    ax.set_title(
        f"BLEU vs {option}"
        + (" (reference lines: the other models at that length)" if references else "")
        + (f"\nlone markers: the models at one {option} value" if points else "")
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


#: the line styles of a headline figure's lines with other grid values (:func:`variant_style`)
VARIANT_STYLES = ["-", (0, (4, 1.5)), (0, (1, 1)), (0, (6, 1.5, 1, 1.5))]


def variant_style(i: int, mechanism: int) -> dict:
    """The line style, marker and fill of the ``i``-th combination of other grid values in a
    headline figure (of its ``mechanism``-th mechanism): each its own, and past the first hollow
    markers on dashed lines, so lines that coincide (position encodings at K=1) both show."""
    style = {
        "linestyle": VARIANT_STYLES[i % len(VARIANT_STYLES)],
        "marker": LINE_MARKERS[(mechanism + i) % len(LINE_MARKERS)],
    }
    return {**style, "markerfacecolor": "none"} if i else style


#: shorter names of grid options in a line's label
SHORT_OPTIONS = {"position_encoding": "PE", "distill_weight": "λ", "init_from_teacher": "init"}


def variant_of(row: pd.Series, option: str) -> str:
    """The grid values of a summary row's model other than its mechanism and ``option`` (its
    label less those: ``position_encoding=True`` of ``memory K=4 position_encoding=True``), what
    tells its cell apart from the others with the same ``option`` value; "" where none."""
    model = "" if pd.isna(row.get("model")) else str(row.get("model"))
    model, baseline = model.removesuffix(BASELINE_SUFFIX), model.endswith(BASELINE_SUFFIX)
    parts = re.split(r" (?=[\w.]+=)", model)
    if parts[0] == str(row.get("attention", "")):
        parts = parts[1:]
    parts = [p for p in parts if p and not p.startswith(f"{option}=")]
    return " ".join(parts + ["(baseline)"] * baseline)


#: what :func:`~sweeps.report.stats.summary_cells` appends to a baseline cell's model
BASELINE_SUFFIX = " (baseline)"


def variant_label(variant: str) -> str:
    """A line's other grid values for its legend: ``PE on``, ``encoder_scoring=sigmoid, λ=0.1``."""
    out = []
    for part in re.split(r" (?=[\w.]+=)", variant):
        key, eq, value = part.partition("=")
        name = SHORT_OPTIONS.get(key, key)
        flag = {"True": "on", "False": "off"}.get(value) if eq else None
        out.append(f"{name} {flag}" if flag else f"{name}{eq}{value}")
    return ", ".join(out)


def _natural(text: str) -> str:
    return re.sub(r"\d+", lambda m: m.group().zfill(12), text)


def by_length_figure(
    summary: pd.DataFrame,
    column: str,
    ylabel: str,
    title: str,
    mark_contended: bool = False,
    note: str | None = None,
    no_spread: Collection[str] = (),
):
    """``column`` against length, one line per model in its style of every figure
    (:func:`~sweeps.report.figures.model_styles`), error bars over seeds; with
    ``mark_contended`` a contended point (of the decode time or the training step:
    :data:`~sweeps.report.summary.CONTENDED_FIGURES`) is an x. A point whose headline option was
    searched (memory attention's K chosen by Optuna, which can differ from length to length) is
    labelled with the value chosen there ("K=3"). ``note``: the title's second line instead of
    the error bars' (then drawn without them, unless ``no_spread`` is given: then only the cells
    it names have none, as :func:`cost_note` gives them)."""
    fig, ax = plt.subplots(figsize=(7.6, 4.4))
    styles = model_styles(summary["model"])  # every model's, so each looks as in other figures
    rows = summary.dropna(subset=[column, "length"])
    contended = (
        contended_mask(rows, column) if mark_contended else pd.Series(False, index=rows.index)
    )
    drawn: dict[tuple, str] = {}  # each line's points: the first model that drew them
    for model, style in styles.items():
        g = rows[rows["model"] == model].sort_values("length")
        if g.empty:
            continue
        colour = style["color"]
        points = tuple(zip(g["length"].astype(float), g[column].astype(float).round(9)))
        under = drawn.setdefault(points, model)
        ax.errorbar(
            g["length"].astype(float),
            g[column],
            yerr=None if note and not no_spread else _spread(g, column, no_spread),
            markersize=4,
            capsize=3,
            # a line on exactly another's points is drawn beneath it (it would hide the other):
            # the legend says where it is
            label=model if under == model else f"{model} (under {under}: the same points)",
            **style,
            # errorbar draws its line at zorder + 0.1 (2.1 by default): this one at 2.0
            **({} if under == model else {"zorder": 1.9}),
        )
        for _, point in g.iterrows():
            if text := chosen_text(point):
                ax.annotate(
                    text,
                    (float(point["length"]), point[column]),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize=7,
                    color=colour,
                    bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
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
        handles.append(contended_handle("x", contended_label(column)))
        labels.append(contended_label(column))
    ax.set_xticks(sorted(rows["length"].astype(int).unique()))
    ax.set_xlabel("sequence length L")
    ax.set_ylabel(ylabel)
    second = f"\n{note}" if note else _seeds_note(rows)
    ax.set_title(title + second + _all_contended_note(contended, column), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def by_model_figure(
    summary: pd.DataFrame,
    column: str,
    ylabel: str,
    title: str,
    mark_contended: bool = False,
    note: str | None = None,
    no_spread: Collection[str] = (),
):
    """A bar per cell (labelled by model, or by cell when models repeat, and by the searched
    headline options' chosen values: "memory (K=3)") in its model's colour, error bars over seeds;
    with ``mark_contended`` a contended bar is hatched and its label carries the dagger.
    ``note``: as for :func:`by_length_figure`."""
    styles = model_styles(summary["model"]) if "model" in summary else {}
    rows = summary.dropna(subset=[column]).reset_index(drop=True)
    names = [
        f"{name} ({chosen})" if (chosen := chosen_text(row)) else str(name)
        for name, (_, row) in zip(
            rows["model"]
            if "model" in rows and not rows["model"].duplicated().any()
            else rows["cell"],
            rows.iterrows(),
        )
    ]
    contended = (
        contended_mask(rows, column) if mark_contended else pd.Series(False, index=rows.index)
    )
    fig, ax = plt.subplots(figsize=(max(4.8, 0.9 * len(rows) + 2.4), 4.2))
    bars = ax.bar(
        range(len(rows)),
        rows[column],
        yerr=None if note and not no_spread else _spread(rows, column, no_spread),
        capsize=3,
        color=[styles[str(m)]["color"] for m in rows["model"]]
        if styles
        else colours()[: len(rows)],
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
    if axis_of(rows) == "pair" and rows["pair"].nunique() == 1:  # a translation sweep's pair
        title += f" ({rows['pair'].dropna().iloc[0]})"
    elif axis_of(rows) == "length" and "length" in rows and rows["length"].notna().any():
        title += f" (L={rows['length'].dropna().iloc[0]})"
    ax.set_ylabel(ylabel)
    second = f"\n{note}" if note else _seeds_note(rows)
    ax.set_title(title + second + _all_contended_note(contended, column), fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    if contended.any():
        ax.legend(handles=[contended_handle("hatch", contended_label(column))], fontsize=7)
    return fig


#: the decode figures' second title line when the timing stage did not run
UNTIMED_NOTE = "val/decode_seconds: timed during training beside other trials, not a speed figure"
#: the training-cost figures' second title line when each was copied to its cell's seeds
ONCE_PER_GROUP_NOTE = (
    "one measurement per cell of a fused group, copied to its seeds: no spread to draw"
)
#: ... when some cells' were copied and others' measured on each seed
SOME_COPIED_NOTE = (
    "error bars: ± std over seeds; none on a fused group's cells, measured once and copied to "
    "their seeds"
)


def _spread(rows: pd.DataFrame, column: str, no_spread: Collection[str]):
    """:func:`~sweeps.report.figures.seed_spread`, NaN (no bar) for the cells in ``no_spread``."""
    spread = seed_spread(rows, column)
    if spread is None or not no_spread:
        return spread
    return np.where(rows["cell"].isin(set(no_spread)).to_numpy(), np.nan, spread)


def _seeds_note(summary: pd.DataFrame) -> str:
    return (
        "\nerror bars: ± std over seeds"
        if "seeds" in summary and (summary["seeds"] > 1).any()
        else ""
    )


def _all_contended_note(contended: pd.Series, figure: str) -> str:
    return (
        f"\nall {CONTENDED_FIGURES[figure][1]}s contended (†): not speed figures"
        if len(contended) and contended.all()
        else ""
    )


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legends outside the axes too
    plt.close(fig)
    return path
