"""The packages' public names: ``lightning_modules``, ``lightning_modules.fused`` and
``datamodules`` import them on first use (a module ``__getattr__``), and ``dir()`` (tab
completion) still lists every one of them."""

from __future__ import annotations

import subprocess
import sys

import pytest

import lightning_modules


@pytest.mark.parametrize("package", ["lightning_modules", "lightning_modules.fused", "datamodules"])
def test_dir_lists_every_public_name_before_any_is_loaded(package):
    # a fresh interpreter: in this one another test may already have loaded the names
    code = f"import {package} as m; print(sorted(set(m.__all__) - set(dir(m))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"dir({package}) misses {out.stdout.strip()}"


def test_every_public_name_loads():
    for name in lightning_modules.__all__:
        assert getattr(lightning_modules, name) is not None, name
    assert "fastest_precision" in lightning_modules.__all__


@pytest.mark.train  # one training step of three models
def test_the_fused_packages_example_runs_as_written():
    """lightning_modules.fused's docstring example: self-contained, and it trains one step."""
    import textwrap

    import lightning_modules.fused as fused

    lines = []
    for line in fused.__doc__.split("::\n\n", 1)[1].splitlines():
        if line and not line.startswith("    "):
            break
        lines.append(line)
    assert any("train_step" in line for line in lines), "the example block is gone"
    namespace: dict = {}
    exec(textwrap.dedent("\n".join(lines)), namespace)
    assert namespace["losses"].shape == (3,)
    assert namespace["model"].hparams.attention_kwargs["K"] == 4
