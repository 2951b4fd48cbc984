"""How the checks of tests/test_internals*.py fail: loudly, naming the library, its installed
version, the version the code was written against, the internal that moved and the files that
use it (each check is an entry of docs/internals.md, by its anchor)."""

from __future__ import annotations

import functools
import inspect
import platform
from collections.abc import Callable
from importlib import metadata
from typing import Any

import pytest

#: the release of each library whose internals the code was written against (the headings of
#: docs/internals.md say the same; tests/test_internals.py holds them equal)
WRITTEN_AGAINST = {
    "ray": "2.60.0",
    "wandb": "0.31.0",
    "lightning": "2.6.6",
    "torch": "2.13.0",
    "optuna": "5.0.0",
    "sacrebleu": "2.6.0",
    "pytest-xdist": "3.8.0",
    "python": "3.11",
}


def installed(library: str) -> str:
    if library == "python":
        return platform.python_version()
    try:
        return metadata.version(library)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def internal(check_id: str, library: str, used_by: str) -> Callable:
    """Mark a test as the check of one internal: any error in it (an assert, a missing attribute,
    a failed import) becomes one message that says what moved and where to look."""

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def check(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 -- every way an internal can move
                moved = f"{type(exc).__name__}: {exc}"
            pytest.fail(  # outside the except: the message alone, not the chained traceback
                f"{library} {installed(library)} (this project was written against {library} "
                f"{WRITTEN_AGAINST[library]}): the internal '{check_id}' has moved: {moved}\n"
                f"It is used by {used_by}. docs/internals.md#{check_id} says what relies on it "
                f"and what breaks; adapt that code, or bound {library} below "
                f"{installed(library)} in pyproject.toml.",
                pytrace=False,
            )

        check.internal = (check_id, library, used_by)  # type: ignore[attr-defined]
        return check

    return decorate


def source(obj: Any) -> str:
    """The source of a library function or class, to check that it still does what is relied on."""
    return inspect.getsource(obj)


def strings_in(path: Any, needle: bytes) -> list[str]:
    """The printable strings of a compiled file that contain ``needle`` (what ``strings`` shows)."""
    data = open(path, "rb").read()

    def printable(b: int) -> bool:
        return 0x20 <= b < 0x7F or b == 0x09

    found, at = [], data.find(needle)
    while at >= 0:
        start, end = at, at
        while start > 0 and printable(data[start - 1]):
            start -= 1
        while end < len(data) and printable(data[end]):
            end += 1
        found.append(data[start:end].decode("ascii"))
        at = data.find(needle, end)
    return found
