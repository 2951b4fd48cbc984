"""Attention heatmaps share one fixed colour scale with a colour bar: a cell's darkness is its
weight. Each panel was stretched from its own smallest value (white) to its largest (black), so a
panel of weights near 2e-6 was as black as one at 0.999, and a flat alignment drew as sharp
black and white columns."""

from __future__ import annotations

import numpy as np
import pytest

from sweeps.report import figures


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    figures.plt.close("all")


def panels(fig) -> dict[str, object]:
    """The figure's heatmap panels (the axes that hold an image), by title: their images."""
    return {ax.get_title(): ax.images[0] for ax in fig.axes if ax.images}


def colour_bars(fig) -> list:
    return [ax for ax in fig.axes if not ax.images and ax.get_ylabel() == figures.WEIGHT_LABEL]


def drawn_grey(image) -> np.ndarray:
    """The grey level (1 white .. 0 black) each cell of an image is drawn in."""
    return np.asarray(image.to_rgba(image.get_array()))[..., :3].mean(axis=-1)


def test_a_flat_alignment_is_drawn_on_the_fixed_scale_as_an_even_light_grey():
    flat = np.full((5, 7), 1 / 16)  # an untrained model's alignment: every weight 0.0625
    flat[0, 0] += 1e-4  # the tiny unevenness that was stretched to black and white
    fig = figures.heatmap_figure(
        {"source": list("abcdefg"), "output": list("vwxyz"), "weights": flat}
    )
    (image,) = panels(fig).values()
    assert image.get_clim() == figures.WEIGHT_SCALE == (0.0, 1.0)
    grey = drawn_grey(image)
    assert grey.min() > 0.85 and np.ptp(grey) < 0.01, "one light grey, not black and white columns"
    assert len(colour_bars(fig)) == 1


def test_a_memory_figure_draws_a_near_zero_vector_near_white_and_a_large_weight_dark():
    """As in a trained K=16 model: one vector carries the alignment (largest weight 0.999),
    another next to nothing (2e-6); both panels were drawn with black cells."""
    s, t, k = 6, 5, 3
    alpha = np.full((s, k), 1e-6)
    alpha[:, 0] = np.eye(s)[:, 2] * 0.999 + 1e-4  # vector 1 points at source 3
    alpha[0, 2] = 2e-6
    beta = np.zeros((t, k))
    beta[:, 0], beta[:, 1], beta[:, 2] = 0.999, 0.0005, 0.0005
    item = {"source": list("abcdef"), "output": list("vwxyz"), "alpha": alpha, "beta": beta}
    item["weights"] = beta @ alpha.T
    fig = figures.heatmap_figure(item, "memory")
    drawn = panels(fig)
    assert len(drawn) == 3 + k and len(colour_bars(fig)) == 1
    assert {im.get_clim() for im in drawn.values()} == {(0.0, 1.0)}
    strong = next(im for title, im in drawn.items() if title.startswith("vector k=1 "))
    faint = next(im for title, im in drawn.items() if title.startswith("vector k=3 "))
    assert np.abs(faint.get_array()).max() < 1e-8
    assert drawn_grey(faint).min() > 0.99, "a panel of weights near zero is near white"
    assert drawn_grey(strong).min() < 0.1, "a weight near 1 is near black"
    # the colour bar reads the scale: 0 to 1
    (bar,) = colour_bars(fig)
    assert bar.get_ylim() == pytest.approx((0.0, 1.0))


def test_a_weight_outside_zero_to_one_widens_the_one_scale_of_every_panel():
    item = {"weights": np.array([[0.5, 1.5], [0.0, 0.2]])}
    (image,) = panels(figures.heatmap_figure(item)).values()
    assert image.get_clim() == (0.0, 1.5)


def test_the_colour_bar_of_a_memory_figure_sits_beside_its_panels_not_over_one():
    rng = np.random.default_rng(0)
    alpha, beta = rng.random((7, 4)), rng.random((5, 4))
    fig = figures.heatmap_figure({"alpha": alpha, "beta": beta, "weights": beta @ alpha.T})
    fig.canvas.draw()
    (bar,) = colour_bars(fig)
    box = bar.get_window_extent()
    for ax in fig.axes:
        if ax.images:
            assert ax.get_window_extent().x1 < box.x0, ax.get_title()
