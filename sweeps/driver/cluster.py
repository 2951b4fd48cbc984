"""Ray and the cluster: connect to (or start) Ray, check that the storage and resources fit the
study, and return what was decided (:class:`ClusterFit`) rather than changing the spec."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from sweeps.driver.cpu_fit import cpu_float16_problem, too_few_cpus, too_few_gpus
from sweeps.errors import LaunchError  # noqa: F401 (raised here; importable from here too)

if TYPE_CHECKING:  # the MPS wrapper on every node imports this module: no pydantic, no pandas
    from sweeps.plan.sweep_plan import Paths
    from sweeps.spec import Sweep


def check_writable(path: str | Path, what: str) -> None:
    """Create the folder ``path`` if needed and write a probe file in it, before anything starts;
    raises :class:`LaunchError` naming ``what`` (``--output``, ``storage.path``) when it can't.
    Buckets (``s3://``, ``gs://``) are left to Ray."""
    text = str(path)
    if "://" in text and not text.startswith("file://"):
        return
    folder = Path(text.removeprefix("file://")).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_text("ok\n")
        probe.unlink()
    except OSError as exc:
        raise LaunchError(
            f"{what} {text}: cannot create or write there ({exc.strerror or exc}); choose a folder you can write to"
        ) from None


# ----------------------------------------------------------------------------------------------
# Ray set-up


def address_parts(address: str) -> tuple[str, int] | None:
    """(host, port) of a cluster address (``HOST:PORT``, ``ray://HOST:10001``), or None where it
    is not one (``auto`` and ``local`` are no cluster's address either)."""
    try:
        parsed = urlparse(address if "://" in address else f"ray://{address}")
        host, port = parsed.hostname, parsed.port
    except ValueError:  # urllib's own complaint about the port or brackets
        return None
    return (host, port) if host and port else None


#: what an address may be, as the errors say it
ADDRESS_FORMS = "expected HOST:PORT, ray://HOST:10001, auto or local"


def check_address(address: str, timeout: float = 5.0, source: str = "--address") -> None:
    """Fail fast with a clear message when a cluster address (from ``source``) can't be reached."""
    if address in ("auto", "local"):
        return
    parts = address_parts(address)
    if parts is None:
        raise LaunchError(f"{source} {address!r}: {ADDRESS_FORMS}")
    host, port = parts
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise LaunchError(
            f"cannot reach the Ray cluster at {address} (from {source}; {exc.strerror or exc}). Is the head node up "
            f"(`ray status` on it), is the port open from here, and is it the GCS port (6379) or the "
            f"Ray Client port (ray://HOST:10001)? Run with --address local for a private instance on this machine."
        ) from None
    other = what_answers(address, host, port, timeout)
    if other is not None:
        raise LaunchError(
            f"{address} (from {source}) answers, but {other}. Give the head node's GCS port (6379 unless "
            f"`ray start --head --port` said otherwise) or its Ray Client port as ray://HOST:10001; "
            f"`ray status` on the head prints its address. Run with --address local for a private "
            f"instance on this machine."
        )


#: gRPC channel options for a probe of the GCS: straight to it, past any ``http_proxy`` /
#: ``grpc_proxy`` in the environment (Ray turns the proxy off for its own channels too)
NO_PROXY = [("grpc.enable_http_proxy", 0)]


def what_answers(address: str, host: str, port: int, timeout: float = 5.0) -> str | None:
    """None where a Ray GCS (``HOST:PORT``) or a gRPC server (``ray://``, Ray Client's) answers at
    ``host:port``; else what answers there, in words. Ray itself would retry for minutes, printing
    its gcs_client lines, at a port that takes the connection but speaks no gRPC (a web server, the
    dashboard) and at a Ray Client port given without ``ray://``. A GCS that asks for a token
    answers UNAUTHENTICATED, which is an answer; under TLS (``RAY_USE_TLS``) this is left to Ray."""
    if os.environ.get("RAY_USE_TLS", "0").lower() not in ("", "0", "false"):
        return None
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc  # docs/internals.md

    # no HTTP proxy, as Ray's own channels: one in http_proxy would answer for any address
    with grpc.insecure_channel(f"{host}:{port}", options=NO_PROXY) as channel:
        try:
            if address.startswith("ray://"):
                grpc.channel_ready_future(channel).result(timeout=timeout)
                return None
            stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout)
        except grpc.FutureTimeoutError:
            return f"not as a gRPC server within {timeout:g} s (is it the Ray Client port?)"
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return "as a gRPC server that is not Ray's GCS (a Ray Client port is given as ray://HOST:PORT)"
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return f"not as Ray's GCS within {timeout:g} s: it speaks no gRPC"
            if code == grpc.StatusCode.UNAUTHENTICATED and not token_mode():
                raise LaunchError(token_needed(address)) from None
    return None


def token_mode() -> bool:
    """Whether this process's Ray sends its auth token (``RAY_AUTH_MODE=token``)."""
    return os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "token"


def token_needed(address: str) -> str:
    """What to do where the GCS at ``address`` asks for Ray's token and this process sends none."""
    return (
        f"the Ray cluster at {address} asks for Ray's auth token (token authentication: `ray start "
        f"--head` turns it on where ~/.ray/auth_token exists, and the launcher's own local Ray "
        f"leaves that file): export RAY_AUTH_MODE=token and run again (the token is read from "
        f"RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH names, else ~/.ray/auth_token: the "
        f"head node's, copied here from another machine). cluster/README.md, section 2."
    )


def check_ddp_dependencies() -> None:
    """DDP trials run Ray Train V2 inside Tune, which needs the dashboard's state API
    (``ray[default]``): without it the worker placement-group cleaner hangs the sweep."""
    from ray._private.utils import get_dashboard_dependency_error

    err = get_dashboard_dependency_error()
    if err is not None:
        raise LaunchError(
            f"resources.workers > 1 (DDP trials) needs ray[default] on every node, not only ray[tune] "
            f'({err}). Install it with `pip install "ray[default]=={_ray_version()}"`, or set resources.workers: 1.'
        )


def _ray_version() -> str:
    import ray

    return ray.__version__


@dataclass(frozen=True)
class RayConnection:
    """Which Ray the launcher joined: ``address`` None for a fresh instance on this machine."""

    address: str | None
    how: str


def choose_address(address: str | None) -> RayConnection:
    """Ray's own convention: ``--address`` if given (``local``: a private new instance), else
    ``RAY_ADDRESS`` if set, else the cluster ``ray start`` runs on this machine if there is one,
    else a fresh local instance."""
    if address == "local":
        return RayConnection(None, "a private local Ray instance (--address local)")
    if address:
        return RayConnection(address, f"the Ray cluster at {address} (--address)")
    env = os.environ.get("RAY_ADDRESS")
    if env:
        return RayConnection(env, f"the Ray cluster at {env} (RAY_ADDRESS)")
    from ray._private.services import find_bootstrap_address

    found = find_bootstrap_address(None)  # what the last `ray start` on this machine wrote
    if found and _reachable(found):
        return RayConnection(found, f"the `ray start` cluster on this machine at {found}")
    return RayConnection(
        None, "a new local Ray instance (no --address, no RAY_ADDRESS, no `ray start` cluster here)"
    )


def _reachable(address: str, timeout: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


#: Ray's lines at every start of a local instance, and the level each logger is held at while it
#: starts: "Token authentication is enabled for this Ray cluster" (the launcher's private instance
#: keeps Ray's default, a token in ~/.ray/auth_token), and "Started a local Ray instance." (the
#: launcher says so itself, and what it joined). Errors, and the worker's warnings, still show.
LOCAL_START_LOGGERS = {
    "ray._private.authentication.authentication_token_setup": logging.ERROR,
    "ray._private.worker": logging.WARNING,
}


@contextlib.contextmanager
def quiet_loggers(levels: dict[str, int]):
    """Each logger of ``levels`` held at its level (or above) while the block runs."""
    loggers = {logging.getLogger(name): level for name, level in levels.items()}
    before = {logger: logger.level for logger in loggers}
    for logger, level in loggers.items():
        logger.setLevel(max(level, logger.level))
    try:
        yield
    finally:
        for logger, level in before.items():
            logger.setLevel(level)


def init_ray(
    address: str | None,
    runtime_env: dict[str, Any],
    num_cpus: int | None = None,
    dashboard: bool = False,
) -> RayConnection:
    """Join the Ray :func:`choose_address` picks (or start one), and say in one line which it is
    (nodes, CPUs, GPUs). ``dashboard``: start a local instance with its dashboard (Ray Train V2,
    used by DDP trials, needs it). Returns what it joined."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if dashboard:
        check_ddp_dependencies()
    conn = choose_address(address)
    if conn.address is not None:
        check_address(
            conn.address, source="RAY_ADDRESS" if "(RAY_ADDRESS)" in conn.how else "--address"
        )
    if ray.is_initialized():
        conn = RayConnection(conn.address, "the Ray instance this process already runs")
    else:
        if conn.address is None:
            print("starting a local Ray instance ...", flush=True)
            # Ray starts an idle worker per CPU for the first driver; Tune's trial actors each get a
            # worker of their own and leave those idle, so they only cost imports and memory
            # (docs/internals.md, "Ray's idle workers")
            os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
            cpus = num_cpus or os.cpu_count() or 1
            with quiet_loggers(LOCAL_START_LOGGERS):
                ray.init(
                    address="local",  # a new instance, even when RAY_ADDRESS or a `ray start` one exists
                    num_cpus=cpus,
                    include_dashboard=dashboard,
                    runtime_env=runtime_env,
                    object_store_memory=min(2 * 2**30, max(78 * 2**20, cpus * 256 * 2**20)),
                    log_to_driver=True,
                )
        else:
            print(f"connecting to {conn.address} ...", flush=True)
            try:
                ray.init(address=conn.address, runtime_env=runtime_env)
            except ConnectionError as exc:
                token = (
                    " If the cluster is up and uses token authentication (~/.ray/auth_token is "
                    "here), export RAY_AUTH_MODE=token and run again."
                    if not token_mode() and (Path.home() / ".ray" / "auth_token").exists()
                    else ""
                )
                raise LaunchError(
                    f"no Ray cluster at {conn.address}: {exc}. Start one (`ray start --head`, see cluster/README.md), "
                    f"or run with --address local for a private instance on this machine.{token}"
                ) from None
            if conn.address == "auto":  # say which one Ray found
                found = ray.get_runtime_context().gcs_address
                conn = RayConnection(conn.address, f"{conn.how}, found at {found}")
    print(f"Ray: joined {conn.how}: {describe_cluster()}", flush=True)
    return conn


def describe_cluster() -> str:
    """``3 node(s), 12 CPUs, 2 GPUs`` of the Ray this process is connected to."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    total = ray.cluster_resources()
    return f"{len(nodes)} node(s), {total.get('CPU', 0):g} CPUs, {total.get('GPU', 0):g} GPUs"


# ----------------------------------------------------------------------------------------------
# Clusters: storage every node can reach, and resources the cluster can give


# Filesystems that live on one machine's disk or memory: a storage path on one of them is not seen
# by the other nodes. Anything else (nfs, nfs4, lustre, gpfs, beegfs, cephfs, fuse.* mounts of a
# bucket...) is taken to be shared.
NODE_LOCAL_FILESYSTEMS = frozenset(
    {
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "zfs",
        "tmpfs",
        "overlay",
        "f2fs",
        "vfat",
        "ramfs",
        "apfs",
    }
)


def filesystem_type(path: str) -> str | None:
    """Type of the filesystem holding ``path`` (from /proc/mounts), or None where unknown."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    target = Path(path).expanduser().resolve()
    best, best_type = -1, None
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        if (target == Path(mount) or Path(mount) in target.parents) and len(mount) > best:
            best, best_type = len(mount), parts[2]
    return best_type


def storage_problem(
    storage: str, node_hosts: set[str], driver_host: str, fstype: str | None
) -> str | None:
    """Why ``storage`` can't hold a sweep on these nodes, or None when it can.

    A local path is fine while every node runs on the driver's host; with nodes on other hosts it
    has to be a shared filesystem (mounted at the same path everywhere) or a bucket.
    """
    if "://" in storage and not storage.startswith("file://"):
        return None
    others = sorted(h for h in node_hosts if h != driver_host)
    if not others:
        return None
    if fstype is None or fstype not in NODE_LOCAL_FILESYSTEMS:
        return None
    return (
        f"storage path {storage} is on this machine's local disk ({fstype}), but the cluster has nodes "
        f"on {len(others)} other host(s) ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); "
        f"their checkpoints would not reach it and a trial moved to another node could not resume. "
        f"Set storage.path to a bucket (s3://BUCKET/sweeps, gs://BUCKET/sweeps) or to a shared "
        f"filesystem mounted at the same path on every node, e.g. --set storage.path=/shared/sweeps "
        f"(see cluster/README.md)."
    )


@dataclass(frozen=True)
class ClusterFit:
    """What :func:`check_cluster` decided for this cluster.

    Attributes:
        gpu: GPUs per trial (per DDP worker when ``workers`` > 1): the spec's request, or 0 when
            no GPU is visible on a local machine.
        max_concurrent_trials: the spec's cap; for DDP trials without one, what the cluster holds
            at once; otherwise the budget Tune gives a grid (200, or 1.1 x the cluster's CPUs).
    """

    gpu: float
    max_concurrent_trials: int | None


def check_cluster(
    sweep: Sweep, paths: Paths, address: str | None, resuming: bool = False
) -> ClusterFit:
    """Fit the sweep to the Ray it is connected to; call after :func:`init_ray`. ``resuming``: a
    ``--resume``, whose refusals name the fixes it can take (:func:`~sweeps.driver.cpu_fit.resumed_fix`).

    - storage: fails with :class:`LaunchError` when a multi-host cluster can't share it;
    - GPUs asked for and offered: fails when this node's torch is a CPU-only build
      (:func:`check_gpu_torch`);
    - no GPU on a local machine: trials fall back to CPU (``gpu`` 0 in the returned fit), unless
      they train at float16 mixed precision, a GPU's only (:class:`LaunchError`); on a cluster
      without GPUs a warning only (an autoscaler may still add GPU nodes);
    - DDP trials: Tune sees only each trial's driver, so unless the spec caps it,
      ``max_concurrent_trials`` is what the cluster's CPUs and GPUs hold at once;
    - other trials without a cap: Tune's own budget for a grid (see :class:`ClusterFit`).
    """
    import ray

    from sweeps.spec.gpu import float16_precisions  # (pydantic: not at the module's top, above)

    if not (address or "").startswith(
        "ray://"
    ):  # through Ray Client, Tune runs on the head, not here
        alive = [n for n in ray.nodes() if n.get("Alive")]
        hosts = {n["NodeManagerAddress"] for n in alive}
        driver_node = ray.get_runtime_context().get_node_id()
        driver_host = next(
            (n["NodeManagerAddress"] for n in alive if n["NodeID"] == driver_node), ""
        )
        local_path = paths.storage.removeprefix("file://")
        problem = storage_problem(paths.storage, hosts, driver_host, filesystem_type(local_path))
        if problem:
            raise LaunchError(problem)

    r = sweep.spec.resources
    gpu, max_concurrent = r.gpu, sweep.spec.max_concurrent_trials
    total = ray.cluster_resources()
    gpus = float(total.get("GPU", 0))
    if r.gpu and gpus:
        check_gpu_torch(address)  # a CPU-only torch beside GPUs stops here, before any trial
    if r.gpu and not gpus:
        if address is None:
            if float16 := float16_precisions(sweep.spec):  # Lightning would train bf16-mixed
                raise LaunchError(cpu_float16_problem(float16, r, resuming))
            print(f"no GPU visible: trials run on CPU (resources.gpu {r.asked_gpu} -> 0)")
            gpu = 0.0
        else:
            print(
                f"warning: the cluster has no GPU now; trials asking for resources.gpu={r.gpu:g} wait "
                f"until GPU nodes join (an autoscaler adds them), or run with --set resources.gpu=0"
            )
    # trials on the CPU hold resources.cpu (on GPUs, auto: what the arrangement gives them)
    on_cpu = not gpu or not gpus or not r.auto_gpu
    cpu_problem = too_few_cpus(r, ray.nodes(), resuming) if on_cpu else None
    if cpu_problem and address is None:  # this machine's own Ray: no node will join it
        raise LaunchError(cpu_problem)
    if cpu_problem:
        print(f"warning: {cpu_problem} (unless larger nodes join: an autoscaler adds them)")
    gpu_problem = too_few_gpus(r, gpu, gpus, address is None, resuming) if gpu and gpus else None
    if gpu_problem and address is None:  # this machine's own Ray: its GPUs are all there is
        raise LaunchError(gpu_problem)
    if gpu_problem:
        print(f"warning: {gpu_problem} (unless GPU nodes join: an autoscaler adds them)")
    if r.workers > 1 and max_concurrent is None:
        per_trial_cpu = 1 + r.workers * r.cpu  # the trial's driver + its workers
        fits = int(float(total.get("CPU", 0)) // per_trial_cpu)
        if gpu and gpus:
            fits = min(fits, int(gpus // (r.workers * gpu)))
        max_concurrent = max(1, fits)
        print(
            f"DDP trials ({r.workers} workers each): at most {max_concurrent} at a time on "
            f"this cluster (set max_concurrent_trials to change it, e.g. on an autoscaling cluster)"
        )
    if max_concurrent is None:
        # Tune's own budget for a grid (200 or 1.1 x the CPUs): every cell's trials go out together,
        # and an autoscaler sees the whole demand. (A custom searcher alone would get one at a time.)
        max_concurrent = max(200, int(1.1 * float(total.get("CPU", 0))))
    return ClusterFit(gpu=gpu, max_concurrent_trials=max_concurrent)


def check_gpu_torch(address: str | None) -> None:
    """A sweep asks for GPUs and the Ray it joined offers some: this process's torch must be able
    to use them. On a node that offers GPUs (the driver's own) a CPU-only torch build stops the
    launch (:class:`LaunchError`); with the GPUs on other nodes only, a warning (those nodes may
    have another install; their trials check for themselves). Through Ray Client (``ray://``)
    this process is on no node of the cluster: nothing to check here."""
    import ray

    # torch (seconds): only a sweep that asks for GPUs checks its build
    from sweeps.integrations.torch_build import cpu_only_torch, gpu_torch_problem, torch_build

    if (address or "").startswith("ray://") or not cpu_only_torch():
        return
    here = ray.get_runtime_context().get_node_id()
    node = next((n for n in ray.nodes() if n.get("NodeID") == here), {})
    gpus = float(node.get("Resources", {}).get("GPU", 0))
    host = node.get("NodeManagerAddress", "this machine")
    problem = gpu_torch_problem(f"the launcher's node {host} ({gpus:g} GPU(s) in Ray)")
    if problem is None:  # the GPUs are declared for placement only (a simulated cluster)
        return
    if gpus:
        raise LaunchError(problem)
    print(
        f"warning: the launcher's {torch_build()} cannot use a GPU; trials asking for "
        f"resources.gpu run on the cluster's GPU nodes and stop at once where those have the same "
        f'build (cluster/README.md, "A CUDA build of torch")',
        flush=True,
    )
