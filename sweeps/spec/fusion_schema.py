"""The sweep file's ``fusion`` key: trials of one mechanism and one set of sizes train as one fused
model (:mod:`lightning_modules.fused`), each still a trial of its own.

    fusion: {max_members: 3}   # at most 3 trials in a fused group
    fusion: off                # every trial alone, as before

Which trials fuse is decided before Ray starts (:func:`sweeps.plan.fusion.plan_fusion`);
``--dry-run`` prints the groups.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from sweeps.spec.search_schema import _Strict

#: the cap when a sweep file sets none, by where its trials train (``resources.gpu`` > 0: gpu).
#: CPU: benchmarks/fusion.py's throughput is best at 2 to 4 members in each of its 4 cells and
#: lower at 8 in all 4 (benchmarks/README.md, "Fused trials"). GPU (an H100): a fused group's
#: step takes about as long at 16 members as at 1 (paper_copy, L=40: 0.152 s against 0.134 s),
#: so 16 members train 9.2x the member-steps per GPU-second of one trial alone
#: (benchmarks/README.md, "On a GPU"; more than 16 was not measured).
DEFAULT_MAX_MEMBERS = {"cpu": 4, "gpu": 16}


class FusionSpec(_Strict):
    """Horizontal fusion: trials of one mechanism with the same sizes, batch size and training
    loop train as one model with a leading member dimension, up to ``max_members`` at once. What
    may differ member by member (memory attention's K, scoring pair and position encodings, the
    length, other mechanisms' switch-only options) is padded and masked; the plan joins such
    trials where the device's measured step costs say it pays (docs/fusion.md). Each member keeps its own seed, data order, learning
    rate, Optuna trial, W&B run, checkpoint and row in results.csv (``fused_with`` names its group).
    ``fusion: off`` is ``max_members: 1``."""

    max_members: int | None = Field(
        None,
        ge=1,
        description="Most trials in one fused group; 1 (or `fusion: off`) trains every trial alone. "
        "Unset: the device's default (4 on CPU, 16 on a GPU: `sweeps.spec.fusion_schema."
        "DEFAULT_MAX_MEMBERS`).",
    )

    @model_validator(mode="before")
    @classmethod
    def _on_off(cls, value: Any) -> Any:
        """``fusion: off`` (YAML reads it as false), ``fusion: on`` (true) and their strings."""
        if value is False or (isinstance(value, str) and value.lower() in ("off", "false", "no")):
            return {"max_members": 1}
        if value is True or (isinstance(value, str) and value.lower() in ("on", "true", "yes")):
            return {}
        if value is None:
            return {}
        if not isinstance(value, dict | FusionSpec):  # a word, a number (fusion: 4), a list
            members = value if isinstance(value, int) and value >= 1 else "N"
            raise ValueError(
                f"{value!r} is neither off nor a mapping; write `fusion: off` or "
                f"`fusion: {{max_members: {members}}}`"
            )
        return value

    def cap(self, device: str) -> int:
        """The most members a group may have on ``device`` (``cpu`` or ``gpu``)."""
        return self.max_members if self.max_members is not None else DEFAULT_MAX_MEMBERS[device]
