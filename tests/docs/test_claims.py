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
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import references  # noqa: E402

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


def test_the_gpu_guide_shows_the_arrangement_the_plan_prints_for_k_vs_length(tmp_path):
    """docs/gpu.md's example of what `resources.gpu: auto` arranges is the dry run's own text
    (the note on which GPU stands in left out), and cluster/README.md's count of groups is the
    plan's."""
    from sweeps.plan.describe import arrangement_lines
    from sweeps.plan.sweep_plan import build_plan

    blocks = re.findall(r"```text\n(.*?)```", GPU_PAGE.read_text(encoding="utf-8"), re.S)
    (shown,) = [b for b in blocks if b.startswith("GPU arrangement")]
    sweep = load_spec("sweeps/k_vs_length.yaml")
    plan = build_plan(sweep, tmp_path)
    said = arrangement_lines(sweep, plan.arrangement)
    said[1] = re.sub(
        r"\(sweeps/plan/step_costs\.json;[^)]*\)", "(sweeps/plan/step_costs.json; ...)", said[1]
    )
    assert shown.strip().splitlines() == said
    m = re.search(r"(\d+) trials in (\d+) groups", flat(CLUSTER))
    planned = plan.fusion.fused or plan.fusion.planned  # planned, whether the arrangement fuses
    assert m and (int(m.group(1)), int(m.group(2))) == (sweep.num_trials, len(planned))


def test_what_the_gpu_guide_says_of_shares_fits_the_batch_script():
    """A share is one training process; with the batch script's CPUs a GPU, resources.cpu: 4 fits
    2 shares a GPU whatever resources.gpu says, and resources.cpu: 1 fits 8."""
    cpus = batch_script_cpus_per_gpu()
    text = flat(GPU_PAGE)
    assert "`cpu: 4` fits 2 shares a GPU" in text and "`resources.cpu: 1` for 8 to a GPU" in text
    spec = load_spec("sweeps/k_vs_length.yaml", overrides=["resources.gpu=0.125"]).spec
    assert shares_per_gpu(spec.resources, cpus) == 2
    spec = load_spec(
        "sweeps/k_vs_length.yaml", overrides=["resources.gpu=0.125", "resources.cpu=1"]
    ).spec
    assert shares_per_gpu(spec.resources, cpus) == 8


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


def test_the_example_with_every_section_has_every_section_but_those_it_names():
    """sweep-file.md's example shows each top-level key of the schema, or its text names the ones it
    leaves out: a new section joins the example or that list."""
    from sweeps.spec.schema import SweepSpec

    page = (ROOT / "docs" / "sweep-file.md").read_text(encoding="utf-8")
    part = page.split("## An example with every section", 1)[1]
    said, block = part.split("```yaml\n", 1)
    shown = yaml.safe_load(block.split("```", 1)[0])
    left_out = set(re.findall(r"`(\w+):`", said))
    missing = sorted(set(SweepSpec.model_fields) - set(shown) - left_out)
    assert not missing, f"sweep-file.md's example shows neither these nor names them: {missing}"
    assert left_out <= set(SweepSpec.model_fields), left_out - set(SweepSpec.model_fields)


def test_the_api_reference_lists_every_registered_mechanism():
    """docs/reference/api/lightning_modules.md names each mechanism class by hand."""
    from lightning_modules import ATTENTION_REGISTRY

    page = (ROOT / "docs" / "reference" / "api" / "lightning_modules.md").read_text(
        encoding="utf-8"
    )
    missing = [
        name
        for name, cls in ATTENTION_REGISTRY.items()
        if f"::: {cls.__module__}.{cls.__qualname__}" not in page
    ]
    assert not missing, f"add a `:::` line for these mechanisms' classes: {missing}"


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


def shown_part_differs(shown: Any, real: Any, where: str = "") -> list[str]:
    """The keys of ``shown`` (a shortened copy of a sweep file's YAML) whose values the file holds
    otherwise: a mapping is compared on the keys it shows, anything else as a whole."""
    if isinstance(shown, dict) and isinstance(real, dict):
        return [
            d
            for k, v in shown.items()
            for d in (
                shown_part_differs(v, real[k], f"{where}{k}.") if k in real else [f"{where}{k}"]
            )
        ]
    return [] if shown == real else [where.rstrip(".")]


def shortened_examples() -> list[tuple[str, str, dict]]:
    """The YAML blocks of the user pages, without a name, that the sentence before them calls a
    shipped sweep file's (``The shipped example is `sweeps/minimal_k.yaml```): page, file, block."""
    out = []
    for page in references.user_pages():
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"```yaml\n(.*?)```", text, re.S):
            before = text[: m.start()].rstrip().rsplit("\n\n", 1)[-1]
            named = re.search(r"shipped example is `(sweeps/\w+\.yaml)`", before)
            data = yaml.safe_load(m.group(1))
            if named and isinstance(data, dict) and "name" not in data:
                out.append((str(page.relative_to(ROOT)), named.group(1), data))
    return out


def test_a_shortened_example_of_a_shipped_file_shows_that_files_values():
    """multi-objective.md's example of minimal_k.yaml showed `grace_period: 1`, the file's cpu and
    smoke profiles' value, where the file has 2: what such an example shows is the file's."""
    examples = shortened_examples()
    assert any(where == "docs/multi-objective.md" for where, _, _ in examples), examples
    for where, file, shown in examples:
        real = yaml.safe_load((ROOT / file).read_text())
        differ = shown_part_differs(shown, real)
        assert not differ, f"{where}: its example of {file} shows other values for {differ}"
    assert shown_part_differs({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3, "d": 4}}) == ["a.c"]
