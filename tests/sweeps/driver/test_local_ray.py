"""The launcher's own local Ray (``init_ray``) starts no idle workers: counted among the processes
it starts, against the same start with Ray's default (``RAY_prestart_worker_first_driver=1``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[3]

#: starts the launcher's local Ray in a fresh process and prints, once a second, how many idle
#: workers (``ray::IDLE``) run under it; argv: the variable's value ("" for unset), seconds
COUNT = r"""
import os, sys, time
value, seconds = sys.argv[1], float(sys.argv[2])
if value:
    os.environ["RAY_prestart_worker_first_driver"] = value
else:
    os.environ.pop("RAY_prestart_worker_first_driver", None)
from sweeps.driver.cluster import init_ray

def descendants(root):
    children = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append((int(d), open(f"/proc/{d}/comm").read().strip()))
        except OSError:
            continue
    found, todo = [], [root]
    while todo:
        for pid, comm in children.get(todo.pop(), []):
            found.append(comm)
            todo.append(pid)
    return found

init_ray("local", {}, num_cpus=2)
start = time.monotonic()
while time.monotonic() - start < seconds:
    time.sleep(1)
    idle = sum(name == "ray::IDLE" for name in descendants(os.getpid()))
    print(f"IDLE {idle} {time.monotonic() - start:.1f}", flush=True)
    if value == "1" and idle:
        break
import ray
ray.shutdown()
"""


def idle_counts(value: str, seconds: float) -> list[tuple[int, float]]:
    """(idle workers, seconds) once a second; the start printed nothing of Ray's own (its token
    authentication warning, "Started a local Ray instance"), which is not the launcher's to say."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    done = subprocess.run(
        [sys.executable, "-c", COUNT, value, str(seconds)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**env, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "Token authentication" not in said and "Started a local Ray instance" not in said, said
    assert "Ray: joined a private local Ray instance (--address local)" in said
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("IDLE ")]
    return [(int(n), float(t)) for _, n, t in lines]


def test_the_launchers_local_ray_starts_no_idle_workers():
    # Ray's default, as a user may set it: idle workers appear (and how soon, on this machine)
    default = idle_counts("1", 60)
    assert default and default[-1][0] > 0, f"Ray's default started no idle worker: {default}"
    seen_after = default[-1][1]
    # the launcher's setting, watched twice as long as the default took to show them
    ours = idle_counts("", max(5.0, 2 * seen_after))
    assert ours and all(n == 0 for n, _ in ours), f"idle workers under the launcher's Ray: {ours}"
