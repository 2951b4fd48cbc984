"""Every model can be told apart in the report's figures, however many: each line its own colour
and marker, the same in every figure; no Pareto label drawn over another."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest
from matplotlib.colors import to_rgba
from matplotlib.container import ErrorbarContainer
from matplotlib.text import Annotation

from lightning_modules.metric_names import VAL_BLEU as BLEU
from sweeps.report import plots
from sweeps.report.figures import model_styles, pareto_figure
from sweeps.report.results import DECODE_SECONDS as SEC
from sweeps.report.summary import cell_summary, front_points

#: the attention zoo's eleven models, and one more
ZOO = (
    "bahdanau",
    "key_value",
    "local_m window=10",
    "local_p window=10",
    "luong_concat",
    "luong_dot bidirectional=False",
    "luong_general",
    "luong_location",
    "memory K=32",
    "monotonic",
    "none",
    "memory K=4",
)


def summary(models, lengths=(6, 10, 14), bleu=None, seconds=None) -> pd.DataFrame:
    """cell_summary of one seed per (model, length); ``bleu``/``seconds``: (i, length) -> value."""
    rows = [
        {
            "cell": f"length={length} {model}",
            "model": model,
            "attention": model.split()[0],
            "length": length,
            "seed": 0,
            "status": "done",
            BLEU: bleu(i, length) if bleu else 10.0 + i + length / 10,
            SEC: seconds(i, length) if seconds else 0.001 * (i + 1) * length,
        }
        for length in lengths
        for i, model in enumerate(models)
    ]
    return cell_summary(pd.DataFrame(rows))


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plots.plt.close("all")


def line_styles(fig) -> dict[str, tuple]:
    """Each model's line in a by-length figure: its (colour, marker, line style)."""
    ax = fig.axes[0]
    out = {}
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):
            line = container.lines[0]
            out[container.get_label()] = (
                to_rgba(line.get_color()),
                line.get_marker(),
                line.get_linestyle(),
            )
    return out


def test_eleven_and_more_models_each_get_their_own_colour_and_marker():
    """With the colour cycle's ten colours and one marker, the attention zoo's bahdanau and none
    were drawn alike."""
    for n in (11, 12):
        fig = plots.by_length_figure(summary(ZOO[:n]), BLEU, "BLEU", "BLEU vs length")
        drawn = line_styles(fig)
        assert set(drawn) == set(ZOO[:n])
        for (a, sa), (b, sb) in itertools.combinations(drawn.items(), 2):
            assert sa[:2] != sb[:2], f"{a} and {b} share colour and marker {sa[:2]}"
    styles = model_styles(f"model {i}" for i in range(500))
    assert len({(to_rgba(s["color"]), s["marker"], s["linestyle"]) for s in styles.values()}) == 500
    first = model_styles(ZOO[:10])  # a few models keep the look they had: the cycle, solid dots
    assert {(s["marker"], s["linestyle"]) for s in first.values()} == {("o", "-")}
    assert len({s["color"] for s in first.values()}) == 10


def test_a_model_keeps_its_style_in_every_figure_of_a_report():
    """A model missing from one figure (no decode time at any length) shifted the colour of every
    model after it there: none was drawn in luong_dot's colour in the decode figure."""
    s = summary(ZOO[:11])
    s.loc[s["model"] == "key_value", SEC] = float("nan")
    bleu = line_styles(plots.by_length_figure(s, BLEU, "BLEU", "BLEU vs length"))
    decode = line_styles(plots.by_length_figure(s, SEC, "s", "Decode time vs length"))
    assert "key_value" not in decode
    assert all(decode[m] == bleu[m] for m in decode), "each model drawn as in the BLEU figure"
    assert model_styles(reversed(ZOO)) == model_styles(ZOO), "the order given does not matter"


def label_boxes(fig) -> list:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    return [
        (t.get_text(), t.get_window_extent(renderer))
        for t in ax.texts
        if isinstance(t, Annotation) and t.get_visible()
    ]


def assert_no_label_overlaps(fig):
    boxes = label_boxes(fig)
    assert boxes
    for (a, ba), (b, bb) in itertools.combinations(boxes, 2):
        assert not ba.overlaps(bb), f"labels {a!r} and {b!r} overlap: {ba.bounds} {bb.bounds}"
    inside = fig.bbox
    for text, box in boxes:
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1, text
        assert inside.y0 <= box.y0 and box.y1 <= inside.y1, text


def test_pareto_labels_of_points_on_one_another_do_not_overlap():
    """Models at nearly one point (position encoding on and off, each K) were labelled on top of
    one another, unreadable."""
    names = [f"memory K={k} position_encoding={p}" for k in (1, 4, 16, 32, 64) for p in (0, 1)]
    points = front_points(
        summary(
            names,
            lengths=(10,),
            bleu=lambda i, _: 0.5 + 0.001 * (i % 2) + 0.1 * (i // 2 == 2),
            seconds=lambda i, _: 0.004 + 0.00002 * i + 0.003 * (i // 2 == 4),
        )
    )
    fig = pareto_figure(points)
    assert_no_label_overlaps(fig)
    texts = [t.get_text() for t in fig.axes[0].texts]
    key = "\n".join(t for t in texts if "\n" in t)
    for name in names:  # each point is named: by its label, or by its number in the key
        assert name in texts or name in key, name

    zoo = front_points(  # the zoo's eleven models at three lengths, most of them near BLEU 0
        summary(
            ZOO[:11],
            bleu=lambda i, length: 0.0 if i % 3 else 0.1 * i,
            seconds=lambda i, length: 0.0025 + 0.0001 * (i % 4) + 0.00001 * length,
        )
    )
    assert_no_label_overlaps(pareto_figure(zoo))


def test_pareto_labels_are_model_names_where_they_fit_and_placed_the_same_each_time():
    spread = front_points(summary(("none", "bahdanau", "memory K=4"), lengths=(10, 20)))
    fig = pareto_figure(spread)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert sorted(texts) == sorted(["none", "bahdanau", "memory K=4"] * 2), "names, no key"
    again = pareto_figure(spread)
    assert [b.bounds for _, b in label_boxes(fig)] == [b.bounds for _, b in label_boxes(again)]
