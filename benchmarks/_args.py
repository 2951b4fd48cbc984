"""Argparse types shared by the benchmark scripts: a bad value is refused in one line
(``script: error: argument --x: ...``, exit 2) when the command line is read, before anything
is measured. What only the script can judge after (a device torch cannot use, more cores than
the process may use) is refused the same way, by :func:`refusal`.

Import them as the scripts import their other siblings (``from _args import positive_int``,
after putting this folder on ``sys.path``). Importing this file is cheap (no torch): the
mechanism check imports the attention registry only when it runs.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a script run as a file on a machine without the install
    sys.path.insert(0, str(ROOT))

from sweeps.assignments import AssignmentError, parse_assignments  # noqa: E402
from sweeps.layout import nonnegative_int, positive_int  # noqa: E402

#: short names the benchmarks take for registered mechanisms
ALIASES = {"luong": "luong_general", "local": "local_p"}

__all__ = [
    "ALIASES",
    "mechanism_spec",
    "nonnegative_int",
    "positive_float",
    "positive_int",
    "preset_name",
    "quick_settings",
    "refusal",
    "split_mechanism",
    "refuse_unbuildable",
]


def refusal(message: str) -> SystemExit:
    """A command line refused after argparse read it, as argparse refuses one: ``script: error:
    MESSAGE`` on stderr and exit status 2. Raise what it returns."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr, flush=True)
    return SystemExit(2)


def quick_settings(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    quick: dict[str, Any],
    argv: Sequence[str] | None,
) -> None:
    """``--quick``: the smoke's settings (``quick``, by destination) for every option the command
    line (``argv``; None: ``sys.argv``) does not give; an option given keeps its value, even one
    given at its default. (The command line is read again with a marker for each default.)"""
    unset = object()
    saved = {key: parser.get_default(key) for key in quick}
    parser.set_defaults(**dict.fromkeys(quick, unset))
    try:
        seen = parser.parse_args(argv)
    finally:
        parser.set_defaults(**saved)
    for key, value in quick.items():
        if getattr(seen, key) is unset:
            setattr(args, key, value)


def positive_float(text: str) -> float:
    """An argparse ``type`` for an amount above 0 (seconds of a budget): finite, not 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
    return value


def preset_name(text: str) -> str:
    """An argparse ``type`` for a model preset: one of ``lightning_modules.presets.PRESETS``."""
    from lightning_modules.presets import get_preset

    try:
        get_preset(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def split_mechanism(spec: str) -> tuple[str, dict[str, Any]]:
    """``"memory:K=32,position_encoding=true"`` -> ("memory", {"K": 32, "position_encoding": True});
    an alias (:data:`ALIASES`) becomes its registered name. Raises ValueError for an option that
    is not ``key=value``."""
    name, _, rest = spec.partition(":")
    name = ALIASES.get(name.strip(), name.strip())
    try:
        given = parse_assignments(
            filter(None, (p.strip() for p in rest.split(","))), value=_parse_value
        )
    except AssignmentError as exc:
        raise ValueError(
            f"bad mechanism option {exc.item!r} in {spec!r}: expected key=value"
        ) from None
    return name, given


def _parse_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def mechanism_spec(text: str) -> str:
    """An argparse ``type`` for a mechanism ``name[:key=value,...]`` (:func:`split_mechanism`):
    the name registered (``ATTENTION_REGISTRY``) or an alias, every key one of its options
    (``attention_options``). Returns the spec as given (the scripts label their rows with it)."""
    from lightning_modules.attention import attention_options

    try:
        name, given = split_mechanism(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    try:
        allowed = attention_options(name)
    except ValueError as exc:  # an unknown name: the registry's message lists the valid ones
        aliases = ", ".join(f"{short} = {full}" for short, full in ALIASES.items())
        raise argparse.ArgumentTypeError(f"{exc} (aliases: {aliases})") from None
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r}: attention {name!r} has no option(s) {', '.join(unknown)}; it accepts: "
            f"{', '.join(allowed) or '(no options)'}"
        )
    return text


def refuse_unbuildable(
    parser: argparse.ArgumentParser, specs: list[str], build: Callable[[str], object]
) -> None:
    """Build each mechanism's model once, as the benchmark will (``build(spec)``), and refuse a
    spec whose option values the model rejects (``memory:K=0``; ``luong_dot`` where the preset's
    H and D differ) as an argument error, before anything is measured."""
    for spec in specs:
        try:
            build(spec)
        except (ValueError, TypeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            parser.error(f"argument --mechanisms: {spec!r}: {first}")
