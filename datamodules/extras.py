"""Packages of the project's ``data`` extra, imported where they are used, with one message when
one is missing: what needs it, then the two ways to install it."""

from __future__ import annotations

import importlib
from types import ModuleType


def import_extra(module: str, needs: str, hint: str = "") -> ModuleType:
    """Import ``module``, a package of the ``data`` extra (its import name is its pip name).

    Args:
        needs: what uses it, naming it: the message's start ("X uses <module>").
        hint: an optional last sentence (what works without it).
    Raises:
        ImportError: ``"<needs>, which is not installed: `pip install -e .[data]` (or
            `pip install <module>`). <hint>"``, chained to the original error.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{needs}, which is not installed: `pip install -e .[data]` (or `pip install {module}`)"
            + (f". {hint}" if hint else "")
        ) from err
