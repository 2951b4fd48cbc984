"""What the user pages say about the shipped sweep files and the GPU path agrees with the code:
the GPU advice fits the shipped sweeps and the batch script, the trial counts the pages give are
the fusion plan's, every shipped smoke profile keeps off the GPU, a sweep-file example that takes a
shipped file's name is that file, and the GPU pages can be found from where a user starts.

Reads the pages and plans the sweeps (no Ray, no torch): about a second.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import references  # noqa: E402

from sweeps.plan.fusion import plan_fusion
from sweeps.spec import load_spec

ROOT = references.ROOT
GPU_PAGE = ROOT / "docs" / "gpu.md"
CLUSTER = ROOT / "cluster" / "README.md"
SWEEP_FILES = sorted((ROOT / "sweeps").glob("*.yaml"))


def flat(path: Path) -> str:
    return re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))


def batch_script_cpus_per_gpu() -> float:
    """The CPUs a GPU comes with in cluster/slurm.sbatch (its #SBATCH lines)."""
    text = (ROOT / "cluster" / "slurm.sbatch").read_text()
    cpus = int(re.search(r"^#SBATCH --cpus-per-task=(\d+)", text, re.M).group(1))
    gpus = int(re.search(r"^#SBATCH --gpus-per-node=(\d+)", text, re.M).group(1))
    return cpus / gpus


def shares_per_gpu(resources, cpus_per_gpu: float) -> int:
    """How many trials' shares Ray fits on one GPU of a node: as many as both the GPU fraction
    and the CPUs that come with the GPU allow."""
    return int(min(1 / resources.gpu, cpus_per_gpu / resources.cpu) + 1e-9)


def test_the_gpu_guide_s_command_puts_8_graphed_unfused_trials_on_a_gpu():
    """docs/gpu.md's command for 8 to a GPU sets resources.cpu too: with the shipped cpu: 4 and the
    batch script's CPUs, Ray would fit only 2 a GPU whatever resources.gpu says."""
    blocks = re.findall(r"```bash\n(.*?)```", GPU_PAGE.read_text(encoding="utf-8"), re.S)
    (command,) = [b for b in blocks if "k_vs_length.yaml" in b and "--set" in b]
    overrides = re.findall(r"--set (\S+)", command)
    cpus = batch_script_cpus_per_gpu()
    shipped = load_spec("sweeps/k_vs_length.yaml")
    assert shares_per_gpu(shipped.spec.resources, cpus) == 2
    advised = load_spec("sweeps/k_vs_length.yaml", overrides=overrides)
    assert shares_per_gpu(advised.spec.resources, cpus) == 8
    assert advised.spec.trainer.cuda_graphs and advised.spec.resources.mps == "auto"
    assert plan_fusion(advised).fused == [], "graphed trials train unfused, as the page says"
    without_cpu = [o for o in overrides if not o.startswith("resources.cpu")]
    assert (
        shares_per_gpu(
            load_spec("sweeps/k_vs_length.yaml", overrides=without_cpu).spec.resources, cpus
        )
        == 2
    )


@pytest.mark.parametrize(
    ("page", "pattern"),
    [
        (
            GPU_PAGE,
            r"`k_vs_length\.yaml` \(`resources\.gpu: ([\d.]+)`\) trains its (\d+) trials in (\d+) "
            r"fused groups of (\d+) and puts (\d+) groups, (\d+) trials, on each GPU",
        ),
        (
            CLUSTER,
            r"`k_vs_length\.yaml` \(`gpu: ([\d.]+)`\) puts (\d+) groups of (\d+), (\d+) trials",
        ),
    ],
)
def test_what_the_pages_say_k_vs_length_puts_on_a_gpu_is_the_plan(page, pattern):
    """A fused group holds one trial's share, its members 1/n each: two shares of a GPU are two
    groups of a cell's 3 seeds, 6 trials (not "two trials", as the pages once said)."""
    m = re.search(pattern, flat(page))
    assert m, f"{page.name} no longer says what k_vs_length.yaml puts on a GPU"
    sweep = load_spec("sweeps/k_vs_length.yaml")
    plan = plan_fusion(sweep)
    sizes = {len(g.slots) for g in plan.fused}
    assert len(sizes) == 1 and not [g for g in plan.groups if g.name is None]
    (size,) = sizes
    groups = shares_per_gpu(sweep.spec.resources, batch_script_cpus_per_gpu())
    said = [float(x) if "." in x else int(x) for x in m.groups()]
    if page == GPU_PAGE:
        gpu, trials, n_groups, group, per_gpu, trials_per_gpu = said
        assert (trials, n_groups) == (sweep.num_trials, len(plan.fused))
    else:
        gpu, per_gpu, group, trials_per_gpu = said
    assert gpu == sweep.spec.resources.gpu and group == size
    assert (per_gpu, trials_per_gpu) == (groups, groups * size)


def test_every_shipped_smoke_profile_keeps_off_the_gpu():
    """The pages say --smoke never touches the GPU; the sweep files make it so."""
    for path in SWEEP_FILES:
        smoke = load_spec(str(path), profile="smoke")
        assert smoke.spec.resources.gpu == 0, f"{path.name}'s smoke profile asks for a GPU"
    for page in (GPU_PAGE, CLUSTER, ROOT / "docs" / "running.md"):
        assert "sets `resources.gpu: 0`" in flat(page), f"{page.name} no longer says it"


def yaml_examples() -> list[tuple[str, dict]]:
    """The YAML blocks of the user pages that are whole sweep files (they have a name)."""
    out = []
    for page in references.user_pages():
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            try:
                data = yaml.safe_load(block)
            except yaml.YAMLError:
                continue
            if isinstance(data, dict) and "name" in data:
                out.append((str(page.relative_to(ROOT)), data))
    return out


def test_a_sweep_file_example_loads_and_one_named_after_a_shipped_file_is_that_file(tmp_path):
    examples = yaml_examples()
    assert any(where == "docs/sweep-file.md" for where, _ in examples)
    for where, data in examples:
        shipped = ROOT / "sweeps" / f"{data['name']}.yaml"
        if shipped.exists():
            real = yaml.safe_load(shipped.read_text())
            differ = sorted(k for k in data if data[k] != real.get(k))
            assert not differ, (
                f"{where}: its example is named {data['name']}, but differs in {differ}"
            )
        else:
            path = tmp_path / f"{data['name']}.yaml"
            path.write_text(yaml.safe_dump(data))
            assert load_spec(str(path)).num_trials > 0, where


def test_the_gpu_pages_are_found_from_where_a_user_starts():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/gpu.md)" in readme and "(docs/fusion.md)" in readme
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    start = index.split("## Where to start", 1)[1].split("\n## ", 1)[0]
    assert "(gpu.md)" in start and "(fusion.md)" in start
    cluster = CLUSTER.read_text(encoding="utf-8")
    section = cluster.split("### On GPUs", 1)[1].split("\n### ", 1)[0]
    for needed in ("docs/gpu.md", "MPS", "Fused trials", "CUDA graphs", "resources.cpu"):
        assert needed in section, f"cluster/README.md's GPU section says nothing of {needed}"
