"""A stand-in for NVIDIA's ``nvidia-cuda-mps-control``, which this machine (no GPU, no NVIDIA
driver) cannot have: a shell script put on PATH that records every call (its arguments, the
command read on stdin, the pipe and log directories it was given) in a log the MPS tests read.
Like the real program, ``-d`` returns at once and leaves the daemon's control socket in the pipe
directory (here a plain file), and ``quit`` on stdin takes it away. Writing a file into each
directory checks that both are writable, as the real daemon needs them.

Optional: ``FAKE_MPS_FAIL_START=1`` makes ``-d`` fail as the real one does when it cannot start.
"""

from __future__ import annotations

from pathlib import Path

FAKE_MPS = r"""#!/bin/bash
log=${FAKE_MPS_LOG:?}
if [ "${1:-}" = -d ]; then
    if [ -n "${FAKE_MPS_FAIL_START:-}" ]; then
        echo "An instance of this daemon is already running" >&2
        exit 1
    fi
    touch "$CUDA_MPS_PIPE_DIRECTORY/control" "$CUDA_MPS_LOG_DIRECTORY/control.log" || exit 1
    echo "start pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY node=${FAKE_NODE:-}" >> "$log"
    exit 0
fi
read -r command
echo "$command pipe=$CUDA_MPS_PIPE_DIRECTORY node=${FAKE_NODE:-}" >> "$log"
[ "$command" = quit ] && rm -f "$CUDA_MPS_PIPE_DIRECTORY/control"
exit 0
"""


def install_fake_mps(bin_dir: Path) -> Path:
    """Write the stand-in as ``bin_dir/nvidia-cuda-mps-control``; returns its log file (set
    ``FAKE_MPS_LOG`` to it in the environment of whatever calls the stand-in)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    program = bin_dir / "nvidia-cuda-mps-control"
    program.write_text(FAKE_MPS)
    program.chmod(0o755)
    log = bin_dir.parent / "mps-calls.log"
    log.touch()
    return log


def mps_calls(log: Path) -> list[str]:
    """The stand-in's calls so far, one line each: ``start pipe=... log=...``, ``quit pipe=...``."""
    return log.read_text().splitlines()
