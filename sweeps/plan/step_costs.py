"""What a training step costs, by device, from the measured table beside this module
(``step_costs.json``): the plan's cost model for joining cells into fused groups.

    costs = device_costs("cpu")
    costs.group_seconds("tiny", [Member(length=20, padded=16), Member(length=40, padded=64)])

The figures are measured (each device's entry says where, when and with which command); between
and beyond them the model interpolates, and where nothing was measured it assumes, and says so:

- **CPU**: a group of M members at length L costs M steps of one unfused trial at L (measured at
  L=10 and 40, linear in L between and beyond) over the fused speedup (:func:`cpu_speedup`); every member
  then computes at the group's largest length and K (memory attention's attention part grows with
  K: ``k_padding_per_slot``, measured padding K=1 to 64 in one group), and a group whose members
  switch functions (scoring, position encoding) computes both branches (``member_switches``).
  Padding is not free on a CPU, so the cost model keeps cells apart where it costs more than it
  saves.
- **GPU**: a fused step is launch-bound: its time is the measured fused step at M members
  (linear between the measured counts, never below one measured at fewer:
  :func:`fused_envelope`), proportional to the length (a step is a loop over time steps; only
  L=40 was measured), whatever the members' K or switches. So on a GPU every member
  axis joins, up to the cap, and lengths join where one group's step costs less than the groups
  apart.

A preset the table does not hold (or holds without the figure asked for) is costed as the measured
preset nearest in hidden size that has it; a GPU the table does not hold, or holds without a step
cost, as the measured GPU whose name is nearest (:func:`device_costs` says which).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_modules.presets import PRESETS

TABLE = Path(__file__).with_name("step_costs.json")
#: the memory-attention K the table's steps were measured at
MEASURED_K = 16
#: the batch size the table's steps were measured at, per preset (the sweep files', the table's
#: ``about``: benchmarks/fusion.py's ``TRAINING``), in float32
MEASURED_BATCH = {"tiny": 64, "paper_copy": 128}
#: the model sizes a preset sets (:data:`~lightning_modules.presets.PRESETS`): one of them set
#: otherwise makes a model the table has no step of
SIZE_KEYS = ("embedding_dim", "hidden_size", "encoder_layers", "decoder_layers")


@functools.cache
def table() -> dict[str, Any]:
    """The measured table, read once."""
    return json.loads(TABLE.read_text())


@dataclass(frozen=True)
class Member:
    """What one member brings to its group's cost: the length it trains at, its padded option's
    value (memory attention's K; None for a mechanism without one) and its switch options (the
    values that pick a function per member: scoring pair, position encoding)."""

    length: int
    padded: int | None = None
    switches: tuple[Any, ...] = ()


def interpolate(points: Mapping[str, float], x: float) -> float:
    """``points`` ({x: y}, keys as strings) at ``x``: linear between the two nearest measured
    points, continued along the nearest segment beyond them; one point: that value."""
    xs = sorted((float(k), float(v)) for k, v in points.items())
    if len(xs) == 1:
        return xs[0][1]
    if x <= xs[0][0]:
        (x0, y0), (x1, y1) = xs[0], xs[1]
    elif x >= xs[-1][0]:
        (x0, y0), (x1, y1) = xs[-2], xs[-1]
    else:
        i = next(i for i in range(1, len(xs)) if xs[i][0] >= x)
        (x0, y0), (x1, y1) = xs[i - 1], xs[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class DeviceCosts:
    """One device's entry of the table and the cost model on it (module docstring).

    Attributes:
        device: ``cpu`` or ``gpu``; name: the table's entry used; note: why that entry stands in
            for the device asked about (None when it is that device).
    """

    device: str
    name: str
    note: str | None = None

    @property
    def entry(self) -> dict[str, Any]:
        return table()["devices"][self.name]

    def preset_entry(self, preset: str, field: str | None = None) -> tuple[str, dict[str, Any]]:
        """The measured preset a model of ``preset`` is costed as: itself where the table holds
        it (with ``field`` at some length, when given), else the nearest in hidden size that does.
        A GPU run measures the fused step at one preset and the graphs and sharing at two: the
        other preset's entry holds no step to cost."""
        measured = {
            name: entry
            for name, entry in self.entry["presets"].items()
            if field is None or any(field in cell for cell in entry["lengths"].values())
        }
        if preset in measured:
            return preset, measured[preset]
        hidden = PRESETS.get(preset, PRESETS["paper_copy"])["hidden_size"]
        nearest = min(measured, key=lambda p: abs(PRESETS[p]["hidden_size"] - hidden))
        return nearest, measured[nearest]

    def _at_length(self, preset: str, field: str, length: float, hold: bool = False) -> Any:
        """``field`` of the measured lengths, at ``length``: numbers interpolated over the
        lengths, per-member tables interpolated point by point. ``hold``: beyond the measured
        lengths, the nearest one's value (a ratio, which a line through two noisy measurements
        would carry anywhere: the CPU's fused speedups of 1.10 and 1.03 at lengths 10 and 40 went
        below 1 past length 90, and kept a cell's seeds apart there)."""
        lengths = self.preset_entry(preset, field)[1]["lengths"]
        values = {L: v[field] for L, v in lengths.items() if field in v}
        if hold:
            measured = [float(L) for L in values]
            length = min(max(length, min(measured)), max(measured))
        first = next(iter(values.values()))
        if isinstance(first, dict):
            keys = first.keys()
            return {k: interpolate({L: v[k] for L, v in values.items()}, length) for k in keys}
        return interpolate(values, length)

    def _proportional(self, preset: str, field: str, length: float) -> Any:
        """``field`` measured at one length (the GPU's), scaled in proportion to ``length``."""
        lengths = self.preset_entry(preset, field)[1]["lengths"]
        L, values = next((int(L), v[field]) for L, v in lengths.items() if field in v)
        if isinstance(values, dict):
            return {k: v * length / L for k, v in values.items()}
        return values * length / L

    def unfused_seconds(self, preset: str, length: int) -> float:
        """One unfused trial's step at ``length``."""
        if self.device == "gpu":
            return self._proportional(preset, "unfused_s", length)
        return max(self._at_length(preset, "unfused_s", length), 1e-6)

    def group_seconds(self, preset: str, members: Sequence[Member]) -> float:
        """One step of a fused group of ``members`` (seconds of the device: a core's on a CPU, the
        GPU's on a GPU). A group of one member is a trial alone: it trains unfused."""
        length = max(m.length for m in members)
        M = len(members)
        if self.device == "gpu":
            if M == 1:
                return self.unfused_seconds(preset, length)
            return max(fused_envelope(self._proportional(preset, "fused_s", length), M), 1e-6)
        base = self.unfused_seconds(preset, length)
        if M > 1:
            base *= M / cpu_speedup(self._at_length(preset, "fused_speedup", length, hold=True), M)
        padded = [m.padded for m in members if m.padded is not None]
        if padded:  # every member computes at the group's largest K (a trial alone at its own)
            alpha = self.entry["k_padding_per_slot"]
            base *= (1 + alpha * (max(padded) - 1)) / (1 + alpha * (MEASURED_K - 1))
        if len({m.switches for m in members}) > 1:
            base *= 1 + self.entry["member_switches"]
        return base


def fused_envelope(measured: Mapping[str, float], members: int) -> float:
    """A GPU group's step at ``members`` from the steps measured by member count: interpolated
    (:func:`interpolate`), and never below a step measured at fewer members. A group does the work
    of a smaller one and more, so a measured step that falls with the count (the H200's: 0.118 s at
    1 member, 0.104 s at 16) is the spread of single measurements, and taken as it stands it would
    make the plan fill every group to the cap, cutting cells' seeds apart to save nothing.

    Past the largest group measured the step grows in proportion to the members (no gain per
    member beyond what was measured): the nearly flat segment below it, continued, would cost a
    group of 84 on the H100 as 1.4 times one of 16, where the H200, measured that far, takes 2.7
    times its 16-member step for 64 members."""
    top = max(int(k) for k in measured)
    if members > top:
        return fused_envelope(measured, top) * members / top
    floor = max((v for k, v in measured.items() if int(k) <= members), default=0.0)
    return max(interpolate(measured, members), floor)


def cpu_speedup(measured: Mapping[str, float], members: int) -> float:
    """The fused speedup per member of a CPU group of ``members`` (2 or more), from the measured
    speedups by member count: one figure, their mean, from 2 to 4 members (the measured rounds of
    one count spread wider than the counts differ: 1.21-1.90 at M=3), then falling linearly to
    the figure measured at 8."""
    small = [v for k, v in measured.items() if 2 <= int(k) <= 4]
    flat = sum(small) / len(small)
    if members <= 4:
        return flat
    at8 = measured.get("8", flat)
    return max(flat + (at8 - flat) * (members - 4) / 4, 1e-3)


#: what a device's entry must hold for the plan to cost groups and lone trials on it
STEP_FIELDS = ("unfused_s", "fused_s")


def costs_steps(entry: Mapping[str, Any]) -> bool:
    """Whether a device's entry holds each of :data:`STEP_FIELDS` at some preset and length (an
    entry written from a GPU run without its fusion phase holds only graphs and sharing)."""
    cells = [c for p in entry.get("presets", {}).values() for c in p.get("lengths", {}).values()]
    return all(any(field in cell for cell in cells) for field in STEP_FIELDS)


def gpu_names() -> list[str]:
    """The GPUs the table holds a step cost of, in its order."""
    return [n for n, e in table()["devices"].items() if n != "cpu" and costs_steps(e)]


def device_costs(device: str, gpu_name: str | None = None) -> DeviceCosts:
    """The cost model of ``device`` (``cpu``, or ``gpu`` with the GPU's name when known)."""
    if device == "cpu":
        return DeviceCosts("cpu", "cpu")
    names = gpu_names()
    if gpu_name in names:
        return DeviceCosts("gpu", gpu_name)
    nearest = _nearest_gpu(gpu_name, names)
    if gpu_name and _short_for(gpu_name, nearest, names):  # H200 for the NVIDIA H200
        return DeviceCosts("gpu", nearest)
    why = (
        f"{gpu_name} is not in the table: the {nearest} stands in"
        if gpu_name
        else "no GPU here to name: the table's first GPU stands in; resources.gpu_kind names "
        "the cluster's, e.g. --set 'resources.gpu_kind=NVIDIA H200'"
    )
    return DeviceCosts("gpu", nearest, why)


def _nearest_gpu(name: str | None, names: list[str]) -> str:
    """The table's GPU whose name shares the most words with ``name`` (the first on a tie)."""
    if not name:
        return names[0]
    words = set(name.lower().split())
    return max(names, key=lambda n: (len(words & set(n.lower().split())), -names.index(n)))


def _short_for(name: str, nearest: str, names: list[str]) -> bool:
    """Whether ``name`` is a short form of ``nearest`` alone among ``names``: every word of it in
    ``nearest``'s name (``H200``, ``nvidia h100``) and in no other's."""
    words = set(name.lower().split())
    holding = [n for n in names if words <= set(n.lower().split())]
    return holding == [nearest]
