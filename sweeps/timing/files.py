"""A checkpoint as files, without torch: which file a checkpoint path names, what identifies its
content, and the splits a model is timed or evaluated on. The launcher, the timing stage's Ray task
and the held-out stage need only these, so none of them imports torch and Lightning for them
(about 3.5 CPU-seconds a process on a 2-core VM); :mod:`sweeps.timing.checkpoint` loads and times.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sweeps.errors import TimingError

SPLITS = ("valid", "test")


def checkpoint_file(path: str | Path) -> Path:
    """The Lightning checkpoint file: ``path`` itself, or the one ``.ckpt`` file inside a folder
    (a sweep trial's checkpoint folder holds ``checkpoint.ckpt``)."""
    p = Path(path)
    if p.is_dir():
        found = sorted(p.glob("*.ckpt"))
        if len(found) != 1:
            held = (
                f"{len(found)} .ckpt files ({', '.join(f.name for f in found)})"
                if found
                else "no .ckpt file"
            )
            raise TimingError(
                f"checkpoint folder {p} holds {held}; pass the .ckpt file itself, or a trial's folder "
                f"(its checkpoint_NNNNNN folders)"
            )
        return found[0]
    if not p.is_file():
        raise TimingError(
            f"checkpoint {p} not found; pass a Lightning .ckpt file or a trial's checkpoint folder"
        )
    return p


def command_checkpoint(path: str | Path) -> Path:
    """What the commands that take a ``CKPT`` (timing, heatmaps) read: :func:`checkpoint_file`,
    and also a trial's own folder, as results.csv's folders are: its newest ``checkpoint_NNNNNN``,
    the last report's, which results.csv's ``checkpoint`` names."""
    p = Path(path)
    if p.is_dir() and not any(p.glob("*.ckpt")):
        kept = sorted(d for d in p.glob("checkpoint_*") if d.is_dir() and any(d.glob("*.ckpt")))
        if kept:
            return checkpoint_file(kept[-1])
    return checkpoint_file(p)


def checkpoint_fingerprint(path: str | Path) -> str:
    """Identifies one checkpoint file by its content (``sha256:<digest>:<size>``), wherever it lies:
    a sweep folder copied off a cluster's scratch disk (``cp -r``, ``scp``: new paths, new
    modification times) and resumed keeps its timing and held-out records. Hashing reads the file
    once (about a second per GB)."""
    f = checkpoint_file(path)
    digest = hashlib.sha256()
    with f.open("rb") as handle:
        while chunk := handle.read(2**20):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}:{f.stat().st_size}"


def same_checkpoint(recorded: str | None, path: str | Path, current: str | None = None) -> bool:
    """Whether a record's fingerprint names the checkpoint at ``path`` (``current``: its
    :func:`checkpoint_fingerprint`, when the caller has it). A record written before fingerprints
    hashed the content holds ``<resolved path>:<size>:<mtime ns>``, and matches only that file,
    unmoved and untouched, as it did then."""
    if not recorded:
        return False
    if recorded.startswith("sha256:"):
        return recorded == (current or checkpoint_fingerprint(path))
    f = checkpoint_file(path).resolve()
    st = f.stat()
    return recorded == f"{f}:{st.st_size}:{st.st_mtime_ns}"


def checkpoint_gone(path: str | Path) -> bool:
    """Whether a local checkpoint (a ``.ckpt`` file or its folder) is no longer on disk; a
    bucket's path is not looked at (False)."""
    return "://" not in str(path) and not Path(path).exists()


def measured_this(recorded: str | None, path: str | Path) -> bool:
    """Whether a record's ``checkpoint`` (the path it measured) names the same checkpoint of the
    same trial as ``path``: its trial folder, checkpoint folder and file, wherever the sweep folder
    lies. What ties a timing or held-out record to a checkpoint whose file is gone, when its
    fingerprint cannot be checked any more."""
    if not recorded:
        return False

    def tail(p: str | Path) -> tuple[str, ...]:
        q = Path(p)
        return (q if q.suffix == ".ckpt" else q / "checkpoint.ckpt").parts[-3:]

    return tail(recorded) == tail(path)


def gone_in_launch(path: str | Path, what: str) -> str:
    """What the launch's timing and held-out stages say of a finished trial whose checkpoint file
    is gone and which no record measured before (``what``: ``time``, ``evaluate``)."""
    return (
        f"checkpoint {path} is gone (deleted or moved), so this launch cannot {what} it; to train "
        "it again and keep the other trials, start a new sweep warm-started from this one (--set "
        "warm_start=<this sweep's folder> --output <another folder>; the resume's note names the "
        "command)"
    )


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise TimingError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
