"""The paired bootstrap's text on results.md (:func:`sweeps.report.findings.seed_sections`): its
table, and which rows of a ``paired_bootstrap.csv`` written earlier still compare the trials
results.csv chooses now (the statistics: :mod:`sweeps.report.stats`)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from sweeps.layout import BOOTSTRAP_FILE, HYPOTHESES_FILE
from sweeps.report.stats import BOOTSTRAP_TRIALS

#: the paired bootstrap's section heading (:func:`sweeps.report.findings.seed_sections`)
BOOTSTRAP_HEADING = "Best memory model vs Bahdanau: paired bootstrap on the validation sentences"


def current_bootstrap(
    cached: pd.DataFrame, chosen: dict[tuple[Any, str], dict[int, tuple[dict, dict]]]
) -> tuple[pd.DataFrame, list[str]]:
    """(the rows of ``cached``, a paired_bootstrap.csv written when the trials' hypotheses were
    there, that still compare the trials results.csv chooses now; each dropped row's length
    and memory model). ``chosen``: :func:`~sweeps.report.stats.bootstrap_choice`. A row naming
    its trials (``memory_trials``, ``bahdanau_trials``) is kept when each is the chosen trial of
    its seed; an older row, naming only its seeds, when its memory model is still the best at
    its length and both models finished each of its seeds."""
    key = "pair" if "pair" in cached else "length"
    chosen_by = {(str(length), memory): pairs for (length, memory), pairs in chosen.items()}
    kept, stale = [], []
    for r in cached.to_dict("records"):
        pairs = chosen_by.get((str(r[key]), str(r["memory"])), {})
        seeds = [int(float(s)) for s in str(r["seeds"]).split(",") if s.strip()]
        named = [r.get(c) for c in BOOTSTRAP_TRIALS]
        if all(isinstance(t, str) and t for t in named):
            ids = [t.split(",") for t in named]
            current = len(seeds) == len(ids[0]) == len(ids[1]) and all(
                s in pairs and [str(x.get("trial_id")) for x in pairs[s]] == [m, b]
                for s, m, b in zip(seeds, *ids)
            )
        else:  # an older file: its seeds, not its trials
            current = bool(seeds) and all(s in pairs for s in seeds)
        if current:
            kept.append(r)
        else:
            stale.append(f"{'L=' if key == 'length' else ''}{r[key]} {r['memory']}")
    return pd.DataFrame(kept, columns=cached.columns), stale


def stale_note(stale: list[str]) -> str:
    """What the page says of the cached paired bootstrap rows it left out (:func:`current_bootstrap`)."""
    return (
        f"Left out of the paired bootstrap: {len(stale)} row(s) of {BOOTSTRAP_FILE} "
        f"({'; '.join(stale)}), written when the trials' hypotheses were there, compare trials "
        "that are no longer the ones results.csv chooses (a trial gone, failed or outdone since). "
        f"A report built where the trials' `{HYPOTHESES_FILE}` are computes the table again."
    )


def bootstrap_markdown(table: pd.DataFrame) -> str:
    # by pair (a translation sweep), else by length; an older paired_bootstrap.csv kept a
    # translation sweep's pairs under "length"
    key = "pair" if "pair" in table else "length"
    pairs = key == "pair" or table[key].map(lambda v: isinstance(v, str)).any()
    lines = [
        f"| {'pair' if pairs else 'L'} | best memory | − Bahdanau (BLEU) | 95% interval | p | "
        "sentences (seeds) |",
        "| ---: | --- | ---: | --- | ---: | --- |",
    ]
    for r in table.to_dict("records"):
        lines.append(
            f"| {r[key]} | {r['memory']} | {r['diff']:+.2f} | [{r['low']:+.2f}, {r['high']:+.2f}] "
            f"| {r['p']:.3f} | {r['sentences']} ({_seed_list(r['seeds'])}) |"
        )
    return "\n".join(lines)


def _seed_list(seeds: Any) -> str:
    """``seed 0`` or ``seeds 0,1,2``: a bare ``(0)`` beside a count reads as no seeds."""
    text = str(seeds)
    return f"seeds {text}" if "," in text else f"seed {text}"
