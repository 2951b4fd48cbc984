"""Write a GPU's measured training-step costs into the plan's cost table
(``sweeps/plan/step_costs.json``), from the outputs of ``benchmarks/gpu_benchmarks.py``.

    python benchmarks/step_costs.py OUT                      # print the GPU's entry
    python benchmarks/step_costs.py OUT --write              # and put it in the table

``OUT`` is the folder ``gpu_benchmarks.py --out`` wrote: each phase's ``<phase>.out`` ends with its
benchmark's JSON line. The entry is keyed by the GPU's name (``environment``'s, as ``nvidia-smi``
and torch name it), and is written over that GPU's entry in the table. It holds, per preset and
length: ``unfused_s`` and ``fused_s`` by members (``fusion``: ``fused_graphed_s`` too where the run
graphed the fused step), ``graphed_speedup`` (``cuda_graphs``), the steps per GPU-second of P processes
sharing the GPU over one eager process alone (``share``: ``shared_eager_timesliced``,
``shared_graphed_timesliced``; ``share_mps``: ``shared_eager_mps``, ``shared_graphed_mps``); and
``fused_mib_per_member``, the fused group's peak memory over its members (for a reader weighing
memory; the plan does not read it); and ``measured``: the GPU, driver, torch, date and commands.
Phases that did not run leave their fields out (the plan does not choose what the table does not
hold), and ``--write`` keeps the GPU's earlier figures of those phases. A run on the CPU, or one
that with the earlier entry still holds no training step (``fusion``), is refused.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the plan's reader of the table

from sweeps.plan.step_costs import STEP_FIELDS, TABLE, costs_steps  # noqa: E402


def last_json(path: Path) -> dict[str, Any] | None:
    """The last JSON object line of a phase's output, or None (a phase that did not run)."""
    if not path.is_file():
        return None
    for line in reversed(path.read_text(encoding="utf-8", errors="replace").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def _cell(entry: dict[str, Any], preset: str, length: Any) -> dict[str, Any]:
    return (
        entry.setdefault("presets", {})
        .setdefault(preset, {})
        .setdefault("lengths", {})
        .setdefault(str(length), {})
    )


def _fusion_command(fusion: dict[str, Any], device: str) -> str:
    """fusion.py's command line as its JSON line's settings give it."""
    settings = fusion.get("settings") or {}
    words = [f"fusion.py --device {device}"]
    for flag, key in (("--preset", "presets"), ("--lengths", "lengths"), ("--members", "members")):
        if settings.get(key):
            words.append(f"{flag} " + " ".join(str(v) for v in settings[key]))
    if settings.get("repeats"):
        words.append(f"--repeats {settings['repeats']}")
    if settings.get("graphs"):
        words.append("--graphs")
    return " ".join(words)


def device_entry(out: Path, date: str | None = None) -> tuple[str, dict[str, Any]]:
    """The GPU's name and its table entry, from the phases' outputs in ``out``."""
    env = last_json(out / "environment.out") or {}
    fusion = last_json(out / "fusion.out")
    if (fusion or {}).get("device", "cuda") != "cuda" or (
        env and not env.get("gpu") and not fusion
    ):
        raise SystemExit(
            f"{out}: these phases ran on the CPU (gpu_benchmarks.py --device cpu), not a GPU: the "
            "table's GPU entries come from a run on the GPU; its CPU entry is fusion.py's full grid "
            "(benchmarks/README.md)"
        )
    name = env.get("gpu") or ((fusion or {}).get("machine") or {}).get("device_name")
    if not name:
        raise SystemExit(f"{out}: no GPU named (environment.out and fusion.out are missing)")
    entry: dict[str, Any] = {}
    ran = []
    device = (fusion or {}).get("device", "cuda")
    if fusion:
        ran.append(_fusion_command(fusion, device))
        for row in fusion.get("rows", []):
            cell = _cell(entry, row["preset"], row["length"])
            if int(row["members"]) == 1:
                cell["unfused_s"] = row["unfused_step_seconds"]
            cell.setdefault("fused_s", {})[str(row["members"])] = row["fused_step_seconds"]
            if row.get("fused_graphed_step_seconds"):
                cell.setdefault("fused_graphed_s", {})[str(row["members"])] = row[
                    "fused_graphed_step_seconds"
                ]
            if row.get("fused_peak_mib"):
                cell["fused_mib_per_member"] = round(row["fused_peak_mib"] / row["members"])
    graphs = last_json(out / "cuda_graphs.out")
    if graphs:
        ran.append(f"cuda_graphs.py --device {graphs.get('device', device)}")
        for row in graphs.get("rows", []):
            preset, length = row["cell"].split("/L")
            if row.get("graphed_step_seconds"):
                speedup = row["eager_step_seconds"] / row["graphed_step_seconds"]
                _cell(entry, preset, length)["graphed_speedup"] = round(speedup, 3)
    for phase, how in (("share", "timesliced"), ("share_mps", "mps")):
        shared = last_json(out / f"{phase}.out")
        if not shared:
            continue
        ran.append(f"gpu_share.py ({'under MPS' if how == 'mps' else 'time-sliced'})")
        length = (shared.get("settings") or {}).get("length", 40)
        for key, value in shared.get("speedup", {}).items():
            preset, mode, processes = key.split("/")
            field = f"shared_{mode}_{how}"
            _cell(entry, preset, length).setdefault(field, {})[processes.lstrip("P")] = value
    smi = str(env.get("nvidia_smi") or "")
    driver = smi.split(",")[0].strip() if smi else ((fusion or {}).get("cuda") or {}).get("driver")
    torch = env.get("torch") or (fusion or {}).get("torch")
    entry["measured"] = (
        f"{name}, driver {driver}, torch {torch}, {date or dt.date.today().isoformat()}: "
        + "; ".join(ran)
        + " (benchmarks/gpu_benchmarks.py)"
    )
    return name, {"measured": entry.pop("measured"), **entry}


def merged(entry: dict[str, Any], earlier: dict[str, Any] | None) -> dict[str, Any]:
    """``entry`` over the GPU's ``earlier`` one: each figure this run measured replaces the
    earlier one, and those it did not measure (a phase not run this time) are kept, which
    ``measured`` then says."""
    if not earlier:
        return entry
    out = json.loads(json.dumps(earlier))
    kept = False
    for preset, measured in entry.get("presets", {}).items():
        for length, cell in measured["lengths"].items():
            old = _cell(out, preset, length)
            kept |= bool(set(old) - set(cell))
            old.update(cell)
    kept |= any(
        set(old["lengths"]) - set(entry.get("presets", {}).get(p, {}).get("lengths", {}))
        for p, old in out.get("presets", {}).items()
    )
    out["measured"] = entry["measured"] + (
        f"; the figures this run did not measure are kept from: {earlier['measured']}"
        if kept
        else ""
    )
    return {"measured": out.pop("measured"), **out}


def write(name: str, entry: dict[str, Any], table: Path = TABLE) -> dict[str, Any]:
    """Put ``entry`` in the table as GPU ``name``'s, over its earlier one (:func:`merged`); returns
    what was written. An entry the plan could not cost a step with (no fusion phase ran, and
    none did before) is refused."""
    data = json.loads(table.read_text())
    entry = merged(entry, data["devices"].get(name))
    if not costs_steps(entry):
        raise SystemExit(
            f"the {name}'s entry would hold no training step to cost ({', '.join(STEP_FIELDS)}: "
            "the fusion phase's): run gpu_benchmarks.py with its fusion phase into the same --out "
            "folder, then write again"
        )
    data["devices"][name] = entry
    table.write_text(json.dumps(data, indent=2) + "\n")
    return entry


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the folder gpu_benchmarks.py --out wrote")
    p.add_argument("--write", action="store_true", help="put the entry in the plan's table")
    p.add_argument("--table", type=Path, default=TABLE)
    args = p.parse_args(argv)
    made_by = "the folder comes from python benchmarks/gpu_benchmarks.py --out DIR, run on the GPU"
    if not args.out.exists():
        p.error(f"{args.out}: no such folder; {made_by}")
    if not args.out.is_dir():
        p.error(f"{args.out} is a file, not a folder; {made_by}")
    name, entry = device_entry(args.out)
    print(json.dumps({"device": name, **entry}))
    if args.write:
        entry = write(name, entry, args.table)
        print(f"wrote the {name}'s entry into {args.table}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
