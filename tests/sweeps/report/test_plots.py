"""The sweep's result figures adapt to the sweep: no one-point lines, labelled reference lines,
contended decode times marked."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from sweep_helpers import done_row

from lightning_modules.metric_names import VAL_BLEU as BLEU
from sweeps.report import plots
from sweeps.report.figures import CONTENDED_LABEL
from sweeps.report.results import DECODE_SECONDS as SEC
from sweeps.report.summary import cell_summary


def summary(
    lengths=(10, 50), ks=(1, 4, 16), seeds=(0, 1), others=("none", "bahdanau"), contended=()
) -> pd.DataFrame:
    """cell_summary of a hand-made study: memory K in ``ks`` and ``others`` at each length."""
    rows = []
    models = [(f"memory K={k}", "memory", k) for k in ks] + [(m, m, None) for m in others]
    for length in lengths:
        for seed in seeds:
            for i, (model, attention, k) in enumerate(models):
                figures = {
                    BLEU: 50.0 + 5 * i - length / 10 + seed,
                    SEC: 0.01 * (i + 1) * length / 10 + 0.001 * seed,
                    "decode_contended": (model, length, seed) in contended,
                }
                rows.append(done_row(model, attention, k, length, seed, **figures))
    return cell_summary(pd.DataFrame(rows))


def legend_texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plots.plt.close("all")


def test_bleu_vs_k_labels_its_reference_lines_by_model_and_length():
    fig = plots.bleu_vs_headline_figure(summary(), "K")
    texts = legend_texts(fig)
    assert {
        "memory L=10",
        "memory L=50",
        "none L=10",
        "bahdanau L=10",
        "none L=50",
        "bahdanau L=50",
    } <= set(texts)
    assert texts[:2] == ["memory L=10", "memory L=50"], "the lines first, then the references"
    assert "(reference lines: the other models at that length)" in fig.axes[0].get_title()
    # memory attention alone (position_encoding.yaml's grid): no reference line, none promised
    fig = plots.bleu_vs_headline_figure(summary(others=()), "K")
    assert legend_texts(fig) == ["memory L=10", "memory L=50"]
    assert "reference" not in fig.axes[0].get_title()


def test_bleu_vs_k_draws_no_one_point_line(tmp_path):
    assert plots.bleu_vs_headline_figure(summary(ks=(4,)), "K") is None
    paths = plots.plot_results(summary(ks=(4,)), tmp_path)
    assert "bleu_vs_k" not in paths and not (tmp_path / "bleu_vs_k.png").exists()
    assert "bleu_vs_length" in paths, "two lengths: BLEU against length instead"
    (tmp_path / "one").mkdir()
    paths = plots.plot_results(summary(lengths=(20,), ks=(4,)), tmp_path / "one")
    assert set(paths) == {"bleu_by_model", "decode_by_model"}, "one length, one K: bars, no lines"

    # L=10 has two K values, L=50 one: only L=10 gets a memory line, and no drawn line has one point
    mixed = summary(ks=(1, 4))
    mixed = mixed[~((mixed["length"] == 50) & (mixed["K"] == 1))]
    fig = plots.bleu_vs_headline_figure(mixed, "K")
    texts = legend_texts(fig)
    assert "memory L=10" in texts and "memory L=50" not in texts and "bahdanau L=50" not in texts
    lines = {
        c.get_label(): c.lines[0] for c in fig.axes[0].containers
    }  # the errorbar lines, by legend label
    assert set(lines) == {"memory L=10"} and lines["memory L=10"].get_xydata().shape[0] == 2


def test_decode_vs_length_needs_two_lengths_and_marks_contended_points(tmp_path):
    s = summary(contended={("none", 50, 1)})
    paths = plots.plot_results(s, tmp_path)
    assert "decode_vs_length" in paths and "decode_by_model" not in paths
    fig = plots.by_length_figure(s, SEC, "s", "Decode time vs length", mark_contended=True)
    assert CONTENDED_LABEL in legend_texts(fig)
    crosses = [
        c
        for c in fig.axes[0].collections
        if isinstance(c, PathCollection) and c.get_offsets().shape[0]
    ]
    assert len(crosses) == 1 and crosses[0].get_offsets().tolist() == [
        [50.0, s.set_index("cell").loc["length=50 none", SEC]]
    ]
    clean = plots.by_length_figure(
        summary(), SEC, "s", "Decode time vs length", mark_contended=True
    )
    assert CONTENDED_LABEL not in legend_texts(clean)


def test_one_length_decode_bars_hatch_the_contended_one(tmp_path):
    s = summary(lengths=(20,), ks=(4,), contended={("memory K=4", 20, 0)})
    paths = plots.plot_results(s, tmp_path)
    assert "decode_vs_length" not in paths and paths["decode_by_model"].exists()
    fig = plots.by_model_figure(s, SEC, "s", "Decode time per model", mark_contended=True)
    ax = fig.axes[0]
    hatched = [t.get_text() for t, bar in zip(ax.get_xticklabels(), ax.patches) if bar.get_hatch()]
    assert hatched == ["memory K=4 †"]
    assert CONTENDED_LABEL in legend_texts(fig)
    assert "std over seeds" in ax.get_title()


def test_each_headline_option_gets_its_own_figure(tmp_path):
    """Local attention declares ``window`` its headline option (``Attention.headline``): BLEU
    against the window, one line per local mechanism, beside memory attention's BLEU vs K."""
    variants = [("memory", "K", k) for k in (1, 4)] + [
        (name, "window", w) for name in ("local_m", "local_p") for w in (2, 8)
    ]
    rows = [
        {
            "cell": f"{name} {option}={v}",
            "model": f"{name} {option}={v}",
            "attention": name,
            option: v,
            "length": 10,
            "seed": 0,
            "status": "done",
            BLEU: 40.0 + v,
            SEC: 0.01 * v,
        }
        for name, option, v in variants
    ]
    rows.append(
        {
            "cell": "none",
            "model": "none",
            "attention": "none",
            "length": 10,
            "seed": 0,
            "status": "done",
            BLEU: 30.0,
            SEC: 0.005,
        }
    )
    s = cell_summary(pd.DataFrame(rows))
    fig = plots.bleu_vs_headline_figure(s, "window")
    texts = legend_texts(fig)
    assert texts[:2] == ["local_m L=10", "local_p L=10"], "the lines first, one per local mechanism"
    assert {"memory K=4 L=10", "none L=10"} <= set(texts), (
        "the models without a window are references"
    )
    assert fig.axes[0].get_xlabel().startswith("window")
    paths = plots.plot_results(s, tmp_path)
    assert {"bleu_vs_k", "bleu_vs_window"} <= set(paths)


def test_a_fused_sweep_s_training_cost_figures_draw_no_seed_spread(tmp_path, drawn):
    """A fused group's training step is one measurement copied to its seeds: the figure draws no
    error bars and its title says why; an unfused sweep's keeps its bars over seeds."""
    s = summary()
    s["train_step_seconds"] = s[SEC] * 2
    s["train_step_seconds_std"] = s[f"{SEC}_std"]
    for fused in (False, True):
        drawn.clear()
        plots.plot_results(s, tmp_path, copied=fused)
        ax = drawn["train_step_vs_length.png"].axes[0]
        bars = [c.has_yerr for c in ax.containers]
        assert bars and all(b != fused for b in bars), (fused, bars)
        assert (plots.ONCE_PER_GROUP_NOTE in ax.get_title()) == fused
        assert ("± std over seeds" in ax.get_title()) != fused


def error_bars_drawn(fig) -> int:
    """The error bar segments a figure draws (bar charts' and line plots' alike)."""
    n = 0
    for ax in fig.axes:
        for c in ax.containers:
            err = getattr(c, "errorbar", c)  # a BarContainer holds its ErrorbarContainer
            for cols in getattr(err, "lines", (None, (), ()))[2]:
                n += sum(len(seg) > 0 for seg in cols.get_segments())
    return n


def test_one_seed_draws_no_error_bars_and_two_seeds_do():
    """One seed gives no spread: no error bar, not a zero-height one with its caps drawn."""
    for seeds, drawn in (((0,), False), ((0, 1), True)):
        s = summary(lengths=(20,), seeds=seeds)
        bars = plots.by_model_figure(s, SEC, "s", "Decode time per model")
        s2 = summary(seeds=seeds)
        lines = plots.by_length_figure(s2, SEC, "s", "Decode time vs length")
        assert (error_bars_drawn(bars) > 0) == drawn, seeds
        assert (error_bars_drawn(lines) > 0) == drawn, seeds


def test_decode_figures_say_so_when_the_timing_stage_did_not_run(tmp_path, drawn):
    """Without the timing stage the report's decode times are val/decode_seconds, timed during
    training beside other trials: results.md said so, the decode and Pareto figures did not."""
    from sweeps.report import local
    from sweeps.report.results import write_results_csv

    rows = [
        {"trial_id": f"t{length}{m}", "cell": f"length={length} {m}", "model": m, "attention": m,
         "length": length, "seed": 0, "status": "done", BLEU: 90.0 - length + i,
         "val/decode_seconds": 0.01 * length * (i + 1)}
        for length in (10, 20) for i, m in enumerate(("none", "bahdanau"))
    ]  # fmt: skip
    for timed in (False, True):
        drawn.clear()
        out = tmp_path / str(timed)
        if timed:
            for r in rows:
                r[SEC] = r["val/decode_seconds"] / 2
        write_results_csv(rows, out)
        local.build_local_report(out)
        for name in ("decode_vs_length.png", "pareto.png"):
            title = drawn[name].axes[0].get_title()
            assert (plots.UNTIMED_NOTE in title) != timed, (name, title)


def position_encoding_summary(lengths=(100,)) -> pd.DataFrame:
    """cell_summary of position_encoding.yaml's grid, K x position encodings off and on, beside
    Bahdanau, two seeds: BLEU = K (+ 10 with encodings) - L / 100 (seed 1: one more)."""
    rows = []
    for length in lengths:
        models = [
            (f"memory K={k} position_encoding={pe}", "memory", k, k + 10 * pe - length / 100)
            for k in (1, 4, 16)
            for pe in (False, True)
        ] + [("bahdanau", "bahdanau", None, 90.0)]
        for seed in (0, 1):
            for model, attention, k, bleu in models:
                row = done_row(model, attention, k, length, seed, **{BLEU: bleu + seed, SEC: 0.01})
                rows.append({**row, "cell": f"length={length} attention={model}"})
    return cell_summary(pd.DataFrame(rows))


def errorbar_lines(fig) -> dict[str, list[list[float]]]:
    """Each errorbar line's points (K, BLEU), by its legend label."""
    return {c.get_label(): c.lines[0].get_xydata().tolist() for c in fig.axes[0].containers}


def test_bleu_vs_k_draws_a_line_per_position_encoding_where_k_repeats_over_it(tmp_path):
    """position_encoding.yaml crosses K with position_encoding at one length: K repeats, once per
    PE value, and the report drew no bleu_vs_k.png (a bar chart only). One line per PE value now,
    each through its own cells' points, Bahdanau a reference line as before."""
    s = position_encoding_summary()
    paths = plots.plot_results(s, tmp_path)
    assert "bleu_vs_k" in paths and (tmp_path / "bleu_vs_k.png").is_file()
    assert "bleu_by_model" not in paths
    fig = plots.bleu_vs_headline_figure(s, "K")
    assert errorbar_lines(fig) == {
        "memory L=100, PE off": [[1.0, 0.5], [4.0, 3.5], [16.0, 15.5]],
        "memory L=100, PE on": [[1.0, 10.5], [4.0, 13.5], [16.0, 25.5]],
    }
    texts = legend_texts(fig)
    assert texts == ["memory L=100, PE off", "memory L=100, PE on", "bahdanau L=100"]
    off, on = (c.lines[0] for c in fig.axes[0].containers)
    assert off.get_color() != on.get_color(), "one length: a colour per PE value"
    assert on.get_linestyle() != off.get_linestyle(), "lines that coincide (K=1) both show"

    # several lengths: a line per length and PE value, the length in the label
    fig = plots.bleu_vs_headline_figure(position_encoding_summary(lengths=(10, 20)), "K")
    lines = errorbar_lines(fig)
    assert list(lines) == [
        "memory L=10, PE off",
        "memory L=10, PE on",
        "memory L=20, PE off",
        "memory L=20, PE on",
    ]
    assert lines["memory L=20, PE on"] == [
        [1.0, pytest.approx(11.3)],
        [4.0, pytest.approx(14.3)],
        [16.0, pytest.approx(26.3)],
    ]
    assert {"bahdanau L=10", "bahdanau L=20"} <= set(legend_texts(fig))


def test_a_searched_k_is_named_at_each_point_and_bar_it_was_chosen_at():
    """K searched by Optuna, not a grid value: the memory line of BLEU vs length joins trials of
    different K (chosen per length), and its model name says none of them."""
    rows = []
    for length, best_k in ((10, 4), (50, 2)):
        for k in (2, 4):
            bleu = 60.0 if k == best_k else 40.0
            rows.append(done_row("memory", "memory", k, length, 0, **{BLEU: bleu, SEC: 0.01}))
        rows.append(done_row("bahdanau", "bahdanau", None, length, 0, **{BLEU: 50.0, SEC: 0.02}))
    s = cell_summary(pd.DataFrame(rows))
    fig = plots.by_length_figure(s, BLEU, "BLEU", "BLEU vs length")
    labels = {(t.get_text(), t.xy[0]) for t in fig.axes[0].texts}
    assert labels == {("K=4", 10.0), ("K=2", 50.0)}, "only memory's points, each with its K"
    one = cell_summary(pd.DataFrame([r for r in rows if r["length"] == 10]))
    ticks = [
        t.get_text()
        for t in plots.by_model_figure(one, BLEU, "BLEU", "t").axes[0].get_xticklabels()
    ]
    assert ticks == ["bahdanau", "memory (K=4)"]


def test_a_line_drawn_exactly_over_another_says_so_in_the_legend():
    """attention_zoo's luong_concat is Bahdanau's model weight for weight (its docstring): drawn
    after Bahdanau's, its BLEU line hid Bahdanau's. It is drawn beneath, and the legend names the
    line it lies under; lines that only share a point keep their plain labels."""
    s = summary(ks=(4,), others=("bahdanau", "luong_concat", "none"))
    same = s["model"] == "luong_concat"
    for _, row in s[same].iterrows():
        twin = (s["model"] == "bahdanau") & (s["length"] == row["length"])
        s.loc[s.index[same & (s["length"] == row["length"])], BLEU] = s.loc[twin, BLEU].iloc[0]
    s.loc[(s["model"] == "none") & (s["length"] == 10), BLEU] = s.loc[
        (s["model"] == "memory K=4") & (s["length"] == 10), BLEU
    ].iloc[0]
    fig = plots.by_length_figure(s, BLEU, "BLEU", "BLEU vs length")
    assert sorted(legend_texts(fig)) == sorted(
        ["memory K=4", "bahdanau", "luong_concat (under bahdanau: the same points)", "none"]
    )
    line = {c.get_label().split(" ")[0]: c.lines[0] for c in fig.axes[0].containers}
    assert line["luong_concat"].get_zorder() < line["bahdanau"].get_zorder()
    assert line["none"].get_zorder() == line["bahdanau"].get_zorder()
