"""Dependent trials: cells taught by another cell of the sweep (a grid variant's ``teacher:``).

```yaml
grid:
  task.max_length: [20, 40]
  model:
    - {attention: bahdanau}
    - {attention: memory, K: [4, 16], distill_weight: [0.1, 1],
       teacher: {cell: {attention: bahdanau}, pick: best}}
```

Each memory cell's teacher is the cell with ``attention: bahdanau`` and the student's values on
every other axis (here its length); each student trial takes the teacher trial of the same seed
(``pick: best``: the best by the sweep's metric over that unit's Optuna samples). A cell uses its
teacher when its model does (``distill_weight`` > 0 or ``init_from_teacher`` not ``none``); one
that does not is an ordinary cell and runs at once. :func:`resolve_teachers` checks it all at
load time, before Ray starts: the teacher cell exists and is one cell, no cycle, the sizes the
objective needs agree, and the sweep is of a kind whose searcher can hold students back.
"""

from __future__ import annotations

from typing import Any

from lightning_modules.presets import attention_dims, get_preset
from sweeps.spec.grid import Cell, TrialPlan, column_name
from sweeps.spec.scalars import did_you_mean
from sweeps.spec.schema import SpecError, SweepSpec
from sweeps.spec.signatures import answers, module_signature_params, signatures

#: the sizes a student started from its teacher's encoder (init_from_teacher) must share with it
ENCODER_SIZES = (
    "embedding_dim",
    "hidden_size",
    "encoder_layers",
    "decoder_layers",
    "bidirectional",
)


def uses_teacher(model: dict[str, Any]) -> bool:
    """Whether a cell's model reads a teacher: the §3.1 term or a start from its encoder."""
    return (
        float(model.get("distill_weight") or 0) > 0
        or str(model.get("init_from_teacher") or "none") != "none"
    )


def best_scored(scored: list[tuple[str, float]], mode: str) -> str:
    """``pick: best``: the trial id of the best (trial id, value) pair, by ``mode`` (``max`` or
    ``min``), the first of equals. The searcher picks a student's teacher with it, and a warm
    start checks that a reused student's teacher is the one it would pick."""
    sign = 1 if mode == "max" else -1
    return max(scored, key=lambda tv: sign * tv[1])[0]


def resolve_teachers(
    spec: SweepSpec, cells: list[Cell], plans: list[TrialPlan], source: str
) -> dict[str, str]:
    """Student cell slug -> its teacher cell's slug, for every cell that uses a teacher; raises
    :class:`SpecError` naming the key path of what is wrong."""
    model_of = {p.cell.slug: p.model for p in plans}
    taught: dict[str, str] = {}
    by_slug = {c.slug: c for c in cells}
    for cell in cells:
        model = model_of.get(cell.slug, {})
        _check_model(cell, model, source)
        teacher = _match(cell, cells, source) if cell.teacher is not None else None
        if teacher is not None and uses_teacher(model):
            taught[cell.slug] = teacher.slug
            _check_sizes(cell, model, teacher, model_of[teacher.slug], source)
    if taught:
        _check_acyclic(taught, by_slug, source)
        _check_sweep_kind(spec, by_slug[next(iter(taught))], source)
    return taught


def _origin(cell: Cell, key: str) -> str:
    return cell.origins.get(key, key)


def _check_model(cell: Cell, model: dict[str, Any], source: str) -> None:
    weight = float(model.get("distill_weight") or 0)
    problem = distill_problem(model) if weight > 0 else None
    if problem:
        raise SpecError(_origin(cell, "model.distill_weight"), problem, source)
    fixed = model.get("teacher_checkpoint")
    if cell.teacher is not None and fixed is not None:
        raise SpecError(
            _origin(cell, "model.teacher_checkpoint"),
            f"cell {cell.name!r} names a teacher cell ({cell.variant}.teacher) and a fixed "
            "teacher_checkpoint; keep one of the two",
            source,
        )
    if uses_teacher(model) and cell.teacher is None and fixed is None:
        key = "model.distill_weight" if weight > 0 else "model.init_from_teacher"
        raise SpecError(
            _origin(cell, key),
            f"cell {cell.name!r} needs a teacher: add teacher: {{cell: {{attention: bahdanau}}}} "
            "(its teacher cell's values) to its grid variant, or set model.teacher_checkpoint",
            source,
        )


def distill_problem(model: dict[str, Any]) -> str | None:
    """What the model's own check (:func:`lightning_modules.distill.check_distillation`) says of a
    cell's mechanism and lambda (which mechanisms have a matrix C is the model's to know), or None.
    Each distinct answer is learnt once and kept with the signatures' cache."""
    sig = signatures()
    attention = str(model.get("attention", module_signature_params()["attention"][1]))
    weight = float(model.get("distill_weight") or 0)
    key = ("distill", attention, weight > 0)
    if key not in sig.attention_checks:
        sig.attention_checks[key] = answers().distill_problem(attention, weight)
        sig.dirty = True
    return sig.attention_checks[key]


def _describe(values: dict[str, Any]) -> str:
    return " ".join(f"{column_name(k)}={v}" for k, v in values.items())


def _match(cell: Cell, cells: list[Cell], source: str) -> Cell:
    """The one cell with the teacher's values and the student's values on every other axis."""
    where = f"{cell.variant}.teacher.cell"
    section = cell.variant.split("[")[0].split(".", 1)[-1]  # grid.model[1] -> model
    wanted = {(k if "." in k else f"{section}.{k}"): v for k, v in cell.teacher.cell.items()}
    own = {k for k, o in cell.origins.items() if o.startswith(cell.variant + ".")}
    shared = {k: v for k, v in cell.values.items() if k not in own and k not in wanted}
    found = [
        c
        for c in cells
        if all(k in c.values and c.values[k] == v for k, v in wanted.items())
        and all(c.values.get(k, v) == v for k, v in shared.items())
    ]
    at = f" at {_describe(shared)}" if shared else ""
    keys = {k for c in cells for k in c.values}
    unknown = [k for k in wanted if k not in keys]
    if not found and unknown:  # "no cell has atention=bahdanau" hid the misspelt key
        key = unknown[0]
        close = did_you_mean(key, keys)
        raise SpecError(
            where,
            f"{key} is no grid value of any cell{close}; a teacher is named by its cell's grid "
            f"values: {', '.join(sorted(keys))}",
            source,
        )
    if not found:
        names = ", ".join(repr(c.name) for c in cells[:4]) + (", ..." if len(cells) > 4 else "")
        raise SpecError(
            where,
            f"no cell of the sweep has {_describe(wanted)}{at} (the teacher of {cell.name!r}); a "
            f"teacher must be a cell of this grid, named by its grid values (cells: {names})",
            source,
        )
    if len(found) > 1:
        names = ", ".join(repr(c.name) for c in found[:4])
        raise SpecError(
            where,
            f"{_describe(wanted)}{at} matches {len(found)} cells ({names}); name more of the "
            "teacher's grid values so that one cell matches",
            source,
        )
    return found[0]


def _check_acyclic(taught: dict[str, str], by_slug: dict[str, Cell], source: str) -> None:
    for start in taught:
        path, slug = [start], taught[start]
        while slug in taught and slug not in path:
            path.append(slug)
            slug = taught[slug]
        if slug in path:
            loop = path[path.index(slug) :] + [slug]
            cell = by_slug[loop[0]]
            raise SpecError(
                f"{cell.variant}.teacher",
                "a cycle of teachers: "
                + " -> ".join(repr(by_slug[s].name) for s in loop)
                + "; a teacher's trials must finish before its students', so no cell may teach "
                "itself, directly or through others",
                source,
            )


def _sizes(model: dict[str, Any]) -> dict[str, Any]:
    sizes = get_preset(str(model.get("preset", "tiny")))
    sizes.update({k: model[k] for k in ENCODER_SIZES if model.get(k) is not None})
    return sizes


def _check_sizes(
    cell: Cell, model: dict[str, Any], teacher: Cell, theirs: dict[str, Any], source: str
) -> None:
    """The sizes the objective needs: one memory size D; one encoder for init_from_teacher."""
    mine_d = attention_dims(
        str(model.get("preset", "tiny")), model.get("hidden_size"), model.get("bidirectional")
    )[1]
    their_d = attention_dims(
        str(theirs.get("preset", "tiny")), theirs.get("hidden_size"), theirs.get("bidirectional")
    )[1]
    if float(model.get("distill_weight") or 0) > 0 and mine_d != their_d:
        raise SpecError(
            cell.variant,
            f"cell {cell.name!r} has memory vectors of D={mine_d} but its teacher "
            f"{teacher.name!r} gives contexts of D={their_d}; give both the same encoder size "
            "(preset, or hidden_size and bidirectional)",
            source,
        )
    if str(model.get("init_from_teacher") or "none") != "none":
        a, b = _sizes(model), _sizes(theirs)
        differ = [k for k in ENCODER_SIZES if a[k] != b[k]]
        if differ:
            raise SpecError(
                cell.variant,
                f"init_from_teacher copies the teacher's encoder, but cell {cell.name!r} and its "
                f"teacher {teacher.name!r} differ in "
                + ", ".join(f"{k} ({a[k]} vs {b[k]})" for k in differ)
                + "; give them the same sizes",
                source,
            )


def _check_sweep_kind(spec: SweepSpec, student: Cell, source: str) -> None:
    """Students are held back by the one-metric searcher, on storage every trial can read."""
    where = f"{student.variant}.teacher"
    if spec.objectives:
        raise SpecError(
            where, "teachers need a sweep with one metric; this one has objectives", source
        )
    if spec.per_configuration or spec.confirm_seeds:
        raise SpecError(
            where,
            "teachers need per-seed units; seeds.per_configuration and seeds.confirm are not "
            "supported with teachers",
            source,
        )
    if spec.storage.path and "://" in spec.storage.path:
        raise SpecError(
            "storage.path",
            f"a student trial reads its teacher's checkpoint as a file; {spec.storage.path} is a "
            "bucket: use a local or shared (NFS) path with teachers",
            source,
        )


def order_lines(sweep: Any) -> list[str]:
    """What ``--dry-run`` says about dependent trials: which cells wait for which, in the order
    they can start (empty for a sweep without teachers)."""
    named = [c for c in sweep.cells if c.teacher is not None]
    if not named:
        return []
    taught = sweep.teachers
    names = {c.slug: c.name for c in sweep.cells}
    depth: dict[str, int] = {}

    def level(slug: str) -> int:
        if slug not in depth:
            depth[slug] = 0 if slug not in taught else level(taught[slug]) + 1
        return depth[slug]

    seeds = "the same seed" if len(sweep.spec.seed_values) > 1 else "its seed"
    lines = [
        f"teachers: {len(taught)} cell(s) wait for their teacher cell's trials ({seeds}, pick "
        f"best by {sweep.spec.metric.name}); the other cells fill the free slots meanwhile. Order:"
    ]
    free = [c for c in sweep.cells if c.slug not in taught]
    teachers = sorted({taught[s] for s in taught}, key=lambda s: list(names).index(s))
    lines.append(
        f"  1. at once: {len(free)} cell(s)"
        + (f", the teachers first: {', '.join(names[s] for s in teachers)}" if teachers else "")
    )
    for n in range(1, max((level(s) for s in taught), default=0) + 1):
        for slug in (s for s in taught if level(s) == n):
            lines.append(f"  {n + 1}. {names[slug]}  <-  {names[taught[slug]]}")
    idle = [c.name for c in named if c.slug not in taught]
    if idle:
        lines.append(
            f"  {len(idle)} cell(s) name a teacher they do not use (distill_weight 0, "
            "init_from_teacher none) and run at once"
        )
    return lines
