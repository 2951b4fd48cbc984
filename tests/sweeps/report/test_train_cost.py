"""The timing stage's training cost in the report: a contended training step is marked, caveated
and drawn apart as a contended decode time is, and the training-cost figures say "copied to its
seeds" only where the timing stage copied a fused cell's measurement to its seeds."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.collections import PathCollection

from lightning_modules.metric_names import VAL_BLEU as BLEU
from sweeps.report import local, plots
from sweeps.report.figures import CONTENDED_LABEL
from sweeps.report.results import DECODE_SECONDS as SEC
from sweeps.report.results import TRAIN_STEP_SECONDS as STEP
from sweeps.report.results import write_results_csv
from sweeps.report.summary import cell_summary
from sweeps.report.train_cost import train_cost_sections

FRONT = "Quality vs training cost: the Pareto front"
MODELS = ("none", "memory K=4", "bahdanau")  # slower and better in turn: all on both fronts
#: the training-cost front's rule for contended steps, the decode front's in its words
RULE = (
    "Rule: contended training step times (†) are kept in the front's computation and marked, not "
    "dropped. A front among contended figures is not trustworthy: a model timed on a busy machine "
    "looks slower than it is and can drop off the front."
)
LABEL = "† contended training step time: not a speed figure"


def rows(lengths=(10, 50), seeds=(0,), contended=(), step=None, group=None) -> list[dict]:
    """One trial per (length, model, seed); ``contended``: the (model, length) whose training
    step the timing stage flagged; ``step(length, i, seed)``: the training step's seconds;
    ``group(length, model)``: its fused group (None: trained alone)."""
    step = step or (lambda length, i, seed: 0.001 * (i + 1) * length + 0.0001 * seed)
    out = []
    for length in lengths:
        for i, model in enumerate(MODELS):
            for seed in seeds:
                out.append(
                    {
                        "trial_id": f"t{length}{i}{seed}",
                        "cell": f"length={length} {model}",
                        "model": model,
                        "attention": model.split()[0],
                        "length": length,
                        "seed": seed,
                        "status": "done",
                        "fused_with": group(length, model) if group else None,
                        BLEU: 50.0 + 10 * i - length / 10,
                        SEC: 0.002 * (i + 1) * length,
                        "decode_contended": False,
                        STEP: step(length, i, seed),
                        "train_step_contended": (model, length) in contended,
                        "train_peak_mb": 5.0 + i,
                    }
                )
    return out


def crosses(ax) -> list:
    """The points a line figure draws apart (its x markers), per collection."""
    return [
        c.get_offsets().tolist()
        for c in ax.collections
        if isinstance(c, PathCollection) and c.get_offsets().shape[0]
    ]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plots.plt.close("all")


def test_the_training_cost_front_marks_and_caveats_a_contended_step_as_the_decode_front_does():
    """The "Training cost" table marked a contended training step †; its Pareto front printed it
    bare and without the caveat the decode-time front carries for contended figures."""
    df = pd.DataFrame(rows(contended={("bahdanau", 50)}))
    front = dict(train_cost_sections(df, cell_summary(df)))[FRONT]
    table = [line.split(" | ") for line in front.splitlines() if line.startswith("| 50 | ")]
    marked = {cells[1]: cells[3] for cells in table}
    assert marked["bahdanau"].endswith(" †") and not marked["none"].endswith("†"), marked
    assert RULE in front
    assert (
        "Not trustworthy here, fronts among contended figures: L=50 (1 of 3 training step "
        "times contended)." in front
    )
    clean = pd.DataFrame(rows())
    clean_front = dict(train_cost_sections(clean, cell_summary(clean)))[FRONT]
    assert "†" not in clean_front.split("\n\n")[0] and "Not trustworthy" not in clean_front
    assert RULE in clean_front, "the rule is stated, as on the decode front"


def test_the_training_step_figures_draw_a_contended_step_apart(tmp_path, drawn):
    """train_step_vs_length.png / train_step_by_model.png drew contended steps like any other,
    where the decode figures draw contended times as an x / a hatched bar."""
    s = cell_summary(pd.DataFrame(rows(contended={("bahdanau", 50)})))
    plots.plot_results(s, tmp_path)
    ax = drawn["train_step_vs_length.png"].axes[0]
    at = s.set_index("cell").loc["length=50 bahdanau", STEP]
    assert crosses(ax) == [[[50.0, at]]]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert LABEL in legend and CONTENDED_LABEL not in legend
    peak = drawn["train_peak_vs_length.png"].axes[0]  # a peak of memory is never contended
    assert crosses(peak) == []

    drawn.clear()
    one = cell_summary(pd.DataFrame(rows(lengths=(20,), contended={("none", 20)})))
    plots.plot_results(one, tmp_path)
    ax = drawn["train_step_by_model.png"].axes[0]
    hatched = [t.get_text() for t, bar in zip(ax.get_xticklabels(), ax.patches) if bar.get_hatch()]
    assert hatched == ["none †"]
    every = cell_summary(pd.DataFrame(rows(lengths=(20,), contended={(m, 20) for m in MODELS})))
    drawn.clear()
    plots.plot_results(every, tmp_path)
    title = drawn["train_step_by_model.png"].axes[0].get_title()
    assert "all training step times contended (†): not speed figures" in title


def _train_step_title(tmp_path, drawn, trials: list[dict]) -> str:
    drawn.clear()
    write_results_csv(trials, tmp_path)
    local.build_local_report(tmp_path)
    return drawn["train_step_vs_length.png"].axes[0].get_title()


def test_one_seed_fused_steps_are_not_called_copies(tmp_path, drawn):
    """With one seed every cell of a fused group is timed on its own model: nothing was copied
    to any seed, yet the figures said "copied to its seeds: no spread to draw"."""
    by_length = lambda length, model: f"g{length}"  # noqa: E731 - a group per length
    title = _train_step_title(tmp_path / "one", drawn, rows(group=by_length))
    assert plots.ONCE_PER_GROUP_NOTE not in title and "copied" not in title


def test_fused_steps_copied_to_a_cell_s_seeds_are_said_to_be(tmp_path, drawn):
    """Three seeds of a cell trained in one group, their training step measured once and copied
    (one value across the seeds): no spread to draw, and the title says why; a fused sweep whose
    seeds hold their own measurements draws its error bars over seeds."""
    by_cell = lambda length, model: f"{length}{model}"  # noqa: E731 - a group per cell
    same = lambda length, i, seed: 0.001 * (i + 1) * length  # noqa: E731 - the seeds' one figure
    copied = rows(seeds=(0, 1, 2), group=by_cell, step=same)
    title = _train_step_title(tmp_path / "copied", drawn, copied)
    assert plots.ONCE_PER_GROUP_NOTE in title and "std over seeds" not in title
    apart = rows(seeds=(0, 1, 2), group=by_cell)  # each seed its own value
    title = _train_step_title(tmp_path / "apart", drawn, apart)
    assert plots.ONCE_PER_GROUP_NOTE not in title and "std over seeds" in title


def test_the_cost_table_gives_a_copied_measurement_no_spread():
    """A fused cell's one training-step measurement, copied to its three seeds, showed in the
    table as "0.0215 ± 0.0000" beside "seeds 3": a measured zero spread that was never measured."""
    by_cell = lambda length, model: f"{length}{model}"  # noqa: E731 - a group per cell
    same = lambda length, i, seed: 0.001 * (i + 1) * length  # noqa: E731 - the seeds' one figure
    copied = pd.DataFrame(rows(seeds=(0, 1, 2), group=by_cell, step=same))
    text = dict(train_cost_sections(copied, cell_summary(copied)))
    table = next(t for heading, t in text.items() if heading.startswith("Training cost by"))
    lines = [line for line in table.splitlines() if line.startswith("| 50 ")]
    assert len(lines) == 3 and not any("±" in line for line in lines), lines
    assert "| 0.0500 " in next(line for line in lines if "| none " in line)
    assert "measured once, on one member, and copied to its members" in table
    apart = pd.DataFrame(rows(seeds=(0, 1, 2), group=by_cell))  # each seed its own value
    table = next(
        t
        for heading, t in train_cost_sections(apart, cell_summary(apart))
        if heading.startswith("Training cost by")
    )
    assert "±" in table and "copied to its members" not in table


def test_a_sweep_of_fused_and_lone_cells_gives_only_the_copied_ones_no_spread():
    """Whether figures were copied was decided for the whole sweep: one cell trained alone (its
    seeds measured apart) and every fused cell went back to "± 0.0000" over its seeds."""

    def group(length, model):
        return None if model == "bahdanau" else f"{length}{model}"

    def step(length, i, seed):  # the fused cells' seeds hold one figure, bahdanau's its own
        return 0.001 * (i + 1) * length + (0.0001 * seed if i == 2 else 0)

    mixed = pd.DataFrame(rows(seeds=(0, 1, 2), group=group, step=step))
    text = dict(train_cost_sections(mixed, cell_summary(mixed)))
    table = next(t for heading, t in text.items() if heading.startswith("Training cost by"))
    lines = {line.split("|")[2].strip(): line for line in table.splitlines() if "| 50 " in line}
    assert "±" in lines["bahdanau"] and "±" not in lines["none"] and "±" not in lines["memory K=4"]
    assert "such a cell's figures, shown without a spread, are one measurement" in table
