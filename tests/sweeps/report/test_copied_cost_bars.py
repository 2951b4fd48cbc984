"""A sweep with some cells trained fused (their training step measured once and copied to their
seeds) beside cells measured on each seed: the training-cost figures gave every cell error bars
over seeds, so a copied cell drew a bar of zero spread under a title saying "± std over seeds",
while results.md showed the same cells without a spread."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.container import BarContainer
from test_train_cost import MODELS, rows

from sweeps.report import local, plots
from sweeps.report.results import write_results_csv


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plots.plt.close("all")


def group(length, model):
    """none and memory K=4 trained fused, a group per cell; bahdanau alone."""
    return None if model == "bahdanau" else f"{length}{model}"


def step(length, i, seed):
    """The fused cells' seeds hold their one copied figure; bahdanau's seeds each their own."""
    return 0.001 * (i + 1) * length + (0.0001 * seed if MODELS[i] == "bahdanau" else 0)


def bars_by_model(ax) -> dict[str, list]:
    """Each line's error bars, by its legend label: the (bottom, top) of each bar drawn."""
    out = {}
    for container in ax.containers:
        _, _, barlines = container.lines
        segments = [s for c in barlines for s in c.get_segments()]
        out[container.get_label()] = [
            (float(s[0][1]), float(s[1][1]))
            for s in segments
            if len(s) == 2 and np.isfinite(s).all()
        ]
    return out


def test_only_the_copied_cells_of_a_sweep_draw_no_error_bar(tmp_path, drawn):
    write_results_csv(rows(seeds=(0, 1, 2), group=group, step=step), tmp_path)
    local.build_local_report(tmp_path)
    for name in ("train_step_vs_length.png", "train_peak_vs_length.png"):
        ax = drawn[name].axes[0]
        bars = bars_by_model(ax)
        assert bars["none"] == [] and bars["memory K=4"] == [], (name, bars)  # no 0-spread caps
        assert len(bars["bahdanau"]) == 2, (name, bars)  # a bar at each length, measured per seed
        title = ax.get_title()
        assert plots.SOME_COPIED_NOTE in title and plots.ONCE_PER_GROUP_NOTE not in title
    spread = [
        top - bottom
        for bottom, top in bars_by_model(drawn["train_step_vs_length.png"].axes[0])["bahdanau"]
    ]
    assert all(s > 0 for s in spread), spread  # the seeds' own figures: a real spread
    assert "such a cell's figures, shown without a spread" in (tmp_path / "results.md").read_text()


def test_one_length_draws_a_bar_per_cell_and_no_error_bar_on_the_copied_ones(tmp_path, drawn):
    write_results_csv(rows(lengths=(20,), seeds=(0, 1), group=group, step=step), tmp_path)
    local.build_local_report(tmp_path)
    ax = drawn["train_step_by_model.png"].axes[0]
    (container,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    _, _, barlines = container.errorbar.lines
    # matplotlib keeps a segment per bar, empty where the spread is NaN (no bar drawn)
    tops = {
        float(s[0][0]): len(s) == 2 and np.isfinite(s).all()
        for c in barlines
        for s in c.get_segments()
        if len(s)
    }
    names = [t.get_text() for t in ax.get_xticklabels()]
    bars = {name: tops.get(float(x), False) for name, x in zip(names, ax.get_xticks())}
    assert bars == {"none": False, "memory K=4": False, "bahdanau": True}, bars
    assert plots.SOME_COPIED_NOTE in ax.get_title()


def test_a_sweep_of_copied_cells_only_still_draws_no_bars_and_says_why(tmp_path, drawn):
    every = lambda length, model: f"{length}{model}"  # noqa: E731 - every cell a fused group
    same = lambda length, i, seed: 0.001 * (i + 1) * length  # noqa: E731
    write_results_csv(rows(seeds=(0, 1), group=every, step=same), tmp_path)
    local.build_local_report(tmp_path)
    ax = drawn["train_step_vs_length.png"].axes[0]
    assert not any(c.has_yerr for c in ax.containers)
    assert plots.ONCE_PER_GROUP_NOTE in ax.get_title() and "std over seeds" not in ax.get_title()
