"""The sweep folder's file writing (sweeps/layout.py)."""

from __future__ import annotations

import os
import stat

from sweeps.layout import write_atomic


def test_an_atomic_write_leaves_the_permissions_a_plain_write_would(tmp_path):
    """A new file gets what the umask gives (results.csv was left readable by its owner only,
    as the temporary file it was written to); a replaced file keeps its own."""
    old = os.umask(0o022)
    try:
        plain = tmp_path / "plain.csv"
        plain.write_text("a\n")
        written = write_atomic(tmp_path / "results.csv", "a,b\n1,2\n")
        assert stat.S_IMODE(written.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o644
        written.chmod(0o640)
        write_atomic(written, "a,b\n3,4\n")
        assert stat.S_IMODE(written.stat().st_mode) == 0o640
        assert written.read_text() == "a,b\n3,4\n"
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    finally:
        os.umask(old)
