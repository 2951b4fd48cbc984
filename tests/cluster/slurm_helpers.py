"""What the real-SLURM tests (test_slurm_real.py, test_slurm_two_nodes.py) share: when they may run,
the environment a job gets, submitting cluster/slurm.sbatch and reading a finished job back.

They change the machine: as root, cluster/slurm-local.sh installs slurm-wlm and munge (and bindfs)
with apt-get, writes slurm.conf and starts daemons (two nodes: a network namespace, a veth pair and a
FUSE mount too). So they run only when asked, with ``MEMATTN_REAL_SLURM=1`` or under CI (``CI=true``,
which .ci/run sets), and are skipped otherwise with a line that says so.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "cluster" / "slurm-local.sh"
SCRIPT = ROOT / "cluster" / "slurm.sbatch"
VENV = Path(sys.prefix)
#: the variable that lets these tests install and start SLURM outside CI
OPT_IN = "MEMATTN_REAL_SLURM"
_YES = {"1", "true", "yes"}


def why_not() -> str | None:
    """Why the real-SLURM tests cannot or may not run here, or None when they can."""
    if not (os.environ.get(OPT_IN, "").lower() in _YES or os.environ.get("CI", "").lower() in _YES):
        return (
            "real SLURM is set up only when asked (as root it installs slurm-wlm and munge with "
            f"apt-get, writes slurm.conf and starts daemons): run with {OPT_IN}=1, as CI (CI=true) does"
        )
    if not sys.platform.startswith("linux"):
        return "SLURM tests need Linux"
    if os.geteuid() != 0:
        return "needs root: cluster/slurm-local.sh installs SLURM and starts its daemons as root"
    if not (shutil.which("sbatch") or shutil.which("apt-get")):
        return "no SLURM here (sbatch) and no apt-get to install it"
    if not (VENV / "bin" / "activate").exists():
        return f"the tests' Python ({sys.executable}) is not in a virtualenv the job can activate"
    return None


def env(**extra: str) -> dict[str, str]:
    """This process's environment without SLURM's or the batch script's settings, W&B offline."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MEMATTN_"))}
    out.update(WANDB_MODE="offline", RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE"):  # Ray's defaults, as a user has them
        out.pop(name, None)
    out.update(extra)
    return out


def token() -> dict[str, str]:
    """Ray's token authentication as the user has it (~/.ray/auth_token, as on this machine), else
    a token of the test's own in RAY_AUTH_TOKEN: the job would otherwise create ~/.ray/auth_token,
    which changes how `ray start` behaves on this machine for everything after the test."""
    if os.environ.get("RAY_AUTH_TOKEN") or (Path.home() / ".ray" / "auth_token").exists():
        return {}
    return {"RAY_AUTH_TOKEN": secrets.token_hex(32)}


def free_port() -> int:
    """A port for the job's Ray head: not 6379, which another Ray on this machine may hold."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def set_up(*args: str) -> tuple[str, bool]:
    """cluster/slurm-local.sh ARGS: its output, and whether it started anything (so the caller
    stops it at the end, and leaves alone a cluster that ran before). Raises ``RuntimeError``
    with the script's reason when the cluster cannot be set up."""
    try:
        proc = subprocess.run(
            ["bash", str(SETUP), *args], capture_output=True, text=True, timeout=900, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError("cluster/slurm-local.sh took over 15 minutes") from None
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"cluster/slurm-local.sh: {why}")
    started = re.search(r"^slurm-local: (started|mounted|network namespace) ", proc.stdout, re.M)
    return proc.stdout, started is not None


class Job:
    """A finished sbatch job: exit status, its log, what `scontrol show job` says of it."""

    def __init__(
        self, job_id: str, code: int, log: Path, seconds: float, env: dict[str, str]
    ) -> None:
        self.id, self.code, self.log, self.seconds = job_id, code, log.read_text(), seconds
        show = subprocess.run(
            ["scontrol", "show", "job", job_id], capture_output=True, text=True, env=env
        ).stdout
        self.fields = dict(re.findall(r"(\w+)=(\S*)", show))

    @property
    def restarts(self) -> int:
        return int(self.fields.get("Restarts", "-1"))

    def __repr__(self) -> str:
        return f"job {self.id} exit {self.code} after {self.seconds:.0f}s:\n{self.log[-6000:]}"


def sbatch(
    log: Path, options: list[str], script_args: list[str], timeout: float, env: dict[str, str]
) -> Job:
    """`sbatch --wait --parsable OPTIONS cluster/slurm.sbatch SCRIPT_ARGS`, the job's output in
    ``log``; cancelled (and the test failed) when it still runs after ``timeout`` seconds."""
    cmd = ["sbatch", "--wait", "--parsable", f"--output={log}", *options, str(SCRIPT), *script_args]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    job_id = proc.stdout.readline().strip().split(";")[0]
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", job_id], env=env)
        proc.wait()
        raise AssertionError(
            f"job {job_id} still ran after {timeout}s: {log.read_text()[-4000:]}"
        ) from None
    return Job(job_id, code, log, time.monotonic() - t0, env)


def trial_reports(exp: Path) -> dict[str, list[dict]]:
    """Each trial folder's result.json lines (step, process, node, iterations since its last
    start); a line still being written is left out."""
    reports = {}
    for result in sorted(exp.glob("*/result.json")):
        lines = []
        for line in result.read_text().splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
        reports[result.parent.name] = lines
    return reports
