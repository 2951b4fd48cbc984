"""requirements/lock.txt agrees with pyproject.toml's bounds, and the check `make venv` runs after
installing it (requirements/check_lock.py) catches a venv that differs from a lock. Static and
in-process: a second or two."""

from __future__ import annotations

import functools
import hashlib
import http.server
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"


@pytest.fixture(scope="module")
def check_lock():
    spec = importlib.util.spec_from_file_location(
        "check_lock", ROOT / "requirements" / "check_lock.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_lock"] = module  # (its dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    raw = [*project["dependencies"], *(r for e in ("sweep", "dev", "docs") for r in extras[e])]
    return [Requirement(r) for r in raw]


def test_every_locked_version_is_within_pyprojects_bounds(check_lock):
    pins, python = check_lock.read_lock(LOCK)
    assert python == "3.11", f"the lock was made with Python {python}; CI runs 3.11"
    outside = [
        f"{req.name}{req.specifier} (locked {pins[name]})"
        for req in project_requirements()
        if (name := check_lock.canonical(req.name)) in pins
        and not req.specifier.contains(Version(pins[name]), prereleases=True)
    ]
    missing = [r.name for r in project_requirements() if check_lock.canonical(r.name) not in pins]
    assert not outside, f"locked outside the bounds: {outside}; run `make lock`"
    assert not missing, f"required but not locked: {missing}; run `make lock`"


def test_the_check_names_a_package_at_another_version_and_one_missing(check_lock, tmp_path, capsys):
    """A lock written from this venv's own versions matches; one pin changed, or a needed package
    taken out, fails and says which."""
    have, need = check_lock.installed(), check_lock.needed()
    if not need:
        pytest.skip("the project is not installed in this venv")
    lines = [f"{name}=={have[name]}" for name in sorted(need) if name in have]
    lock = tmp_path / "lock.txt"
    lock.write_text("\n".join(lines) + "\n")
    assert check_lock.main([str(lock)]) == 0
    changed = re.sub(r"^ray==\S+", "ray==0.0.1", lock.read_text(), flags=re.M)
    lock.write_text("\n".join(ln for ln in changed.splitlines() if not ln.startswith("pyyaml==")))
    assert check_lock.main([str(lock)]) == 1
    said = capsys.readouterr().err
    assert f"ray {have['ray']} (locked: 0.0.1)" in said
    assert f"pyyaml {have['pyyaml']} (locked: not in the lock)" in said
    assert check_lock.main([str(lock), "--report"]) == 0, "--report never fails"


# ----------------------------------------------------------------------------------------------
# torch's build is the platform's choice: the check against the recorded metadata of real builds

BUILDS = ROOT / "tests" / "data" / "torch_builds"
#: what a macOS machine's markers read (the record's Linux-only requirements drop out)
MACOS = {"platform_system": "Darwin", "sys_platform": "darwin", "platform_machine": "arm64"}


def recorded(name: str) -> dict:
    """A recorded build: name -> {version, requires} (tests/data/torch_builds/, each file saying
    where its metadata was read)."""
    return json.loads((BUILDS / name).read_text())["dists"]


def venv_of(check_lock, dists: dict, torch_version: str | None = None) -> dict:
    out = {n: check_lock.Dist(d["version"], tuple(d["requires"])) for n, d in dists.items()}
    if torch_version is not None:
        out["torch"] = check_lock.Dist(torch_version, out["torch"].requires)
    return out


@pytest.fixture(scope="module")
def cpu_lock() -> dict[str, str]:
    """The pins a lock made with the CPU build has for torch and what it brings (the record's)."""
    return {n: d["version"] for n, d in recorded("torch-2.13.0+cpu-linux-x86_64.json").items()}


def test_the_recorded_cpu_build_is_the_locked_one(check_lock, cpu_lock):
    pins, _ = check_lock.read_lock(LOCK)
    assert pins["torch"] == cpu_lock["torch"] == "2.13.0+cpu", (
        "requirements/lock.txt's torch moved: record its builds again (tests/data/torch_builds/)"
    )
    assert {n: pins.get(n) for n in cpu_lock} == cpu_lock, "the lock pins torch's dependencies so"


def cuda_world(check_lock, torch_version: str | None = None) -> dict:
    return venv_of(check_lock, recorded("torch-2.13.0-pypi-linux-x86_64.json"), torch_version)


def macos_world(check_lock) -> dict:
    world = venv_of(check_lock, recorded("torch-2.13.0+cpu-linux-x86_64.json"))
    world["torch"] = venv_of(check_lock, recorded("torch-2.13.0-pypi-macosx-arm64.json"))["torch"]
    return world


@pytest.mark.parametrize(
    ("build", "environment", "runtime"),
    [
        ("2.13.0+cpu", None, False),  # PyTorch's CPU index, as locked
        ("2.13.0", None, True),  # the public index's Linux wheel: a CUDA 13.0 build
        ("2.13.0+cu130", None, True),  # PyTorch's CUDA 13.0 index (the same requirements)
        ("2.13.0 macOS", MACOS, False),  # the public index's macOS wheel: a CPU build
    ],
)
def test_each_build_of_the_locked_torch_matches_the_lock(
    check_lock, cpu_lock, build, environment, runtime
):
    if build == "2.13.0+cpu":
        world = venv_of(check_lock, recorded("torch-2.13.0+cpu-linux-x86_64.json"))
    elif build == "2.13.0 macOS":
        world = macos_world(check_lock)
    else:
        world = cuda_world(check_lock, build)
    assert world["torch"].version == build.split()[0]
    found = check_lock.compare(cpu_lock, world, project="torch", extras=(), environment=environment)
    assert found.wrong == [], found.wrong
    brought = {n for n in world if n not in cpu_lock}
    assert set(found.platform) == brought
    if runtime:  # the record's CUDA runtime: every one allowed, none by accident
        assert {"nvidia-cublas", "nvidia-cudnn-cu13", "cuda-bindings", "triton"} <= brought
        assert all(n.startswith(("nvidia-", "cuda-")) or n == "triton" for n in brought)
    else:
        assert not brought


def test_a_cuda_build_still_fails_on_another_release_or_dependency(check_lock, cpu_lock):
    """The platform's choice covers the build's label and its CUDA runtime, nothing else."""
    world = cuda_world(check_lock, "2.12.0+cu130")
    assert check_lock.compare(cpu_lock, world, project="torch", extras=()).wrong == [
        "torch 2.12.0+cu130 (locked: 2.13.0+cpu)"
    ]
    world = cuda_world(check_lock)
    torch = world["torch"]
    world["torch"] = check_lock.Dist(torch.version, (*torch.requires, "new-dependency"))
    world["new-dependency"] = check_lock.Dist("1.0")
    world["sympy"] = check_lock.Dist("1.13.3", world["sympy"].requires)
    wrong = check_lock.compare(cpu_lock, world, project="torch", extras=()).wrong
    assert wrong == [
        "new-dependency 1.0 (locked: not in the lock)",
        f"sympy 1.13.3 (locked: {cpu_lock['sympy']})",
    ]


def test_a_cuda_package_the_project_itself_needs_is_no_platform_choice(check_lock, cpu_lock):
    world = cuda_world(check_lock)
    world["project"] = check_lock.Dist("0", ("torch", "nvidia-ml-py"))
    world["nvidia-ml-py"] = check_lock.Dist("13.0")
    found = check_lock.compare(cpu_lock, world, project="project", extras=())
    assert found.wrong == ["nvidia-ml-py 13.0 (locked: not in the lock)"]
    assert "nvidia-ml-py" not in found.platform and "nvidia-cublas" in found.platform


# ----------------------------------------------------------------------------------------------
# Where `make venv` takes torch from: requirements/torch_index.py


@pytest.fixture(scope="module")
def torch_index():
    spec = importlib.util.spec_from_file_location(
        "torch_index", ROOT / "requirements" / "torch_index.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WHEEL = "torch-2.13.0+cpu-py3-none-any.whl"


def fake_torch_wheel(folder: Path) -> Path:
    """A wheel named as a CPU build of torch, holding only its metadata."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / WHEEL
    info = "torch-2.13.0+cpu.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(
            f"{info}/METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n"
        )
        whl.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        whl.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def index(tmp_path):
    """A PEP 503 index on localhost serving the fake CPU build of torch; yields its URL."""
    root = tmp_path / "index"
    digest = hashlib.sha256(fake_torch_wheel(root / "torch").read_bytes()).hexdigest()
    quoted = WHEEL.replace("+", "%2B")
    (root / "torch" / "index.html").write_text(f'<a href="{quoted}#sha256={digest}">{WHEEL}</a>\n')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


def test_no_index_or_one_that_does_not_answer_costs_one_short_request(torch_index, tmp_path):
    assert torch_index.choose("", 5, None, [])[0] == ""
    with socket.socket() as s:  # a port nobody listens on: refused at once
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/whl/cpu"
    start = time.monotonic()
    option, why = torch_index.choose(url, 5, None, [])
    assert option == "" and "unreachable" in why and "public index" in why
    assert time.monotonic() - start < 2


def test_an_index_that_answers_is_added_unless_pip_holds_its_wheel(torch_index, index):
    assert torch_index.choose(index, 5, None, []) == (
        f"--extra-index-url {index}",
        f"torch from {index} where it has a build for this machine",
    )
    assert torch_index.wheel_names((ROOT / "README.md").read_text()) == set()
    torch_index_page = torch_index.torch_page(index, 5)[0]
    assert torch_index.wheel_names(torch_index_page) == {WHEEL}
    assert torch_index.choose(index + "nothing/", 5, None, [])[0] == ""  # 404: no torch page


def pip_env(monkeypatch, find_links: Path | None):
    """pip with no configuration of its own, as on a stock machine, and ``find_links``."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        monkeypatch.delenv(name, raising=False)
    if find_links is not None:
        monkeypatch.setenv("PIP_FIND_LINKS", str(find_links))
    monkeypatch.setenv("PIP_NO_INDEX", "0")
    return str(Path(sys.executable).parent / "pip")


@pytest.mark.train  # pip in a fresh process, 3 s
def test_pip_takes_the_index_s_copy_of_a_wheel_its_find_links_hold(
    torch_index, index, tmp_path, monkeypatch
):
    """Why requirements/torch_index.py asks pip first: with the same build in a local folder and
    on the index, pip downloads the index's; so the index is left out where pip holds the file."""
    local = tmp_path / "wheels"
    fake_torch_wheel(local)
    pin = tmp_path / "cpu.txt"
    pin.write_text("torch==2.13.0\n")
    pip = pip_env(monkeypatch, local)
    report = tmp_path / "report.json"
    command = [pip, "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet"]
    command += ["--index-url", index, "--report", str(report), "-c", str(pin), "torch"]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (chosen,) = json.loads(report.read_text())["install"]
    assert chosen["metadata"]["version"] == "2.13.0+cpu"
    assert chosen["download_info"]["url"].startswith(index), "pip took the local copy after all"
    assert torch_index.local_torch(pip, ["-c", str(pin)]) == WHEEL
    option, why = torch_index.choose(index, 5, pip, ["-c", str(pin)])
    assert option == "" and "find-links already hold" in why
    pip = pip_env(monkeypatch, None)  # a stock machine: nothing local, the index is added
    assert torch_index.local_torch(pip, ["-c", str(pin)]) is None
    assert torch_index.choose(index, 5, pip, ["-c", str(pin)])[0] == f"--extra-index-url {index}"
