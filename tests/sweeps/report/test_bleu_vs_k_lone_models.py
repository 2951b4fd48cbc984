"""bleu_vs_k.png drew a line per model with two or more K values and a reference line per model
without K, and left out, without a word, the models at one K value (memory_distill's random-start
students, memory K=4 init_from_teacher=none): they are drawn as lone markers at their K."""

from __future__ import annotations

import pandas as pd
import pytest
from sweep_helpers import done_row

from lightning_modules.metric_names import VAL_BLEU as BLEU
from sweeps.report import plots
from sweeps.report.summary import cell_summary

#: (model, K, BLEU at seed 0): two taught students with two K values each, one random-start
#: student at one K, and a model without K
MODELS = [
    ("memory K=4 distill_weight=0 init_from_teacher=encoder", 4, 70.0),
    ("memory K=16 distill_weight=0 init_from_teacher=encoder", 16, 90.0),
    ("memory K=4 distill_weight=1 init_from_teacher=encoder", 4, 60.0),
    ("memory K=16 distill_weight=1 init_from_teacher=encoder", 16, 95.0),
    ("memory K=4 distill_weight=0 init_from_teacher=none", 4, 80.0),
    ("bahdanau", None, 99.0),
]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plots.plt.close("all")


def summary(lengths=(20,)) -> pd.DataFrame:
    rows = [
        done_row(model, model.split()[0], k, length, seed, **{BLEU: bleu + seed - length / 10})
        for length in lengths
        for seed in (0, 1)
        for model, k, bleu in MODELS
    ]
    return cell_summary(pd.DataFrame(rows))


def drawn(ax) -> dict[str, tuple]:
    """Each errorbar's legend label: its points (x, y) and its line style."""
    out = {}
    for container in ax.containers:
        line = container.lines[0]
        out[container.get_label()] = (
            list(zip(line.get_xdata().tolist(), line.get_ydata().tolist())),
            line.get_linestyle(),
        )
    return out


def test_a_model_at_one_k_is_drawn_as_a_lone_marker_at_its_k():
    fig = plots.bleu_vs_headline_figure(summary(), "K")
    ax = fig.axes[0]
    lines = drawn(ax)
    lone = lines["memory L=20, λ=0, init=none"]
    assert lone == ([(4.0, 78.5)], "None"), lone  # 80 - 20/10, mean over seeds 0 and 1
    assert lines["memory L=20, λ=0, init=encoder"][0] == [(4.0, 68.5), (16.0, 88.5)]
    assert lines["memory L=20, λ=0, init=encoder"][1] == "-"
    assert "lone markers: the models at one K value" in ax.get_title()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend.index("memory L=20, λ=0, init=none") < legend.index("bahdanau L=20")


def test_lone_markers_at_each_length_take_that_length_s_colour():
    fig = plots.bleu_vs_headline_figure(summary(lengths=(10, 20)), "K")
    ax = fig.axes[0]
    by_label = {c.get_label(): c.lines[0].get_color() for c in ax.containers}
    for length in (10, 20):
        assert (
            by_label[f"memory L={length}, λ=0, init=none"]
            == by_label[f"memory L={length}, λ=0, init=encoder"]
        )
    assert len([label for label in by_label if label.endswith("init=none")]) == 2


def test_no_lone_model_no_word_of_one():
    only_lines = summary()
    only_lines = only_lines[~only_lines["model"].str.endswith("init_from_teacher=none")]
    title = plots.bleu_vs_headline_figure(only_lines, "K").axes[0].get_title()
    assert "lone markers" not in title
