"""Attention mechanisms behind one registry: ``build_attention(name, query_dim=, memory_dim=, **options)``.

One file per mechanism or per family (``luong.py``, ``local.py``): every module of this package is
imported here, and importing it registers its mechanism(s) (``@register_attention``), so a new
file needs no import line. A file that fails to import raises an ImportError naming it.
"""

import importlib
import pkgutil

from .base import (
    ATTENTION_REGISTRY,
    DEFAULT_ATTENTION,
    Attention,
    Shared,
    attention_options,
    beam_groups,
    build_attention,
    headline_options,
    map_batch,
    register_attention,
    step_cost,
)


def _import_mechanisms() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        try:
            importlib.import_module(f"{__name__}.{info.name}")
        except Exception as exc:
            path = (
                f"{__path__[0]}/{info.name}.py" if not info.ispkg else f"{__path__[0]}/{info.name}/"
            )
            raise ImportError(
                f"attention mechanism file {path} failed to import: {type(exc).__name__}: {exc}"
            ) from exc


_import_mechanisms()

__all__ = [
    "ATTENTION_REGISTRY",
    "DEFAULT_ATTENTION",
    "Attention",
    "attention_options",
    "beam_groups",
    "build_attention",
    "headline_options",
    "map_batch",
    "Shared",
    "register_attention",
    "step_cost",
]
