"""requirements/lock.txt agrees with pyproject.toml's bounds, and the check `make venv` runs after
installing it (requirements/check_lock.py) catches a venv that differs from a lock. Static and
in-process: a second or two."""

from __future__ import annotations

import importlib.util
import re
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
