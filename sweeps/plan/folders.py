"""Checks made before anything starts, each failing with one line that names the key to change:
every folder the sweep's trials will write is writable from the driver (``--dry-run`` makes them
too), and a sweep that asks for GPUs has a torch that can use them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeps.errors import LaunchError
from sweeps.layout import (  # noqa: F401 (URI_SCHEMES, output_folder, output_file: importable here)
    URI_SCHEMES,
    already_holds,
    holds_local_sweep,
    inside_a_sweep,
    nothing_to_resume,
    only_launch_files,
    output_file,
    output_folder,
    results_statuses,
    write_problem,
)
from sweeps.spec import Sweep
from sweeps.spec.signatures import signatures


@dataclass(frozen=True)
class Folder:
    """A folder the sweep writes: ``key`` is what sets it (``--output``, ``storage.path``,
    ``task.cache_dir``), ``default`` True when the key is unset and the folder is its default."""

    key: str
    path: str
    default: bool = False


def sweep_folders(
    sweep: Sweep, output: Path, datamodules: list[tuple[dict, Any]] | None = None
) -> list[Folder]:
    """The folders a run of ``sweep`` writes, each once: ``--output`` (``output``: results, W&B
    runs, the Optuna journal, under ``<output>/<name>``), ``storage.path`` (Tune's checkpoints),
    and the folders each task's datamodule writes (its ``written_dirs()``: data caches, data it
    fetches). ``datamodules``: :func:`folder_datamodules` of the sweep, where already built."""
    found = [Folder("--output", str(output))]
    if sweep.spec.storage.path:
        found.append(Folder("storage.path", sweep.spec.storage.path))
    if datamodules is None:
        datamodules = folder_datamodules(sweep)
    for task, datamodule in datamodules:
        if hasattr(datamodule, "written_dirs"):
            for arg, path in datamodule.written_dirs().items():
                found.append(Folder(f"task.{arg}", str(path), default=not task.get(arg)))
    unique: dict[str, Folder] = {}
    for folder in found:
        unique.setdefault(folder.path, folder)
    return list(unique.values())


#: the repository this launcher belongs to: where a sweep file's relative paths to the data it
#: ships (``tests/data/wmt-ende-tiny``) lead when the launch starts from another folder
REPOSITORY = Path(__file__).resolve().parents[2]


def elsewhere_hint(task: dict[str, Any], here: Path | None = None) -> str:
    """``""``, or a sentence for a task whose ``data_dir`` is not there from the working
    directory (``here``) while the repository holds it at the same relative path: a sweep file's
    relative paths are taken from where the launch starts, and a shipped profile's point into the
    repository."""
    here = (here or Path.cwd()).resolve()
    path = task.get("data_dir")
    if not isinstance(path, str) or "://" in path or here == REPOSITORY or Path(path).exists():
        return ""
    absolute = Path(path)
    if not absolute.is_relative_to(here):
        return ""
    relative = absolute.relative_to(here)
    if not (REPOSITORY / relative).is_dir():
        return ""
    return (
        f". A relative task.data_dir is taken from where the launch starts ({here}); the "
        f"repository holds {relative}: launch from {REPOSITORY}, or "
        f"--set task.data_dir={REPOSITORY / relative}"
    )


def data_notes(datamodules: list[tuple[dict, Any]]) -> list[str]:
    """``--dry-run``'s lines for tasks whose data is not there and will not be fetched (a
    datamodule's ``missing_data()``, of :func:`folder_datamodules`): the launch's data stage
    would stop on them."""
    notes = []
    for task, datamodule in datamodules:
        missing = getattr(datamodule, "missing_data", None)
        if missing is not None and (problem := missing()) is not None:
            notes.append(f"note: {problem}{elsewhere_hint(task)}")
    return notes


def check_test_split(sweep: Sweep, datamodules: list[tuple[dict, Any]]) -> None:
    """Raise :class:`LaunchError` where the held-out stage is on and a task has no test split
    (WMT with ``test_prefix: ""``; ``datamodules`` of :func:`folder_datamodules`): it would fail for
    every chosen trial, after all the training."""
    if not sweep.spec.heldout.enabled:
        return
    for plan in sweep.plans:
        if plan.task.get("test_size") == 0:
            raise LaunchError(
                f"{plan.cell.name}: task.test_size is 0, and the held-out stage evaluates the "
                "chosen trials on the test split after training: set task.test_size (e.g. "
                "1000) or heldout.enabled: false"
            )
    for task, datamodule in datamodules:
        if "test" not in getattr(datamodule, "splits", ("test",)):
            raise LaunchError(
                f"task {task.get('name')!r} has no test split (task.test_prefix is empty), and the "
                "held-out stage evaluates the chosen trials on one after training: set "
                "task.test_prefix (e.g. newstest2016) or heldout.enabled: false"
            )


def check_teacher_checkpoints(sweep: Sweep) -> None:
    """Raise :class:`LaunchError` where a fixed ``model.teacher_checkpoint`` is not a file here:
    each of its students would fail as it starts, after the teachers' and others' training."""
    for plan in sweep.plans:
        path = plan.model.get("teacher_checkpoint")
        if isinstance(path, str) and "://" not in path and not Path(path).is_file():
            where = plan.cell.origins.get("model.teacher_checkpoint", "model.teacher_checkpoint")
            raise LaunchError(
                f"{where}: {path} is not a file (a relative path is taken from where the launch "
                "starts); give a teacher's checkpoint, e.g. a results.csv row's checkpoint, or "
                "name a teacher cell (teacher: {cell: {attention: bahdanau}})"
            )


def folder_datamodules(sweep: Sweep) -> list[tuple[dict, Any]]:
    """Each distinct task of the sweep whose datamodule takes folders (``*_dir`` arguments), with
    that datamodule built; the others are not imported (a dry run of a copy-task sweep reads the
    signature cache, not torch)."""
    # the datamodules import torch (seconds): planning without folders does without
    from sweeps.build import build_datamodule

    seen: set[str] = set()
    out = []
    for plan in sweep.plans:
        task = plan.task
        key = repr(sorted(task.items()))
        params = signatures().datamodules.get(task["name"])
        if (
            key in seen
            or not isinstance(params, dict)
            or not any(p.endswith("_dir") for p in params)
        ):
            continue
        seen.add(key)
        out.append((task, build_datamodule(task, seed=0)))
    return out


def check_folders(folders: list[Folder]) -> None:
    """Raise :class:`LaunchError` for the first folder that cannot be written, naming its key."""
    for folder in folders:
        problem = write_problem(folder.path)
        if problem is None:
            continue
        what = f"{folder.key} (unset: its default)" if folder.default else folder.key
        fix = (
            "choose an --output you can write to"
            if folder.key == "--output"
            else f"set {folder.key} to a folder you can write to (--set {folder.key}=PATH)"
        )
        raise LaunchError(f"{what} {folder.path}: {problem}; {fix}")


def check_sweep_folder(out_dir: Path, output: str) -> None:
    """The sweep's own folder, ``<output>/<name>``, is a folder or not there yet."""
    if out_dir.exists() and not out_dir.is_dir():
        raise LaunchError(
            f"--output {output}: {out_dir} is a file, where the sweep's folder goes; move it, "
            f"or choose another --output"
        )


def describe_folders(folders: list[Folder], limit: int = 3) -> str:
    """One line: the folders by key, relative to the working directory where they are inside it."""
    here = Path.cwd()

    def show(path: str) -> str:
        p = Path(path)
        return str(p.relative_to(here)) if p.is_absolute() and p.is_relative_to(here) else path

    by_key: dict[str, list[str]] = {}
    for folder in folders:
        by_key.setdefault(folder.key, []).append(show(folder.path))
    parts = [
        f"{key} {paths[0]}" + (f" (+{len(paths) - 1} more)" if len(paths) > 1 else "")
        for key, paths in by_key.items()
    ]
    remote = any("://" in f.path and not f.path.startswith("file://") for f in folders)
    checked = "the local ones writable from here" if remote else "all writable from here"
    return f"writes to ({checked}): " + "; ".join(parts[: limit + 2])


def resume_line(experiment: str, out_dir: Path) -> str:
    """``--dry-run --resume``'s line: the experiment folder it continues and how many trials of
    each status the sweep's results.csv (in ``out_dir``, where a run wrote one) holds. Raises
    :class:`LaunchError` where the launch would stop: the folder holds no sweep to continue."""
    if "://" in experiment:
        return f"--resume continues the sweep in {experiment} (a dry run does not read the bucket)"
    if not holds_local_sweep(Path(experiment)):
        raise LaunchError(nothing_to_resume(experiment))
    statuses = results_statuses(out_dir)
    last = ", ".join(f"{n} {status}" for status, n in statuses.most_common())
    return f"--resume continues the sweep in {experiment}" + (
        f"; its last results.csv: {last}" if last else ""
    )


def check_new_sweep(experiment: str, spec: str, output: str, out_dir: Path | None = None) -> None:
    """``--dry-run`` without ``--resume`` stops where the launch would: the experiment folder
    (local) already holds a sweep, or the sweep's folder (``out_dir``) holds a sweep's results
    (its trials kept under another storage.path), or ``output`` is itself a sweep's own folder
    (:func:`~sweeps.layout.inside_a_sweep`)."""
    if nested := inside_a_sweep(output, spec):
        raise LaunchError(nested)
    if "://" not in experiment and holds_local_sweep(Path(experiment)):
        raise LaunchError(already_holds(experiment, spec, output))
    if out_dir is not None and out_dir.is_dir() and not only_launch_files(out_dir):
        raise LaunchError(already_holds(str(out_dir), spec, output))


def gpu_note(sweep: Sweep) -> str | None:
    """``--dry-run``'s line when the sweep asks for GPUs and this machine's torch is CPU-only
    (Ray is not started then, so whether it offers GPUs is not known yet)."""
    if not sweep.spec.resources.gpu:
        return None
    # torch (seconds): only a sweep that asks for GPUs checks its build
    from sweeps.integrations.torch_build import cpu_only_torch, torch_build

    if not cpu_only_torch():
        return None
    return (
        f"note: resources.gpu={sweep.spec.resources.asked_gpu}, but this machine's {torch_build()} "
        f"cannot use a GPU: where Ray offers one here the launch stops (install a CUDA build: "
        f'cluster/README.md, "A CUDA build of torch"); with no GPU here a local run uses the CPU'
    )
