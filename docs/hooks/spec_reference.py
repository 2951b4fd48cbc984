"""mkdocs hook: the sweep-file key reference, generated at build time from the spec's own models.

``docs/reference/sweep-file.md`` holds the placeholder line ``<!-- sweep-file-keys -->``; when
mkdocs renders that page, :func:`on_page_markdown` replaces it with :func:`sweep_file_reference`:
one table per section of ``SweepSpec`` (the pydantic model ``load_spec`` validates every sweep file
with), then the constructor arguments the ``task:``, ``model:`` and ``grid:`` sections are checked
against. Nothing here is written by hand, so the page cannot drift from what ``--dry-run`` checks.

Run it alone to see the Markdown: ``python docs/hooks/spec_reference.py``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

# Where the sweep-file package lives, newest name first (`sweeps.study` was its earlier name).
SPEC_PACKAGES = ("sweeps.spec",)

PLACEHOLDER = "<!-- sweep-file-keys -->"
PAGE = "reference/sweep-file.md"
ROOT = Path(__file__).resolve().parents[2]

# A line for each top-level key, for readers of the site. Order of preference for a key's
# description: its Field(description=...) in the schema, then this table (top level only), then the
# comments beside the field in the schema's source.
FALLBACK = {
    "name": "The sweep's name: it names the output folder `<output>/<name>/` and the W&B group.",
    "description": "Free text for readers of the sweep file; nothing reads it.",
    "task": "The task and its datamodule's settings: `name` (a task below) and the datamodule's "
    "constructor arguments.",
    "model": "`Seq2SeqModule` arguments and attention options shared by every cell "
    "(`preset`, `lr`, `attention`, `K`...).",
    "grid": "The scientific comparison: dotted keys (`task.max_length`) with lists of values are "
    "axes, crossed; `model:` holds a list of variants, concatenated. Each cell is checked "
    "against the constructors below.",
    "parameters": "Nuisance parameters Optuna samples inside each unit, in W&B Sweeps' shape: "
    "`{dotted.key: {values: [...]} | {min, max, distribution}}`.",
    "num_samples": "Optuna's budget: trials per unit (cell and seed).",
    "seeds": "Seeds; every cell runs once per seed (a unit).",
    "metric": "What trials are selected and stopped on; one metric the trials report.",
    "constraints": "Multi-objective sweeps: bounds a trial must meet to count (absolute, or "
    "relative to a baseline model of the same cell).",
    "early_terminate": "Early stopping: none (FIFO), ASHA, or the Pareto rung rule.",
    "trainer": "Lightning Trainer settings.",
    "resources": "What one trial needs.",
    "max_concurrent_trials": "Most trials running at once (default: what the cluster holds).",
    "storage": "Where Ray keeps trial folders and checkpoints.",
    "failure": "Retries of a failed trial (from its last checkpoint).",
    "budget": "What the sweep may spend over all its runs: wall-clock hours, CPU- and GPU-hours.",
    "wandb": "Weights & Biases settings.",
    "timing": "The decode-timing stage after training.",
    "heldout": "The held-out stage: the trials chosen on validation evaluated once on the test split.",
    "chaos": "Fault injection, for testing recovery.",
    "profiles": "Named overrides of dotted keys, chosen with `--profile NAME` (`--smoke` is "
    "`--profile smoke`).",
    "search": "Optuna's sampler.",
    "objectives": "Multi-objective sweeps: two `{name, goal}` objectives instead of `metric` "
    "(e.g. `val/bleu` up and `decode_seconds` down).",
    "stop_when": "Stop a trial once its metric has arrived (status `converged`), e.g. BLEU 100 at "
    "two reports in a row.",
}


# ---- finding the models ----------------------------------------------------------------------


def spec_package() -> str:
    """The importable name of the sweep-file package (``SPEC_PACKAGES``, first found)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    for name in SPEC_PACKAGES:
        try:
            importlib.import_module(f"{name}.schema")
            return name
        except ModuleNotFoundError as exc:
            if exc.name not in (name, f"{name}.schema"):
                raise
    raise ModuleNotFoundError(f"none of {', '.join(p + '.schema' for p in SPEC_PACKAGES)}")


def schema_module() -> types.ModuleType:
    return importlib.import_module(f"{spec_package()}.schema")


def sweep_spec() -> type:
    """The pydantic model of a sweep file."""
    return schema_module().SweepSpec


# ---- reading annotations ---------------------------------------------------------------------


def _is_model(tp: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _strip(tp: Any) -> Any:
    return typing.get_args(tp)[0] if typing.get_origin(tp) is typing.Annotated else tp


def _union_args(tp: Any) -> tuple | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return None


def type_text(tp: Any) -> str:
    """An annotation as a reader writes it: ``int | None``, ``list[str]``, ``map of str to float``."""
    tp = _strip(tp)
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    args = _union_args(tp)
    if args is not None:
        return " \\| ".join(dict.fromkeys(type_text(a) for a in args))
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        kinds = {type(v).__name__ for v in typing.get_args(tp)}
        return " \\| ".join(sorted(kinds))
    if origin in (list, tuple, set):
        inner = typing.get_args(tp)
        return f"list of {type_text(inner[0])}" if inner else "list"
    if origin is dict:
        key, value = typing.get_args(tp) or (Any, Any)
        return f"map of {type_text(key)} to {type_text(value)}"
    if _is_model(tp):
        return "section"
    return getattr(tp, "__name__", str(tp))


def _literals(tp: Any) -> list[Any]:
    tp = _strip(tp)
    if typing.get_origin(tp) is typing.Literal:
        return list(typing.get_args(tp))
    args = _union_args(tp) or (typing.get_args(tp) if typing.get_origin(tp) in (list, dict) else ())
    return [v for a in args for v in _literals(a)]


def _range_text(annotation: Any, metadata: list[Any]) -> str:
    from datamodules.ranges import allowed_range  # the spec's own range reader (torch-free)

    text = allowed_range(typing.Annotated[(annotation, *metadata)] if metadata else annotation)
    lengths = [getattr(m, "min_length", None) for m in metadata]
    lengths = [n for n in lengths if n is not None]
    if lengths:
        text = " and ".join(filter(None, [text, f"at least {lengths[0]} item(s)"]))
    return text


def allowed_text(annotation: Any, metadata: list[Any] = ()) -> str:
    """Literal choices and declared ranges, e.g. ``maximize, minimize`` or ``>= 1``."""
    parts = []
    choices = [v for v in _literals(annotation) if v is not None]
    if choices:
        parts.append(", ".join(f"`{v}`" for v in choices))
    ranged = _range_text(annotation, list(metadata))
    if ranged:
        parts.append(ranged)
    return "; ".join(parts)


def _nested_model(tp: Any) -> tuple[type | None, str]:
    """The sub-model a field holds and how its keys are written below it: ``("", Model)`` for a
    section, ``[]`` for a list of them, ``.<name>`` for a map of them."""
    tp = _strip(tp)
    if _is_model(tp):
        return tp, ""
    args = _union_args(tp)
    if args is not None:
        for a in args:
            found, how = _nested_model(a)
            if found is not None:
                return found, how
        return None, ""
    origin = typing.get_origin(tp)
    if (
        origin in (list, tuple)
        and typing.get_args(tp)
        and _is_model(_strip(typing.get_args(tp)[0]))
    ):
        return _strip(typing.get_args(tp)[0]), "[]"
    if origin is dict and _is_model(_strip(typing.get_args(tp)[1])):
        return _strip(typing.get_args(tp)[1]), ".<name>"
    return None, ""


def _default_text(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return ""
        if _is_model(type(value)):
            return "(the section's defaults)"
    elif field.default is PydanticUndefined:
        return "**required**"
    else:
        value = field.default
    return yaml_text(value)


def yaml_text(value: Any) -> str:
    """A default as a sweep file writes it: ``null``, ``true``, ``""``, ``[0]``."""
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "":
        return '`""`'
    return f"`{value}`"


# ---- descriptions from the source: Field(description=...), else the comments beside the field


def field_comments(model: type) -> dict[str, str]:
    """``{field: comment}`` from the comment lines just above a field and the comments inside
    its statement (``x: int = 1  # what x is``)."""
    try:
        lines, _ = inspect.getsourcelines(model)
    except (OSError, TypeError):
        return {}
    source = textwrap.dedent("".join(lines))
    lines = source.splitlines()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    out: dict[str, str] = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node in body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above = []
        i = node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#"):
            above.insert(0, lines[i].strip().lstrip("#").strip())
            i -= 1
        inside = []
        for line in lines[node.lineno - 1 : node.end_lineno]:
            if "#" in line:
                comment = line.split("#", 1)[1].strip()
                if comment and not comment.startswith("type:"):
                    inside.append(comment)
        text = " ".join(above + inside).strip()
        if text:
            out[node.target.id] = text
    return out


def _clean(text: str) -> str:
    """One table cell: one line, pipes escaped, reST roles as code."""
    text = re.sub(r":(?:class|func|mod|meth|attr|data):`~?([^`]+)`", r"`\1`", text or "")
    text = " ".join(text.replace("``", "`").split())
    # a pipe ends a table cell, except inside a code span (where a backslash would show)
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def _first_paragraph(doc: str | None) -> str:
    return inspect.cleandoc(doc or "").split("\n\n")[0]


# ---- the tables ------------------------------------------------------------------------------


def _anchor(path: str) -> str:
    return "keys-" + (re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "top")


def _extra_allowed(path: str) -> str:
    """Choices a field validator checks (read from the constants it checks against)."""
    from lightning_modules.metric_names import FIT_METRICS

    if path in ("metric.name", "stop_when.metric"):
        return ", ".join(f"`{m}`" for m in FIT_METRICS)
    if path == "trainer.precision":
        precisions = getattr(schema_module(), "LIGHTNING_PRECISIONS", ())
        return ", ".join(f"`{p}`" for p in precisions)
    return ""


def _section(model: type, path: str, fallback: dict[str, str]) -> tuple[list[str], list[tuple]]:
    """One section's table, and the sub-sections it points to."""
    comments = field_comments(model)
    rows = [
        "| key | type | default | allowed | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    children = []
    for name, field in model.model_fields.items():
        key = f"{path}.{name}" if path else name
        sub, how = _nested_model(field.annotation)
        description = (
            field.description or (fallback.get(name, "") if not path else "") or comments.get(name)
        )
        allowed = allowed_text(field.annotation, field.metadata) or _extra_allowed(key)
        kind = type_text(field.annotation)
        if sub is not None:
            child = f"{key}{how}"
            children.append((sub, child))
            kind = kind.replace("section", f"[section](#{_anchor(child)})")
        rows.append(
            f"| `{key}` | {kind} | {_default_text(field)} | {_clean(allowed)} | "
            f"{_clean(description)} |"
        )
    return rows, children


def spec_tables(spec: type | None = None) -> str:
    """Every key of ``SweepSpec``, one table per section, depth first."""
    spec = spec or sweep_spec()
    out: list[str] = []
    queue: list[tuple[type, str]] = [(spec, "")]
    seen: set[str] = set()
    while queue:
        model, path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        rows, children = _section(model, path, FALLBACK)
        title = f"`{path}`" if path else "Top-level keys"
        out.append(f"### {title} {{#{_anchor(path)}}}\n")
        doc = _first_paragraph(model.__doc__) if path else ""
        if doc:
            out.append(_clean(doc) + "\n")
        out.append("\n".join(rows) + "\n")
        queue.extend(children)
    return "\n".join(out)


# ---- the constructors the task:, model: and grid: sections are checked against -------------


def _args_docs(obj: Any) -> dict[str, str]:
    """``{argument: text}`` from a Google-style ``Args:`` section (``a, b: text`` names both)."""
    doc = inspect.getdoc(obj) or ""
    match = re.search(r"^Args:\n((?:[ \t]+.*\n?|\n)+)", doc, re.M)
    if not match:
        return {}
    block = textwrap.dedent(match.group(1))
    out: dict[str, str] = {}
    current: list[str] = []
    for line in block.splitlines():
        head = re.match(r"^([\w*][\w*, ]*?)(?: \([^)]*\))?: (.*)$", line)
        if head and not line.startswith(" "):
            current = [n.strip().lstrip("*") for n in head.group(1).split(",")]
            for n in current:
                out[n] = head.group(2)
        elif line.strip() and current:
            for n in current:
                out[n] += " " + line.strip()
    return out


def _signature_rows(cls: type, prefix: str, skip: tuple[str, ...] = ()) -> list[str]:
    hints = typing.get_type_hints(cls.__init__, include_extras=True)
    docs = {**_args_docs(cls.__init__), **_args_docs(cls)}
    rows = [
        "| key | type | default | allowed | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or name in skip or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        hint = hints.get(name, Any)
        default = "**required**" if p.default is inspect.Parameter.empty else yaml_text(p.default)
        rows.append(
            f"| `{prefix}{name}` | {type_text(hint)} | {_clean(default)} | "
            f"{_clean(allowed_text(hint))} | {_clean(docs.get(name, ''))} |"
        )
    return rows


def constructor_tables() -> str:
    """The datamodules', ``Seq2SeqModule``'s and each attention mechanism's keyword arguments:
    what a ``task:``/``model:`` key or a ``grid:`` axis may set (imports torch and Lightning)."""
    from datamodules import TASKS, datamodule_class
    from lightning_modules.attention import ATTENTION_REGISTRY
    from lightning_modules.module import Seq2SeqModule
    from lightning_modules.presets import PRESETS

    try:
        derived = importlib.import_module(f"{spec_package()}.validate").DERIVED_MODEL_KEYS
    except (ImportError, AttributeError):
        derived = ()
    out = ["### `task:` {#keys-task-constructors}\n"]
    out.append(
        "`task.name` picks the datamodule: "
        + ", ".join(f"`{t}` ({c})" for t, c in TASKS.items())
        + ". Its other keys are the datamodule's constructor arguments.\n"
    )
    for task in TASKS:
        cls = datamodule_class(task)
        out.append(f"#### `task.name: {task}` ({cls.__name__}) {{#keys-task-{task}}}\n")
        out.append("\n".join(_signature_rows(cls, "task.")) + "\n")
    out.append("### `model:` {#keys-model-constructors}\n")
    skipped = ", ".join(f"`{k}`" for k in derived)
    out.append(
        "`Seq2SeqModule`'s constructor arguments"
        + (f" (the trial fills in {skipped} from the data)" if skipped else "")
        + ". `preset` is one of "
        + ", ".join(f"`{p}`" for p in PRESETS)
        + "; the attention options are the keys of the mechanism's table below, written "
        "straight under `model:` (`model.K: 16`), not in `attention_kwargs`.\n"
    )
    # attention_kwargs: the spec refuses it (options go straight under model:)
    skip = (*derived, "attention_kwargs")
    out.append("\n".join(_signature_rows(Seq2SeqModule, "model.", skip)) + "\n")
    out.append("### Attention options {#keys-attention}\n")
    out.append(
        "`model.attention` is one of "
        + ", ".join(f"`{n}`" for n in sorted(ATTENTION_REGISTRY))
        + ". A mechanism's headline option, if it has one, becomes a results.csv column.\n"
    )
    for name in sorted(ATTENTION_REGISTRY):
        cls = ATTENTION_REGISTRY[name]
        headline = getattr(cls, "headline", None)
        note = f"; headline option `{headline}` ({cls.headline_meaning})" if headline else ""
        out.append(f"#### `attention: {name}` ({cls.__name__}{note}) {{#keys-attention-{name}}}\n")
        rows = _signature_rows(cls, "model.", ("query_dim", "memory_dim"))
        out.append("\n".join(rows) + "\n" if len(rows) > 2 else "No options.\n")
    return "\n".join(out)


def teacher_table() -> str:
    """The keys of a grid variant's ``teacher:`` (``TeacherSpec``; the grid itself is free-form)."""
    model = getattr(schema_module(), "TeacherSpec", None)
    if model is None:
        return ""
    rows, _ = _section(model, "grid.<section>[].teacher", {})
    return (
        "### `grid` variants: `teacher` {#keys-grid-teacher}\n\n"
        + _clean(_first_paragraph(model.__doc__))
        + "\n\n"
        + "\n".join(rows)
        + "\n"
    )


def sweep_file_reference(spec: type | None = None, constructors: bool = True) -> str:
    """The generated part of the key reference, as Markdown."""
    parts = [
        "## Sweep-file keys {#keys}\n",
        f"Generated from `{spec_package()}.schema.SweepSpec` when this site was built.\n",
        spec_tables(spec),
        teacher_table(),
    ]
    if constructors:
        parts += [
            "## What `task:`, `model:` and `grid:` may set {#keys-constructors}\n",
            "Generated from the constructors' signatures, the same annotations and ranges "
            "`--dry-run` checks each grid cell against.\n",
            constructor_tables(),
        ]
    return "\n".join(parts)


# ---- mkdocs ----------------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if PLACEHOLDER not in markdown:
        raise ValueError(f"{PAGE}: the placeholder {PLACEHOLDER} is missing")
    return markdown.replace(PLACEHOLDER, sweep_file_reference())


if __name__ == "__main__":
    print(sweep_file_reference())
