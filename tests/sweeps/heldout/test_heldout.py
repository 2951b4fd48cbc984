"""The held-out stage's choice and its report section, on small result frames (no Ray): which
trials the validation metric chose (per (cell, seed), or per cell over seeds), and results.md's
table of valid beside test in the paper's Table 1 and Table 2 layouts."""

from __future__ import annotations

import pandas as pd
import pytest

from sweeps.heldout.evaluate import split_name
from sweeps.report.heldout import heldout_frame, heldout_sections
from sweeps.report.selection import chosen_trials, mark_chosen


def _row(tid, cell, seed, bleu, status="done", **more):
    return {"trial_id": tid, "cell": cell, "seed": seed, "status": status, "val/bleu": bleu, **more}


def test_per_unit_choice_is_the_best_sample_of_each_cell_and_seed():
    rows = [
        _row("a", "c1", 0, 10.0),
        _row("b", "c1", 0, 12.0),
        _row("c", "c1", 1, 9.0),
        _row("d", "c1", 1, 30.0, status="error"),  # not finished: never chosen
        _row("e", "c2", 0, None),
    ]
    assert chosen_trials(rows, "val/bleu", "max") == {"b", "c"}
    assert chosen_trials(rows, "val/bleu", "min") == {"a", "c"}
    mark_chosen(rows, "val/bleu", "max")
    assert [r["chosen"] for r in rows] == [False, True, True, False, False]


def test_over_seeds_the_configuration_with_the_best_mean_is_chosen_with_all_its_seeds():
    # configuration 0 has the single best seed (20) but configuration 1 the better mean
    rows = [
        _row("a", "c1", 0, 20.0, configuration=0),
        _row("b", "c1", 1, 2.0, configuration=0),
        _row("c", "c1", 0, 12.0, configuration=1),
        _row("d", "c1", 1, 13.0, configuration=1),
        _row("e", "c2", 0, 5.0, configuration=0),
        _row("f", "c2", 1, 6.0, configuration=0),
    ]
    assert chosen_trials(rows, "val/bleu", "max") == {"c", "d", "e", "f"}


def _frame(pairs_or_lengths: str) -> pd.DataFrame:
    rows = []
    for i, (key, model, vals, tests) in enumerate(
        [
            ("en-de" if pairs_or_lengths == "pair" else 10, "bahdanau", [20.0, 22.0], [18.0, 19.0]),
            (
                "en-de" if pairs_or_lengths == "pair" else 10,
                "memory K=32",
                [21.0, 23.0],
                [17.0, 18.0],
            ),
            ("en-fi" if pairs_or_lengths == "pair" else 50, "bahdanau", [10.0, 12.0], [9.0, 9.5]),
        ]
    ):
        for seed, (v, t) in enumerate(zip(vals, tests)):
            extra = {"pair": key, "length": 50} if pairs_or_lengths == "pair" else {"length": key}
            sacre = (
                {"val/sacrebleu": v - 1, "test/sacrebleu": t - 1}
                if pairs_or_lengths == "pair"
                else {}
            )
            rows.append(
                _row(
                    f"{i}{seed}",
                    f"cell{i}",
                    seed,
                    v,
                    model=model,
                    chosen=True,
                    **{"test/bleu": t},
                    test_split="newstest2016" if pairs_or_lengths == "pair" else "copy test draw",
                    **extra,
                    **sacre,
                )
            )
    rows.append(_row("x", "cell0", 0, 1.0, model="bahdanau", chosen=False, length=10))  # not chosen
    return pd.DataFrame(rows)


def test_table_2_layout_for_pairs_compares_sacrebleu_valid_and_test():
    frame, valid, test = heldout_frame(_frame("pair"))
    assert (valid, test) == ("val/sacrebleu", "test/sacrebleu")
    ((heading, text),) = heldout_sections(_frame("pair"))
    assert "Table 2 layout" in heading
    header = text.splitlines()[0]
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "model",
        "en-de valid",
        "en-de test",
        "en-fi valid",
        "en-fi test",
    ]
    bahdanau = next(line for line in text.splitlines() if line.startswith("| bahdanau"))
    # sacreBLEU of the chosen seeds, mean ± std as every table of the page: valid 19, 21 -> 20.00 ±
    # 1.41; test 17, 18 -> 17.50 ± 0.71
    assert "20.00 ± 1.41" in bahdanau and "17.50 ± 0.71" in bahdanau
    assert "newstest2016" in text and "validation split" in text
    # the choice was made on val/bleu: the sacreBLEU column is not "the figure the choice was made on"
    assert "The validation column is the figure the choice was made on" not in text
    assert (
        "the chosen trials' val/sacrebleu (the test column's metric), on the sentences whose "
        "val/bleu made the choice, so it is biased upward" in text
    )
    memory = next(line for line in text.splitlines() if line.startswith("| memory K=32"))
    assert memory.rstrip(" |").endswith("–")  # not run on en-fi


def test_table_1_layout_for_lengths_and_nothing_without_test_figures():
    ((heading, text),) = heldout_sections(_frame("length"))
    assert "Table 1 layout" in heading and "L=10 valid" in text and "L=50 test" in text
    assert "copy test draw" in text
    assert "The validation column is the figure the choice was made on, so it" in text
    assert heldout_sections(_frame("length").drop(columns=["test/bleu"])) == []


@pytest.mark.parametrize(
    "task, name",
    [
        ({"name": "copy"}, "copy test draw"),
        ({"name": "wmt17", "pair": "en-de"}, "newstest2016"),
        ({"name": "wmt17", "pair": "en-tr", "test_prefix": None}, "newstest2016"),
        ({"name": "wmt17", "pair": "en-de", "test_prefix": "test"}, "test"),
    ],
)
def test_split_names_follow_the_task(task, name):
    assert split_name(task) == name


def test_the_report_summarises_the_chosen_configuration_over_its_seeds():
    from sweeps.report.summary import cell_summary, summary_rule

    rows = [
        _row("a", "c1", 0, 20.0, configuration=0, model="m", length=4),
        _row("b", "c1", 1, 2.0, configuration=0, model="m", length=4),
        _row("c", "c1", 0, 12.0, configuration=1, model="m", length=4),
        _row("d", "c1", 1, 13.0, configuration=1, model="m", length=4),
    ]
    df = pd.DataFrame(rows)
    summary = cell_summary(df)
    # not the mean of each seed's best (20 and 13): configuration 1's seeds, 12 and 13
    assert summary["val/bleu"].tolist() == [12.5] and summary["seeds"].tolist() == [2]
    assert summary_rule(df, "val/bleu", "max").startswith("Configurations judged over seeds")
    assert summary_rule(df.drop(columns=["configuration"]), "val/bleu", "max").startswith(
        "One rule"
    )


def test_a_relative_constraints_baseline_is_never_the_cells_choice():
    """minimal_k trains a Bahdanau baseline in each cell and seed of a memory search: with the
    best val/bleu of its cell it was chosen, and the held-out stage tested it instead of a memory
    model. Marked ``baseline`` in its row (as a bool, or "True" read back from results.csv)."""
    rows = [
        _row("base", "L=10", 0, 0.32, baseline=True),
        _row("m1", "L=10", 0, 0.20),
        _row("m2", "L=10", 0, 0.14),
        _row("base6", "L=6", 0, 0.9, baseline="True"),
        _row("m3", "L=6", 0, 0.1),
    ]
    assert chosen_trials(rows, "val/bleu", "max") == {"m1", "m3"}


def test_the_summary_tables_show_the_baseline_beside_the_cells_choice_not_in_its_place():
    """results.md's tables follow the same rule as the held-out choice: minimal_k's Table 1 layout
    showed only the Bahdanau baseline (the best val/bleu of each length's cell) and no memory row."""
    from sweeps.report.markdown import length_table
    from sweeps.report.summary import cell_summary

    rows = [
        _row("base", "length=10", 0, 100.0, baseline=True, model="bahdanau", length=10),
        _row("m1", "length=10", 0, 99.5, model="memory", length=10, K=3),
        _row("m2", "length=10", 0, 78.0, model="memory", length=10, K=1),
        _row("base20", "length=20", 0, 99.4, baseline="True", model="bahdanau", length=20),
        _row("m3", "length=20", 0, 94.8, model="memory", length=20, K=10),
    ]
    df = pd.DataFrame(rows)
    summary = cell_summary(df)
    memory = summary[summary["model"] == "memory"]
    assert list(memory["val/bleu"]) == [99.5, 94.8]
    assert list(memory["K"]) == [3, 10]
    assert sorted(summary["model"].unique()) == ["bahdanau (baseline)", "memory"]
    chosen = chosen_trials(rows, "val/bleu", "max")
    assert set(df[df["val/bleu"].isin(memory["val/bleu"])]["trial_id"]) == chosen
    table = length_table(df)
    assert list(table.iloc[:, 0]) == ["bahdanau (baseline)", "memory"]


def test_a_searched_sweeps_table_says_the_values_each_cell_chose():
    """The sampled values of the chosen trials beside their figures: once where every seed chose
    the same, each seed's where they differ; a line under the table in the paper's layouts."""
    rows = [
        _row("a", "c1", 0, 20.0, chosen=True, **{"test/bleu": 18.0, "param:model.K": 7.0}),
        _row("b", "c1", 1, 22.0, chosen=True, **{"test/bleu": 19.0, "param:model.K": 7.0}),
        _row("c", "c2", 0, 30.0, chosen=True, **{"test/bleu": 28.0, "param:model.K": 5.0}),
        _row("d", "c2", 1, 32.0, chosen=True, **{"test/bleu": 29.0, "param:model.K": 3.0}),
        _row("e", "c2", 1, 1.0, chosen=False, **{"test/bleu": None, "param:model.K": 9.0}),
    ]
    for r in rows:
        r["param:model.lr"] = 0.0011784 if r["cell"] == "c1" else None
    df = pd.DataFrame(rows)
    ((heading, text),) = heldout_sections(df)
    assert "by cell" in heading
    lines = text.splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")][:3] == [
        "cell",
        "chosen values",
        "valid",
    ]
    cells = {
        row[0]: row[1]
        for row in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])
        if row[0] in ("c1", "c2")
    }
    assert cells == {"c1": "K=7, lr=0.001178", "c2": "seed 0: K=5; seed 1: K=3"}
    # a grid sweep has no sampled values, and no such column
    ((_, plain),) = heldout_sections(df.drop(columns=["param:model.K", "param:model.lr"]))
    assert "chosen values" not in plain
    # the paper's layouts keep their columns and say the values under the table
    df["model"], df["length"] = "memory", [10, 10, 20, 20, 20]
    ((heading, wide),) = heldout_sections(df)
    assert "Table 1 layout" in heading
    assert (
        "The chosen values of each cell:\n- c1: K=7, lr=0.001178\n- c2: seed 0: K=5; seed 1: K=3"
        in wide
    )
