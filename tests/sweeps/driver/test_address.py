"""Which Ray the launcher joins without --address: a real `ray start --head` started here (on a
free port, with its own temp dir, stopped by these tests alone), and RAY_ADDRESS."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from sweep_helpers import tiny_spec, write_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
RAY = str(Path(sys.executable).with_name("ray"))
#: every test reads the module's ``ray start`` head: one xdist worker runs them, so it starts once
pytestmark = pytest.mark.xdist_group("ray-head")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def head():
    """``ray start --head --block`` in its own session; yields (address, RAY_TMPDIR, env, process).

    test_a_lost_head_ends_the_launch_with_the_resume_command_and_75 kills it (its every process),
    so that test must stay the last in this module to use it: the module's tests run in file order,
    in one xdist worker (its xdist_group). Run alone, that test gets a head of its own here."""
    with ray_head() as started:
        yield started


@contextlib.contextmanager
def ray_head():
    """Start a ``ray start --head --block`` here; yields (address, RAY_TMPDIR, env, process),
    and stops it (if it still runs) when the block ends."""
    tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray's socket paths have a length limit
    port, agent_port = free_port(), free_port()
    env = {
        **os.environ,
        "RAY_TMPDIR": tmp,
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "WANDB_MODE": "disabled",
    }
    env.pop("RAY_ADDRESS", None)
    cmd = [
        RAY,
        "start",
        "--head",
        "--block",
        f"--port={port}",
        f"--temp-dir={tmp}/ray",
        "--num-cpus=2",
        "--include-dashboard=false",
        "--object-store-memory=80000000",
        "--disable-usage-stats",
        f"--ray-client-server-port={free_port()}",
        f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--runtime-env-agent-port={agent_port}",
        f"--dashboard-port={free_port()}",
    ]
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    address_file = Path(tmp, "ray", "ray_current_cluster")
    deadline = time.monotonic() + 120
    while not address_file.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    try:
        # the address file comes before the node can start workers: wait for the runtime-env
        # agent too (on a loaded 2-core machine it took long enough for the first test's trials
        # to fail: "Runtime Env Agent network error ... Connection refused")
        host = address_file.read_text().strip().rsplit(":", 1)[0] if address_file.exists() else ""
        while (
            host
            and not listening(host, agent_port)
            and proc.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.5)
        if not (host and listening(host, agent_port)):
            proc.kill()
            pytest.fail("ray start --head did not come up:\n" + proc.communicate()[0][-3000:])
        yield f"127.0.0.1:{port}", tmp, env, proc
    finally:
        # stop only the Ray this test started. SIGTERM to `ray start` alone: it drains its node and
        # stops the processes it started in about a second. (SIGTERM to the whole process group
        # stops the GCS too, and `ray start` then waits 30 s for a drain that cannot happen.)
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(
                proc.pid, signal.SIGKILL
            )  # its own process group: whatever outlived `ray start`
        except ProcessLookupError:
            pass
        proc.wait(timeout=5)


def launch_command(tmp_path: Path, name: str, steps: int, *flags: str) -> list[str]:
    """The launcher on a one-trial sweep of ``steps`` training steps, into ``tmp_path/out``."""
    spec = tiny_spec(
        name,
        grid={"model": [{"attention": "none"}]},
        trainer={"max_steps": steps, "val_check_interval": min(steps, 5)},
        wandb={"mode": "disabled"},
    )
    script = str(ROOT / "sweeps" / "launch.py")
    spec_file = str(write_spec(tmp_path, spec))
    return [sys.executable, script, spec_file, "--output", str(tmp_path / "out"), *flags]


def run_launcher(tmp_path: Path, env: dict[str, str], name: str) -> subprocess.CompletedProcess:
    cmd = launch_command(tmp_path, name, 2, "--verbose", "0")
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def joined_line(out: str) -> str:
    return next((line for line in out.splitlines() if line.startswith("Ray: joined")), "")


def test_without_address_the_launcher_joins_the_ray_start_cluster_on_this_machine(head, tmp_path):
    address, _, env, _ = head
    done = run_launcher(tmp_path, env, "joins_head")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = joined_line(done.stdout)
    port = address.rsplit(":", 1)[1]
    assert "the `ray start` cluster on this machine at " in line and f":{port}:" in line, line
    assert "1 node(s), 2 CPUs, 0 GPUs" in line, line
    assert "starting a local Ray instance" not in done.stdout


def test_ray_address_wins_over_the_local_search(head):
    """Joined as the launcher joins (``init_ray``), without a sweep: the test above trains one on
    this head already."""
    address, _, env, _ = head
    # RAY_TMPDIR elsewhere: no `ray start` address file to find; only RAY_ADDRESS leads to the head
    env = {**env, "RAY_ADDRESS": address, "RAY_TMPDIR": tempfile.mkdtemp(prefix="rn", dir="/tmp")}
    done = join_as_the_launcher(None, env)
    line = joined_line(done.stdout)
    assert f"the Ray cluster at {address} (RAY_ADDRESS)" in line and "1 node(s), 2 CPUs" in line, (
        done.stdout + done.stderr
    )


def join_as_the_launcher(address: str | None, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A fresh process that joins a Ray with the launcher's ``init_ray(address)`` and leaves it."""
    join = (
        "import sys; from sweeps.driver.cluster import init_ray; import ray; "
        "init_ray(sys.argv[1] if len(sys.argv) > 1 else None, {}); ray.shutdown()"
    )
    return subprocess.run(
        [sys.executable, "-c", join, *([address] if address else [])],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_address_local_starts_a_private_instance_even_with_ray_address_set(head, tmp_path):
    address, _, env, _ = head
    env = {**env, "RAY_ADDRESS": address}
    cmd = [
        sys.executable,
        "-c",
        (
            "import sys; from sweeps.driver.cluster import choose_address; "
            "c = choose_address(sys.argv[1] if len(sys.argv) > 1 else None); print(c.address, '|', c.how)"
        ),
    ]
    local = subprocess.run(
        cmd + ["local"],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert local.stdout.startswith("None | a private local Ray instance"), (
        local.stdout + local.stderr
    )
    nothing = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={
            **{k: v for k, v in env.items() if k != "RAY_ADDRESS"},
            "PYTHONPATH": str(ROOT),
            "RAY_TMPDIR": tempfile.mkdtemp(prefix="rn", dir="/tmp"),
        },
    )
    assert nothing.stdout.startswith("None | a new local Ray instance"), (
        nothing.stdout + nothing.stderr
    )


def test_address_auto_says_which_cluster_ray_found(head):
    """``--address auto`` said "joined the Ray cluster at auto": Ray's search can find another
    one than meant (without a `ray start` address file it takes any GCS running here)."""
    address, _, env, _ = head
    done = join_as_the_launcher("auto", env)
    line = joined_line(done.stdout)
    port = address.rsplit(":", 1)[1]
    assert line.startswith("Ray: joined the Ray cluster at auto (--address), found at "), (
        done.stdout + done.stderr
    )
    assert line.split(", found at ")[1].split(":")[1] == f"{port}", line


def test_the_head_nodes_gcs_answers_the_launchers_probe(head, monkeypatch):
    from sweeps.driver.cluster import what_answers
    from sweeps.driver.gcs_watch import gcs_answers

    address, _, _, _ = head
    host, port = address.rsplit(":", 1)
    assert what_answers(address, host, int(port), timeout=10) is None
    assert gcs_answers(address, timeout=10)
    # a proxy in the environment (no proxy there: nothing listens on port 9) is not asked: gRPC
    # took it, the probes failed against a healthy GCS, and the watch ended the launch as if the
    # head had died
    for name in ("no_proxy", "NO_PROXY", "no_grpc_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("http_proxy", "https_proxy", "grpc_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    assert gcs_answers(address, timeout=5)
    assert what_answers(address, host, int(port), timeout=5) is None


@contextlib.contextmanager
def web_server():
    """A port that takes connections and answers HTTP/1, as a dashboard or any web server does."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_an_address_that_answers_but_not_as_ray_is_refused_in_one_line(tmp_path, scheme):
    """Ray retried such a port for minutes, printing its gcs_client lines, until the launch was
    stopped; its trials were then written as preempted."""
    with web_server() as port:
        address = f"{scheme}127.0.0.1:{port}"
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "sweeps" / "launch.py"),
                str(write_spec(tmp_path, tiny_spec("web"))),
                "--address",
                address,
                "--output",
                str(tmp_path / "out"),
            ],
            cwd=ROOT,
            env={**os.environ, "RAY_TMPDIR": tempfile.mkdtemp(prefix="rw", dir="/tmp")},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    err = done.stderr.strip()
    assert (
        len(err.splitlines()) == 1 and f"{address} (from --address) answers, but not as" in err
    ), err
    assert "ray://HOST:10001" in err and "--address local" in err
    assert not (tmp_path / "out").exists(), "a refused launch wrote its folder, lock or ledger"


def test_an_unreachable_address_is_refused_by_the_dry_run_and_the_launch_writes_nothing(
    tmp_path,
):
    """The dry run asks the address as the launch does (a probe that starts nothing), and the
    launch refused for it leaves no folder, lock, launch.json or budget.json behind."""
    spec = str(write_spec(tmp_path, tiny_spec("gone")))
    for dry in (["--dry-run"], []):
        done = subprocess.run(
            [sys.executable, str(ROOT / "sweeps" / "launch.py"), spec, *dry]
            + ["--address", "127.0.0.1:1", "--output", str(tmp_path / "out")],
            cwd=ROOT,
            env={**os.environ, "RAY_TMPDIR": str(tmp_path / "ray")},
            capture_output=True,
            text=True,
            timeout=120,
        )
        err = done.stderr.strip()
        assert done.returncode == 2, done.stdout[-2000:] + err[-2000:]
        assert err.startswith("error: cannot reach the Ray cluster at 127.0.0.1:1"), err
        assert not (tmp_path / "out").exists(), f"{dry}: a refused launch wrote to disk"


def test_a_grpc_server_that_is_not_a_gcs_is_named_as_such():
    """A Ray Client port given without ray:// speaks gRPC, but none of the GCS's services."""
    import grpc

    from sweeps.driver.cluster import what_answers

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        said = what_answers(f"127.0.0.1:{port}", "127.0.0.1", port, timeout=10)
        assert said is not None and "not Ray's GCS" in said and "ray://HOST:PORT" in said, said
        assert what_answers(f"ray://127.0.0.1:{port}", "127.0.0.1", port, timeout=10) is None
    finally:
        server.stop(None)


def test_a_gcs_that_asks_for_ray_s_token_is_said_with_the_fix(monkeypatch):
    """`ray start --head` turns token authentication on where ~/.ray/auth_token exists (which the
    launcher's own local Ray leaves): a launch without RAY_AUTH_MODE=token retried for 20 s, then
    said "no Ray cluster at ..." and advised starting one. The GCS answers UNAUTHENTICATED."""
    import grpc

    from sweeps.driver.cluster import LaunchError, what_answers

    class AsksForToken(grpc.GenericRpcHandler):
        def service(self, details):
            def refuse(request, context):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "InvalidAuthToken")

            return grpc.unary_unary_rpc_method_handler(refuse)

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=1))
    server.add_generic_rpc_handlers((AsksForToken(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    address = f"127.0.0.1:{port}"
    try:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
        with pytest.raises(LaunchError) as said:
            what_answers(address, "127.0.0.1", port, timeout=10)
        assert f"the Ray cluster at {address} asks for Ray's auth token" in str(said.value)
        assert "export RAY_AUTH_MODE=token" in str(said.value)
        monkeypatch.setenv("RAY_AUTH_MODE", "token")  # this process sends it: Ray's to judge
        assert what_answers(address, "127.0.0.1", port, timeout=10) is None
    finally:
        server.stop(None)


def test_a_lost_head_ends_the_launch_with_the_resume_command_and_75(head, tmp_path):
    """When the head node died, Ray ended the launcher 60 s later from its C++ side: exit 1 (the
    status of a failed trial), no line of the launcher's and no resume command. Its own watch on
    the GCS ends it first (here at 20 s, Ray's wait set to 30 s), with both and exit 75.

    It kills the module's head: the last test here to use it (see ``head``)."""
    address, _, env, proc = head
    cmd = launch_command(tmp_path, "lost_head", 100000, "--address", address)
    env = {**env, "RAY_gcs_rpc_server_reconnect_timeout_s": "30"}
    launch = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    said = []
    try:
        for line in launch.stdout:  # the trial runs on the head
            said.append(line)
            if " 1 running," in line:
                break
        os.killpg(proc.pid, signal.SIGKILL)  # the head node's every Ray process
        killed = time.monotonic()
        said += launch.stdout.readlines()
        launch.wait(timeout=120)
    finally:
        if launch.poll() is None:
            launch.kill()
    out = "".join(said)
    assert launch.returncode == 75, out[-3000:]
    assert time.monotonic() - killed < 30, "Ray's own end came first"
    assert "error: the Ray cluster's head at " in out and "has not answered for" in out, out
    resume = out.split("continue with:\n", 1)[1].splitlines()[0].strip()
    python, script = resume.split()[:2]  # the launcher's own Python, runnable as printed
    assert python.endswith("python") and script == "sweeps/launch.py", resume
    assert "--resume" in resume, resume
    assert f"--address {address}" in resume, resume


def test_online_w_and_b_without_credentials_is_refused_before_anything_is_written(tmp_path):
    """``wandb.mode: online`` with no key is refused (exit 2) before the sweep's folder and its
    lock are made, as the address is: it left an empty sweep folder holding the refused command."""
    from sweeps.spec.signatures import cache_dir

    spec = str(write_spec(tmp_path, tiny_spec("online", wandb={"mode": "online"})))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    # this user's signature cache: under the fresh HOME below it would be rebuilt, importing torch
    # and Lightning (as tests/cluster/test_slurm.py's signatures_cache); nothing when it is off
    cache = cache_dir()
    if cache is not None:
        env["SWEEPS_CACHE_DIR"] = str(cache)
    done = subprocess.run(
        [sys.executable, str(ROOT / "sweeps" / "launch.py"), spec]
        + ["--output", str(tmp_path / "out")],
        cwd=ROOT,
        env={**env, "HOME": str(tmp_path), "RAY_TMPDIR": str(tmp_path / "ray")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = done.stderr.strip()
    assert done.returncode == 2, done.stdout[-2000:] + err[-2000:]
    assert "wandb.mode is online but no W&B credentials were found" in err, err
    assert not (tmp_path / "out").exists(), "a refused launch wrote to disk"
