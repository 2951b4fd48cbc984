"""The sweep-file keys of choosing on validation and reporting on held-out data: the held-out
evaluation after selection (``heldout``, run by :mod:`sweeps.heldout`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sweeps.spec.search_schema import _Strict


class HeldoutSpec(_Strict):
    """The held-out evaluation after training (:mod:`sweeps.heldout`): once the sweep's metric has
    chosen each cell's configuration on validation, the final checkpoints of the chosen trials are
    evaluated once on the task's test split (the copy task's own held-out draw; WMT's
    ``test_prefix``: newstest2016) and results.csv gains ``test/bleu`` (and ``test/sacrebleu``)."""

    enabled: bool = Field(
        True,
        description="Evaluate the chosen trials on the test split after training (results.csv's "
        "test/bleu, results.md's held-out table).",
    )
    trials: Literal["chosen", "all"] = Field(
        "chosen",
        description="`chosen`: only the trials the summary rule picks on validation (per cell "
        "and seed); `all`: every finished trial (costs more, and invites choosing on test).",
    )
