"""results.md's held-out section: the configuration each cell chose on validation, its validation
figure beside its test figure (the held-out stage's, :mod:`sweeps.heldout`), mean ± std over
seeds, as every table of the page shows a figure (the seed sections give the 95% intervals). In
the paper's layouts: Table 2's (a row per model, a valid and
a test column per language pair) for a sweep over ``task.pair``, Table 1's (a valid and a test
column per length) for a sweep over lengths, else one row per cell.
"""

from __future__ import annotations

import pandas as pd

from lightning_modules.metric_names import TEST_BLEU, TEST_SACREBLEU, VAL_BLEU, VAL_SACREBLEU
from sweeps.report.markdown import to_markdown
from sweeps.report.results import natural_order, param_labels, param_text
from sweeps.report.selection import seed_objective
from sweeps.report.stats import interval

HELDOUT_RULE = (
    "Chosen on validation, reported on test: per cell the trial (for each seed) or the configuration "
    "(judged on {judged_on}) that the sweep's metric ({metric}, {mode}) chose on the validation "
    "split, then its final checkpoint evaluated once on the test split ({splits}). Each figure: mean ± "
    "std over seeds, as in the tables above. {valid_is}, so it is biased upward (the "
    "best of several noisy draws); the test column is not."
)
#: what HELDOUT_RULE says a configuration was judged on, by results.csv's ``seed_objective``
JUDGED_ON = {
    "mean": "its mean over seeds",
    "lcb": "the worse end of its 95% t-interval over seeds: seeds.objective: lcb",
}


def valid_column_note(valid_col: str, metric: str) -> str:
    """What the validation column is, against the figure the choice was made on."""
    if valid_col == metric:
        return "The validation column is the figure the choice was made on"
    return (
        f"The validation column is the chosen trials' {valid_col} (the test column's metric), on "
        f"the sentences whose {metric} made the choice"
    )


CONFIRM_RULE = (
    "Confirmed on fresh seeds: after the choice, each cell's chosen configuration was trained again on "
    "seeds the search never saw (seeds.confirm; results.csv's role = confirm) and evaluated once on the "
    "test split. Those figures (the `confirm` columns) carry no selection at all, neither the "
    "choice among samples nor the luck of the selection seeds; the `chosen` columns are the selection "
    "seeds' figures of the same configuration. Each: mean ± std over its seeds."
)


def split_confirm(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the rows selection saw, the confirm trials' rows: ``role`` = ``confirm``, :mod:`sweeps.stages.confirm`)."""
    if "role" not in df:
        return df, df.iloc[0:0]
    confirm = df["role"].astype(str) == "confirm"
    return df[~confirm], df[confirm]


def _chosen(df: pd.DataFrame, tested: bool = True) -> pd.DataFrame:
    if "chosen" not in df or (tested and TEST_BLEU not in df):
        return df.iloc[0:0]
    flag = df["chosen"].astype(str).str.strip().str.lower().isin({"true", "1", "1.0"})
    return df[flag]


def _figure(values: pd.Series, seeds: int | None = None) -> str:
    """``mean ± std`` of ``values``; ``(n of N seeds)`` after it where only n of the row's
    ``seeds`` have a value (a seed whose test evaluation failed): the row's other column can
    then be over other seeds, as a decode time of fewer seeds says."""
    mean, sd, _half, n = interval(values)
    if n == 0:
        return "–"
    fewer = f" ({n} of {seeds} seeds)" if seeds is not None and n < seeds else ""
    return f"{mean:.2f}" + ("" if pd.isna(sd) else f" ± {sd:.2f}") + fewer


#: what ``(n of N seeds)`` beside a held-out figure means
FEWER_NOTE = (
    "(n of N seeds) beside a figure: its mean and spread are over the n of the cell's N chosen "
    "seeds that have that figure, so a row's valid and test columns are then over different "
    "seeds."
)


def heldout_frame(df: pd.DataFrame) -> tuple[pd.DataFrame, str, str]:
    """(one row per cell of the chosen trials: ``cell``, ``model``, ``length``, ``pair`` where
    known, ``valid``, ``test``, ``seeds``; the validation and the test column's metric names).
    WMT rows (with ``test/sacrebleu``) compare sacreBLEU, the others BLEU (tokenize=none)."""
    chosen = _chosen(df)
    sacre = TEST_SACREBLEU in chosen and chosen[TEST_SACREBLEU].notna().any()
    valid_col = VAL_SACREBLEU if sacre and VAL_SACREBLEU in chosen else VAL_BLEU
    test_col = TEST_SACREBLEU if sacre else TEST_BLEU
    labels = {c: label for c, label in param_labels(chosen).items() if chosen[c].notna().any()}
    rows = []
    for cell, group in chosen.groupby("cell", sort=False):
        first = group.iloc[0]
        seeds = int(group["seed"].nunique())
        rows.append(
            {
                "cell": cell,
                "model": first.get("model", cell),
                "length": first.get("length"),
                "pair": first.get("pair"),
                **({CHOSEN_VALUES: _chosen_values(group, labels)} if labels else {}),
                "valid": _figure(group[valid_col], seeds) if valid_col in group else "–",
                "test": _figure(group[test_col], seeds),
                "seeds": seeds,
            }
        )
    return pd.DataFrame(rows), valid_col, test_col


#: the held-out table's column of the sampled values the choice settled on (a searched sweep's)
CHOSEN_VALUES = "chosen values"


def _chosen_values(group: pd.DataFrame, labels: dict[str, str]) -> str:
    """The sampled values of a cell's chosen trials (``K=7, lr=0.003``): once where every seed
    chose the same, else each seed's (``seed 0: K=7; seed 1: K=5``)."""
    texts = {
        seed: ", ".join(
            f"{label}={param_text(row[c])}" for c, label in labels.items() if pd.notna(row[c])
        )
        or "–"
        for seed, row in zip(group["seed"], group.to_dict("records"))
    }
    if len(set(texts.values())) == 1:
        return next(iter(texts.values()))
    return "; ".join(f"seed {seed}: {text}" for seed, text in sorted(texts.items()))


def _wide(frame: pd.DataFrame, axis: str, label) -> pd.DataFrame:
    models = pd.Series(frame["model"].unique()).sort_values(key=natural_order, kind="stable")
    values = sorted(
        frame[axis].dropna().unique(), key=lambda v: natural_order(pd.Series([v])).iloc[0]
    )
    out = []
    for model in models:
        row = {"model": model}
        for v in values:
            match = frame[(frame["model"] == model) & (frame[axis] == v)]
            row[f"{label(v)} valid"] = match.iloc[0]["valid"] if not match.empty else "–"
            row[f"{label(v)} test"] = match.iloc[0]["test"] if not match.empty else "–"
        out.append(row)
    return pd.DataFrame(out)


def confirm_section(
    df: pd.DataFrame, confirm: pd.DataFrame, columns: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The confirm section (heading, Markdown): per cell the chosen configuration's figures on the
    selection seeds beside those on the confirm seeds, for each ``(label, results column)`` of
    ``columns``; none without finished confirm rows."""

    finished = confirm[confirm["status"].isin(["done", "stopped", "converged"])]
    if finished.empty:
        return []
    chosen, rows = _chosen(df, tested=False), []
    params = [c for c in finished.columns if c.startswith("param:") and c in chosen]
    for cell, group in finished.groupby("cell", sort=False):
        mine = chosen[chosen["cell"] == cell]
        if params and len(mine):  # where each seed chose its own: the confirmed one's rows
            confirmed = [None if pd.isna(v) else v for v in group.iloc[0][params]]
            mine = mine[
                [
                    [None if pd.isna(v) else v for v in values] == confirmed
                    for values in mine[params].itertuples(index=False)
                ]
            ]
        row = {"cell": cell}
        for who, frame in (("chosen", mine), ("confirm", group)):
            for label, col in columns:
                row[f"{who} {label}"] = _figure(frame[col]) if col in frame else "–"
            row[f"{who} seeds"] = int(frame["seed"].nunique())
        rows.append(row)
    table = to_markdown(pd.DataFrame(rows))
    heading = "Confirmed on fresh seeds: the chosen configurations' figures free of selection"
    return [(heading, "\n\n".join([table, CONFIRM_RULE]))]


def heldout_sections(
    df: pd.DataFrame,
    metric: str = VAL_BLEU,
    mode: str = "max",
    confirm: pd.DataFrame | None = None,
    chosen_by: tuple[str, str] | None = None,
) -> list[tuple[str, str]]:
    """The held-out section (heading, Markdown), or none when no trial was evaluated on test; then,
    with ``confirm`` rows (:func:`split_confirm`), the confirm section (:func:`confirm_section`).
    ``chosen_by``: the metric and mode the launch chose by (results.csv's ``chosen``), where a
    rebuilt report's ``metric`` differs from it; the rows are the launch's choice either way."""
    page = (metric, mode)
    if chosen_by is not None:
        metric, mode = chosen_by

    frame, valid_col, test_col = heldout_frame(df)
    more = [] if confirm is None or confirm.empty else None
    if more is None:
        columns = [("valid", valid_col), ("test", test_col)]
        if metric not in (
            valid_col,
            VAL_BLEU,
        ):  # the figure the choice was made on, and its test twin
            twin = metric.replace("val/", "test/", 1)
            columns += [(metric, metric)] + ([(twin, twin)] if twin in confirm else [])
        more = confirm_section(df, confirm, columns)
    if frame.empty:
        return more
    chosen = _chosen(df)
    splits = (
        ", ".join(sorted(chosen["test_split"].dropna().astype(str).unique()))
        if "test_split" in chosen
        else "test"
    )
    unique = lambda c: (
        c in frame and frame[c].notna().any() and not frame.duplicated(["model", c]).any()
    )  # noqa: E731
    if (
        unique("pair")
        and frame["pair"].nunique() >= 1
        and "length" in frame
        and frame["length"].nunique(dropna=False) <= 1
    ):
        table, layout = (
            _wide(frame, "pair", str),
            "the paper's Table 2 layout: valid and test per model and pair",
        )
    elif unique("length"):
        table, layout = (
            _wide(frame, "length", lambda v: f"L={int(v)}"),
            "the paper's Table 1 layout",
        )
    else:
        columns = ["cell", *([CHOSEN_VALUES] if CHOSEN_VALUES in frame else []), "valid", "test"]
        table, layout = frame[[*columns, "seeds"]], "by cell"
    missing = int(chosen[TEST_BLEU].isna().sum())
    notes = [
        f"Split of each column: `valid` = validation split ({valid_col}), `test` = held-out test split "
        f"({test_col}; {splits}).",
        HELDOUT_RULE.format(
            metric=metric,
            mode=mode,
            splits=splits,
            valid_is=valid_column_note(valid_col, metric),
            judged_on=JUDGED_ON.get(objective := seed_objective(df), f"its {objective} over seeds"),
        ),
    ]
    if CHOSEN_VALUES in frame and CHOSEN_VALUES not in table:
        notes.append(
            "The chosen values of each cell:\n"
            + "\n".join(f"- {r['cell']}: {r[CHOSEN_VALUES]}" for r in frame.to_dict("records"))
        )
    if missing:
        notes.append(
            f"{missing} chosen trial(s) have no test figure (results.csv's heldout_error says why)."
        )
    if frame[["valid", "test"]].map(lambda text: " seeds)" in str(text)).any().any():
        notes.append(FEWER_NOTE)
    if page != (metric, mode):
        notes.append(
            f"These are the launch's choices (results.csv's `chosen`, by {metric}, {mode}), the "
            f"trials evaluated on test; this page's other tables choose by {page[0]}, {page[1]}."
        )
    return [
        (
            f"Held-out test results of the chosen configurations ({layout})",
            "\n\n".join([to_markdown(table), *notes]),
        )
    ] + more
