"""One way to replace a file: write a temporary beside it, flush it to disk, rename it over the
old one. A reader (or a crash) sees the old file or the whole new one, never half of either, and
a failed write (a full disk) leaves the old file and no temporary behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Replace ``path`` with ``data`` (text is written as UTF-8)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
