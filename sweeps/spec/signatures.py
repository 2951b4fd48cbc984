"""What a spec is checked against, read from the model and data packages: the datamodules' and
Seq2SeqModule's constructor signatures (annotations with their declared ranges, and defaults),
each attention mechanism's options and headline option, and which attention configurations
construct.

Reading them means importing torch and Lightning, which is most of a large ``--dry-run``'s time
(about 4 s of 5-6 s for 10,000 cells on a 2-core machine). So they are kept on disk, in one file
keyed by a hash of the two packages' source and the torch/Lightning versions: a later dry run of
any study reads that file (milliseconds) and imports neither. Any change to the packages' source
makes a new key, so the file can never describe code that is not there. The cache is only a
cache: unreadable, unwritable or stale, it is rebuilt from the packages (or skipped) silently.

Location: ``$SWEEPS_CACHE_DIR``, else ``$XDG_CACHE_HOME/seq2seq-sweeps``, else
``~/.cache/seq2seq-sweeps``. ``SWEEPS_CACHE_DIR=off`` turns it off.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import pickle
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datamodules import TASKS as TASK_CLASSES  # task name -> datamodule class name (torch-free)

PACKAGES = ("lightning_modules", "datamodules")
FORMAT = 7  # bump when the pickled layout or its keys change


@dataclass
class Signatures:
    key: str
    datamodules: dict[str, Any]  # task -> name -> (annotation, default); or the import error's text
    module: dict[str, tuple[Any, Any]]  # Seq2SeqModule.__init__
    attention: dict[str, dict[str, tuple[Any, Any]]]  # mechanism -> option -> (annotation, default)
    headlines: dict[str, tuple[str, str]] = field(
        default_factory=dict
    )  # mechanism -> (option, meaning)
    attention_checks: dict[tuple, str | None] = field(default_factory=dict)  # see attention_problem
    step_costs: dict[tuple, float] = field(default_factory=dict)  # see step_cost
    fusion_checks: dict[tuple, str | None] = field(default_factory=dict)  # see fusion_problem
    longest_sources: dict[tuple, int | None] = field(default_factory=dict)  # see longest_source
    dirty: bool = False


_LOADED: Signatures | None = None


def cache_dir() -> Path | None:
    configured = os.environ.get("SWEEPS_CACHE_DIR")
    if configured == "off":
        return None
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "seq2seq-sweeps"


def source_key(dirs: list[Path], extra: tuple[str, ...] = ()) -> str:
    """sha256 over every ``*.py`` under ``dirs`` (path and bytes) and ``extra``."""
    h = hashlib.sha256(repr((FORMAT, sys.version_info[:2], extra)).encode())
    for d in dirs:
        for path in sorted(Path(d).rglob("*.py")):
            h.update(str(path.relative_to(d)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:24]


def _package_dirs() -> list[Path]:
    dirs = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)  # locates the package without running it
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(
                f"cannot find the {name} package (run from the repository root or install it)"
            )
        dirs.append(Path(list(spec.submodule_search_locations)[0]))
    return dirs


def _versions() -> tuple[str, ...]:
    out = []
    for dist in ("torch", "lightning"):
        try:
            out.append(f"{dist}=={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{dist}==?")
    return tuple(out)


def signatures() -> Signatures:
    """This process's signatures: from the disk cache when it matches the source, else read from
    the packages (importing them) and written to the cache."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    key = source_key(_package_dirs(), _versions())
    folder = cache_dir()
    path = folder / f"signatures-{key}.pkl" if folder else None
    if path is not None and path.exists():
        try:
            with open(path, "rb") as fh:
                loaded = pickle.load(fh)
            if isinstance(loaded, Signatures) and loaded.key == key:
                _LOADED = loaded
                return loaded
        except Exception:
            pass  # unreadable or from another layout: rebuild below
    _LOADED = _read_packages(key)
    _LOADED.dirty = True
    save()
    return _LOADED


def save() -> None:
    """Write the signatures (and the attention checks learnt since loading) if anything is new."""
    sig, folder = _LOADED, cache_dir()
    if sig is None or not sig.dirty or folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        sig.dirty = False
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".signatures-", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(sig, fh)
        os.replace(tmp, folder / f"signatures-{sig.key}.pkl")  # atomic: readers see old or new
    except Exception:
        sig.dirty = True  # a read-only home, a full disk: the cache is optional


def _read_packages(key: str) -> Signatures:
    return Signatures(key=key, **answers().read_packages())


def answers() -> Any:
    """The module that asks the model and data packages themselves (:mod:`.model_answers`), on a
    question the cache has no answer to."""
    from sweeps.spec import model_answers  # torch and Lightning: only on a cache miss

    return model_answers


# ---- what the spec checks ask ----------------------------------------------------------------


def datamodule_param_types(task_name: str) -> dict[str, Any]:
    """The task's datamodule settings: name -> annotation. Callers must not mutate it."""
    if task_name not in TASK_CLASSES:
        raise ValueError(f"unknown task {task_name!r}; valid: {', '.join(TASK_CLASSES)}")
    found = signatures().datamodules[task_name]
    if isinstance(found, str):
        raise ValueError(
            f"the {task_name} task cannot be loaded here ({found}); install its dependencies"
        )
    return {k: ann for k, (ann, _) in found.items()}


def default_attention() -> str:
    """The mechanism a model section without ``attention`` gets: Seq2SeqModule's default."""
    return signatures().module["attention"][1]


def module_signature_params() -> dict[str, tuple[Any, Any]]:
    """Seq2SeqModule's constructor arguments: name -> (annotation, default)."""
    return signatures().module


def attention_param_types(attention: str) -> dict[str, Any]:
    """The options of one attention mechanism: name -> annotation. Raises ValueError if unknown."""
    known = signatures().attention
    if attention not in known:
        raise ValueError(
            f"unknown attention {attention!r}; valid names: {', '.join(sorted(known))}"
        )
    return {k: ann for k, (ann, _) in known[attention].items()}


def headline_options() -> dict[str, tuple[str, str, Any]]:
    """Per mechanism that declares one, its headline option, its meaning and its default
    (``{"memory": ("K", "memory vectors", 32), ...}``): what
    :func:`lightning_modules.attention.headline_options` says, read without importing torch."""
    sig = signatures()
    return {
        name: (option, meaning, sig.attention[name][option][1])
        for name, (option, meaning) in sig.headlines.items()
    }


def model_identity(model: dict[str, Any]) -> dict[str, Any]:
    """``{"attention": ..., <headline option>: ...}`` of a trial's model section: its mechanism (the
    default where the section names none) and that mechanism's headline option (its default where
    the section leaves it; ``{"attention": "memory", "K": 32}``, ``{"attention": "bahdanau"}``).
    What results.csv's ``attention`` and headline columns hold, and a W&B run's config."""
    attention = model.get("attention", default_attention())
    headline = headline_options().get(attention)
    if headline is None:
        return {"attention": attention}
    option, _, default = headline
    return {"attention": attention, option: model.get(option, default)}


def frozen(d: dict) -> tuple:
    """A hashable key for a settings mapping (values that are lists or dicts by their repr), exact
    in its values' types: Python holds 64 equal to 64.0 and 1 to True, and a check that fails for
    one must not answer for the other from the cache."""
    return tuple(
        sorted(
            (
                k,
                type(v).__name__,
                v if isinstance(v, (str, int, float, bool, type(None))) else repr(v),
            )
            for k, v in d.items()
        )
    )


def attention_problem(attention: str, options: dict[str, Any], dims: tuple[int, int]) -> str | None:
    """Why the mechanism rejects ``options`` at (query, memory) sizes ``dims`` (its own message),
    or None. Each distinct configuration is constructed once, ever: the answer is cached with the
    signatures."""
    key = _mechanism_key(attention, options, dims)
    return _cached(
        "attention_checks", key, lambda: answers().attention_problem(attention, options, dims)
    )


def longest_source(attention: str, options: dict[str, Any], dims: tuple[int, int]) -> int | None:
    """The longest source (incl. EOS) the mechanism built with ``options`` attends over (its own
    ``longest_source``: luong_location's ``max_source_len``, memory attention's with position
    encodings), or None: any length (or it does not build: :func:`attention_problem` says why).
    Cached with the signatures, as :func:`attention_problem` is."""
    key = _mechanism_key(attention, options, dims)
    return _cached(
        "longest_sources", key, lambda: answers().longest_source(attention, options, dims)
    )


def _mechanism_key(attention: str, options: dict[str, Any], dims: tuple[int, int]) -> tuple:
    """A mechanism built with ``options`` at sizes ``dims``, as a cache key (1 and 1.0 apart)."""
    return (attention, frozen(options), tuple((type(d).__name__, d) for d in dims))


def _cached(table: str, key: tuple, ask: Any) -> Any:
    """The signatures' answer in ``table`` to ``key``, asked (``ask()``) and kept on a miss."""
    sig = signatures()
    answers_of = getattr(sig, table)
    if key not in answers_of:
        answers_of[key] = ask()
        sig.dirty = True
    return answers_of[key]


def step_cost(attention: str, options: dict[str, Any]) -> float:
    """The mechanism's cost per decoder step with ``options``
    (:func:`lightning_modules.attention.step_cost`), which orders a sweep's trials longest first.
    Each distinct configuration is asked once, ever: the answer is cached with the signatures, so a
    launcher that only orders trials never imports torch."""
    sig = signatures()
    key = (attention, frozen(options))
    if key not in sig.step_costs:
        sig.step_costs[key] = answers().step_cost(attention, options)
        sig.dirty = True
    return sig.step_costs[key]


def fusion_problem(model: dict[str, Any]) -> str | None:
    """Why a trial with this model section cannot train fused
    (:func:`lightning_modules.fused.unfusable_reason`'s own answer, e.g. monotonic attention forced
    to its hard mode in training), or None. Cached with the signatures, as :func:`step_cost` is."""
    sig = signatures()
    key = frozen(model)
    if key not in sig.fusion_checks:
        sig.fusion_checks[key] = answers().fusion_problem(model, sig.module)
        sig.dirty = True
    return sig.fusion_checks[key]
