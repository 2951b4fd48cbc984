"""cluster/slurm.sbatch run by bash on this machine with stand-ins for SLURM, Ray and the sweep.

Stand-ins on PATH: ``scontrol show hostnames`` lists FAKE_NODES; ``srun -w a,b CMD`` runs CMD once
per node, here, with FAKE_NODE set (under ``unshare -rn``, a network of its own where the head's
address is unreachable, for the nodes in FAKE_ISOLATED); ``hostname`` answers FAKE_NODE,
FAKE_IP_ADDRESS (``--ip-address``) and FAKE_ALL_IPS (``--all-ip-addresses``). In the fake virtualenv
the script activates, ``ray start --head`` listens on its ``--node-ip-address``/``--port`` (a
plain TCP socket, no Ray), ``ray stop`` closes it, and ``python`` answers the join count
(the head and each worker whose `ray start` has run, at most FAKE_JOINED) and records the sweep
command. Every call lands in a log the tests read.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "cluster" / "slurm.sbatch"

SRUN = r"""#!/bin/bash
nodes=""
while [[ $# -gt 0 && $1 == -* ]]; do
    case $1 in
        -w) nodes=$2; shift 2 ;;
        --nodelist=*) nodes=${1#*=}; shift ;;
        *) shift ;;
    esac
done
status=0
IFS=, read -ra list <<< "$nodes"
for node in "${list[@]}"; do
    echo "srun -w $node $*" >> "$FAKE_LOG"
    if [[ " ${FAKE_ISOLATED:-} " == *" $node "* ]]; then
        FAKE_NODE=$node unshare -rn "$@" || status=$?
    else
        FAKE_NODE=$node "$@" || status=$?
    fi
done
exit $status
"""
SCONTROL = r"""#!/bin/bash
if [[ $1 == requeue ]]; then echo "scontrol requeue $2" >> "$FAKE_LOG"; exit 0; fi
[[ "$1 $2" == "show hostnames" ]] || exit 1
for n in $FAKE_NODES; do echo "$n"; done
"""
HOSTNAME = r"""#!/bin/bash
case "${1:-}" in
    -i|--ip-address) echo "$FAKE_IP_ADDRESS" ;;
    -I|--all-ip-addresses) echo "$FAKE_ALL_IPS" ;;
    *) echo "${FAKE_NODE:-node1}" ;;
esac
"""
RAY = r"""#!/bin/bash
echo "ray $* (on ${FAKE_NODE:-the batch node})" >> "$FAKE_LOG"
if [[ $1 == start && " $* " == *" --head "* ]]; then
    for arg; do
        case $arg in
            --node-ip-address=*) ip=${arg#*=} ;;
            --port=*) port=${arg#*=} ;;
        esac
    done
    echo $$ > "$FAKE_DIR/head.pid"
    exec "$REAL_PYTHON" -c 'import signal, socket, sys, time
def stopped(*_):  # how the batch script stops the head it started
    open(sys.argv[3], "a").write("ray head stopped by SIGTERM\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, stopped)
s = socket.create_server((sys.argv[1], int(sys.argv[2])), family=socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
time.sleep(30)' "$ip" "$port" "$FAKE_LOG"
fi
if [[ "$1 $2" == "get-auth-token --generate" ]]; then
    mkdir -p "$HOME/.ray" && echo "token-of-the-stand-in" > "$HOME/.ray/auth_token"
fi
if [[ $1 == stop ]]; then
    kill "$(cat "$FAKE_DIR/head.pid")" 2>/dev/null
fi
exit 0
"""
#: the stand-in `python`'s answer to the join count: the head, and each worker whose `ray start`
#: has run, at most FAKE_JOINED (a job that counted every node at once could end before a worker
#: step had logged its start)
JOIN_COUNT = r"""started=$(grep -c '^ray start .*--address=' "$FAKE_LOG"); max=${FAKE_JOINED:-1}
        echo $(( 1 + started < max ? 1 + started : max ))"""
PYTHON = (
    r"""#!/bin/bash
echo "python $*" >> "$FAKE_LOG"
case "$*" in
    *sweeps/launch.py*) exit "${FAKE_LAUNCH_EXIT:-0}" ;;
    *ray.nodes*) """
    + JOIN_COUNT
    + r""" ;;
esac
"""
)


def signatures_cache() -> dict[str, str]:
    """``SWEEPS_CACHE_DIR`` naming this user's cache of the sweep file's signatures, for a job
    whose HOME is a fresh folder (where that cache would be rebuilt, importing torch and
    Lightning); nothing when the cache is off."""
    from sweeps.spec.signatures import cache_dir

    folder = cache_dir()
    return {"SWEEPS_CACHE_DIR": str(folder)} if folder is not None else {}


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _global_address() -> tuple[str, str] | None:
    """(IPv4 address, interface) of this machine that is not loopback, if any."""
    if not shutil.which("ip"):
        return None
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True
    ).stdout
    match = re.search(r"^\d+:\s+(\S+)\s+inet\s+([\d.]+)/", out, flags=re.M)
    return (match.group(2), match.group(1)) if match else None


def _can_isolate() -> bool:
    return (
        shutil.which("unshare") is not None
        and subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0
    )


ADDRESS = _global_address()
needs_address = pytest.mark.skipif(ADDRESS is None, reason="no non-loopback IPv4 address here")


class Job:
    """One run of the batch script: return code, output, the log of stand-in calls, seconds."""

    def __init__(
        self, tmp: Path, nodes: list[str], usr1_after: float | None = None, **env: str
    ) -> None:
        bin_dir, venv_bin = tmp / "bin", tmp / "venv" / "bin"
        bin_dir.mkdir()
        venv_bin.mkdir(parents=True)
        for name, text in (("srun", SRUN), ("scontrol", SCONTROL), ("hostname", HOSTNAME)):
            _write(bin_dir / name, text)
        for name, text in (("ray", RAY), ("python", PYTHON)):
            _write(venv_bin / name, text)
        (venv_bin / "activate").write_text(f'export PATH="{venv_bin}:$PATH"\n')
        self.port = _free_port()
        self.log = tmp / "calls.log"
        self.log.touch()
        base = {k: v for k, v in os.environ.items() if not k.startswith(("MEMATTN_", "SLURM_"))}
        self.env = {
            **base,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "REAL_PYTHON": sys.executable,
            "HOME": str(tmp),  # no ~/.ray/auth_token: the job creates one (`ray get-auth-token`)
            **signatures_cache(),
            "FAKE_LOG": str(self.log),
            "FAKE_DIR": str(tmp),
            "FAKE_NODES": " ".join(nodes),
            "FAKE_IP_ADDRESS": "127.0.1.1",
            "FAKE_ALL_IPS": "",
            "FAKE_JOINED": str(len(nodes)),
            "SLURM_JOB_NODELIST": f"node[1-{len(nodes)}]",
            "SLURM_JOB_NUM_NODES": str(len(nodes)),
            "SLURM_GPUS_PER_NODE": "a100:8",
            "SLURM_CPUS_PER_TASK": "4",
            "SLURM_SUBMIT_DIR": str(tmp),
            "MEMATTN_VENV": str(tmp / "venv"),
            "MEMATTN_RAY_PORT": str(self.port),
            "MEMATTN_PROBE_TIMEOUT": "1",
            **env,
        }
        out, err = tmp / "stdout", tmp / "stderr"
        t0 = time.monotonic()
        with open(out, "w") as fo, open(err, "w") as fe:
            proc = subprocess.Popen(
                ["bash", str(SCRIPT), "sweeps/quickstart.yaml", "--smoke"],
                env=self.env,
                cwd=tmp,
                stdout=fo,
                stderr=fe,
                start_new_session=True,
            )
            try:
                if usr1_after is not None:  # the time-limit warning (--signal=B:USR1@N)
                    time.sleep(usr1_after)
                    proc.send_signal(signal.SIGUSR1)
                self.code = proc.wait(timeout=60)
            finally:
                self.seconds = time.monotonic() - t0
                try:  # whatever the script left running (the fake head, a hung probe)
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.out, self.err = out.read_text(), err.read_text()
        self.calls = self.log.read_text().splitlines()

    def ray_starts(self) -> list[str]:
        return [c for c in self.calls if c.startswith("ray start")]

    def launches(self) -> list[str]:
        return [c for c in self.calls if "sweeps/launch.py" in c and c.startswith("python")]


@pytest.mark.train  # the batch script runs, seconds
def test_one_node_runs_the_sweep_on_a_loopback_head_address(tmp_path):
    """One node: 127.0.1.1 from `hostname --ip-address` is fine, the sweep runs on it."""
    job = Job(tmp_path, ["node1"])
    assert job.code == 0, job.err
    assert "one node: the Ray head runs on 127.0.1.1" in job.out
    assert (
        f"Ray: token authentication on (the token from {tmp_path}/.ray/auth_token (created now))"
        in job.out
    )
    (head,) = job.ray_starts()
    assert f"--head --node-ip-address=127.0.1.1 --port={job.port} --num-cpus=4 --num-gpus=8" in head
    assert job.launches() == [
        f"python sweeps/launch.py sweeps/quickstart.yaml --address "
        f"127.0.1.1:{job.port} --output {tmp_path}/sweep-results --smoke"
    ]
    # the head the job started is stopped by SIGTERM to its `ray start --block`, not by `ray stop`,
    # which would stop every Ray on the node
    assert "ray head stopped by SIGTERM" in job.calls
    assert not any(c.startswith("ray stop") for c in job.calls)
    assert job.seconds < 10, job.seconds


@pytest.mark.train  # the batch script runs, seconds
@pytest.mark.parametrize("loopback", ["127.0.1.1", "::1"])
def test_a_loopback_head_address_with_other_nodes_stops_at_once(tmp_path, loopback):
    """Two nodes, the head's host name mapped to loopback: the job says so before starting Ray
    (it used to wait silently for ~25 minutes, then start the sweep on the head alone)."""
    job = Job(
        tmp_path, ["node1", "node2"], FAKE_IP_ADDRESS=loopback, FAKE_ALL_IPS="10.1.2.3 192.168.7.1 "
    )
    assert job.code == 1 and job.seconds < 5, (job.code, job.seconds)
    (line,) = job.err.splitlines()
    assert line.startswith(
        f"error: the Ray head address {loopback} (from `hostname --ip-address` "
        "on node1) is a loopback address: the other 1 node(s) cannot reach it."
    )
    assert "node1 has: 10.1.2.3 192.168.7.1;" in line
    assert "set MEMATTN_HEAD_IP to an address of node1" in line and "MEMATTN_HEAD_INTERFACE" in line
    assert job.ray_starts() == [] and job.launches() == []


@pytest.mark.train  # the batch script runs, seconds
@pytest.mark.skipif(not _can_isolate(), reason="needs `unshare -rn` (user + network namespaces)")
@needs_address
def test_a_head_address_another_node_cannot_reach_stops_at_once(tmp_path):
    """node3 has a network of its own: its probe of the head fails within MEMATTN_PROBE_TIMEOUT,
    and the job names it before any worker starts."""
    ip, _ = ADDRESS
    job = Job(tmp_path, ["node1", "node2", "node3"], MEMATTN_HEAD_IP=ip, FAKE_ISOLATED="node3")
    assert job.code == 1 and job.seconds < 10, (job.code, job.seconds, job.err)
    (line,) = job.err.splitlines()
    assert line.startswith(
        f"error: node(s) node3 cannot open a connection to the Ray head at "
        f"{ip}:{job.port} (from MEMATTN_HEAD_IP) within 1s"
    )
    assert "MEMATTN_HEAD_INTERFACE" in line
    assert [c.split(" (on ")[0].split()[2] for c in job.ray_starts()] == ["--head"]  # no worker
    assert job.launches() == []


@pytest.mark.train  # the batch script runs, seconds
def test_a_head_address_nothing_listens_on_stops_at_once(tmp_path):
    """MEMATTN_HEAD_IP that is not this node's: the head cannot listen there; said at once."""
    job = Job(tmp_path, ["node1", "node2"], MEMATTN_HEAD_IP="203.0.113.9")
    assert job.code == 1 and job.seconds < 10, (job.code, job.seconds)
    assert "error: the Ray head on node1 exited before listening on 203.0.113.9" in job.err
    assert job.launches() == []


@pytest.mark.train  # the batch script runs, seconds
@needs_address
@pytest.mark.parametrize("how", ["hostname", "MEMATTN_HEAD_IP", "MEMATTN_HEAD_INTERFACE"])
def test_several_nodes_start_on_a_reachable_head_address(tmp_path, how):
    """The address comes from the first non-loopback of `hostname --ip-address`, or is set;
    every node reaches it, the workers join and the sweep runs against it."""
    ip, interface = ADDRESS
    env = {
        "hostname": dict(FAKE_IP_ADDRESS=f"127.0.1.1 {ip}"),
        "MEMATTN_HEAD_IP": dict(MEMATTN_HEAD_IP=ip),
        "MEMATTN_HEAD_INTERFACE": dict(MEMATTN_HEAD_INTERFACE=interface),
    }[how]
    job = Job(tmp_path, ["node1", "node2"], **env)
    assert job.code == 0, job.err
    assert "all 1 other node(s) reach" in job.out and "2 of 2 node(s) joined" in job.out
    head, worker = job.ray_starts()
    assert f"--node-ip-address={ip} " in head
    assert f"--address={ip}:{job.port} " in worker and worker.endswith("(on node2)")
    assert job.launches()[0].startswith(
        f"python sweeps/launch.py sweeps/quickstart.yaml --address {ip}:{job.port} "
    )


@pytest.mark.train  # the batch script runs, seconds
@needs_address
def test_nodes_that_do_not_join_are_reported_and_the_sweep_runs_on_the_others(tmp_path):
    ip, _ = ADDRESS
    job = Job(
        tmp_path, ["node1", "node2"], MEMATTN_HEAD_IP=ip, FAKE_JOINED="1", MEMATTN_JOIN_TIMEOUT="0"
    )
    assert job.code == 0, job.err
    assert "warning: 1 of 2 node(s) joined within 0s (MEMATTN_JOIN_TIMEOUT)" in job.err
    assert len(job.launches()) == 1 and job.seconds < 10


@pytest.mark.train  # the batch script runs, seconds
@pytest.mark.parametrize("launcher_exit, requeued", [(75, True), (3, False), (2, False)])
def test_the_job_requeues_on_the_launchers_75_whatever_stopped_it(
    tmp_path, launcher_exit, requeued
):
    """75 (stopped as preempted: a Ray head lost under the sweep, with no signal to the job) is
    what the launcher gives a batch script to requeue on, and the job did not; 3 (the budget is
    spent) and 2 (a bad setup) end the job with them."""
    job = Job(tmp_path, ["node1"], SLURM_JOB_ID="4242", FAKE_LAUNCH_EXIT=str(launcher_exit))
    assert len(job.launches()) == 1
    assert ("scontrol requeue 4242" in job.calls) == requeued, job.out + job.err
    assert job.code == (0 if requeued else launcher_exit), job.err


@pytest.mark.train  # the batch script runs, seconds
def test_a_warning_before_the_sweep_starts_requeues_the_job(tmp_path):
    """A time-limit warning (or SIGTERM) while the nodes join ended the job with exit 0 and no
    requeue, though it said "requeueing the job": the sweep never ran."""
    job = Job(
        tmp_path,
        ["node1"],
        usr1_after=2.0,
        SLURM_JOB_ID="4242",
        FAKE_JOINED="0",  # the head never counts as joined: the job waits for it
        MEMATTN_JOIN_TIMEOUT="30",
    )
    assert "before the sweep started: requeueing the job" in job.out, job.out + job.err
    assert job.launches() == [] and "scontrol requeue 4242" in job.calls
    assert job.code == 0 and job.seconds < 20, job.err
