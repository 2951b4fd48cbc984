"""The heatmap command writes one non-blank PNG of the expected size per mechanism."""

from __future__ import annotations

import lightning.pytorch as pl
import matplotlib.image as mpimg
import numpy as np
import pytest
import torch

from lightning_modules import Seq2SeqModule
from lightning_modules.attention import ATTENTION_REGISTRY
from sweeps.report import figures, heatmaps


def check_png(path) -> np.ndarray:
    """A real image with something drawn on it."""
    image = mpimg.imread(path)  # (H, W, C) floats in [0, 1]
    assert image.ndim == 3 and image.shape[2] in (3, 4)
    rgb = image[..., :3]
    assert rgb.std() > 0.02, "blank image"
    assert (rgb < 0.5).mean() > 0.01, "almost nothing drawn"
    return image


@pytest.mark.train
@pytest.mark.parametrize("name", sorted(ATTENTION_REGISTRY))
def test_heatmap_command_writes_a_png_per_mechanism(name, tmp_path, capsys):
    argv = ["--attention", name, "--output", str(tmp_path), "--n", "1", "--max-length", "6"]
    if name == "memory":
        argv += ["--K", "4"]
    paths = heatmaps.main(argv)
    # a model without attention drew an empty alignment without a word (an untrained hard
    # monotonic scan may attend nowhere too: its p starts near sigmoid(-4))
    empty = f"note: {name}'s weights are 0 at every position of every sentence"
    if name != "monotonic":
        assert (empty in capsys.readouterr().out) == (name == "none")
    assert [p.name for p in paths] == [f"{name}_K4_0.png" if name == "memory" else f"{name}_0.png"]
    image = check_png(paths[0])
    if (
        name == "memory"
    ):  # two rows of panels (alpha, beta, combined; then the vectors), side by side
        assert image.shape[1] > image.shape[0]


def test_memory_figure_has_per_vector_panels():
    rng = np.random.default_rng(0)
    alpha, beta = rng.random((7, 10)), rng.random((5, 10))  # (S, K), (T, K)
    item = {
        "source": list("abcdefg"),
        "output": list("vwxyz"),
        "alpha": alpha,
        "beta": beta,
        "weights": beta @ alpha.T,
    }
    fig = figures.heatmap_figure(item, "memory")
    titles = [ax.get_title() for ax in fig.axes if ax.images]  # the panels, not the colour bar
    assert len(titles) == 3 + figures.MAX_VECTOR_PANELS
    top = int(np.argmax(beta.sum(0)))
    assert titles[3].startswith(f"vector k={top + 1} ")  # most-used vector first
    figures.plt.close(fig)


@pytest.mark.train
def test_heatmap_command_reads_a_checkpoint(tmp_path):
    torch.manual_seed(0)
    module = Seq2SeqModule(24, 24, attention="memory", attention_kwargs={"K": 3}, max_source_len=9)
    ckpt = tmp_path / "model.ckpt"
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": pl.__version__,
        },
        ckpt,
    )
    paths = heatmaps.main([str(ckpt), "--output", str(tmp_path / "png"), "--n", "2"])
    assert [p.name for p in paths] == ["memory_K3_0.png", "memory_K3_1.png"]
    check_png(paths[1])
    # a trial's checkpoint folder names its checkpoint, as for the timing command
    again = heatmaps.main([str(tmp_path), "--output", str(tmp_path / "again"), "--n", "2"])
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]
    # a trial's own folder, as results.csv lists them: its last checkpoint, the one the row names
    trial = tmp_path / "trial"
    for kept in ("checkpoint_000009", "checkpoint_000010"):
        (trial / kept).mkdir(parents=True)
        (trial / kept / "checkpoint.ckpt").write_bytes(ckpt.read_bytes())
    torch.manual_seed(1)
    other = Seq2SeqModule(24, 24, attention="memory", attention_kwargs={"K": 3}, max_source_len=9)
    saved = torch.load(ckpt, weights_only=False)
    torch.save(
        {**saved, "state_dict": other.state_dict()}, trial / "checkpoint_000009" / "checkpoint.ckpt"
    )
    last = heatmaps.main([str(trial), "--output", str(tmp_path / "last"), "--n", "2"])
    # the same pixels (the file records another path as its source)
    assert all(np.array_equal(mpimg.imread(a), mpimg.imread(b)) for a, b in zip(last, paths))


@pytest.mark.train
def test_heatmaps_of_another_checkpoint_do_not_overwrite(tmp_path, capsys):
    """One checkpoint's heatmaps never replace another's of the same mechanism in one folder;
    drawn again with a smaller --n, a checkpoint's folder holds the new drawing only."""
    ckpts = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        module = Seq2SeqModule(24, 24, attention="bahdanau", max_source_len=9)
        ckpt = tmp_path / f"seed{seed}.ckpt"
        torch.save(
            {
                "state_dict": module.state_dict(),
                "hyper_parameters": dict(module.hparams),
                "pytorch-lightning_version": pl.__version__,
            },
            ckpt,
        )
        ckpts.append(ckpt)
    out = tmp_path / "png"
    first = heatmaps.main([str(ckpts[0]), "--output", str(out), "--n", "3"])
    assert [p.name for p in first] == ["bahdanau_0.png", "bahdanau_1.png", "bahdanau_2.png"]
    kept = [p.read_bytes() for p in first]
    with pytest.raises(SystemExit):
        heatmaps.main([str(ckpts[1]), "--output", str(out), "--n", "3"])
    said = capsys.readouterr().err
    assert f"drawn from {ckpts[0].resolve()}" in said and "give another --output" in said
    assert [p.read_bytes() for p in first] == kept  # the first checkpoint's files are untouched
    # an untrained model is another source too
    with pytest.raises(SystemExit):
        heatmaps.main(["--attention", "bahdanau", "--output", str(out), "--max-length", "8"])
    again = heatmaps.main([str(ckpts[0]), "--output", str(out), "--n", "1"])
    assert sorted(p.name for p in out.iterdir()) == ["bahdanau_0.png"] == [p.name for p in again]
    assert heatmaps.main([str(ckpts[1]), "--output", str(tmp_path / "other"), "--n", "1"])


def test_heatmap_command_says_when_a_path_holds_no_checkpoint(tmp_path, capsys):
    for path, said in [
        (tmp_path / "nope.ckpt", "not found; pass a Lightning .ckpt file or a trial's checkpoint"),
        (tmp_path, "holds no .ckpt file; pass the .ckpt file itself, or a trial's folder"),
    ]:
        with pytest.raises(SystemExit) as info:
            heatmaps.main([str(path), "--output", str(tmp_path / "png")])
        assert info.value.code == 2 and said in capsys.readouterr().err
    assert not (tmp_path / "png").exists()


def test_heatmap_command_refuses_bad_options_in_one_line(tmp_path, capsys):
    """Each of these ended in a traceback (a bad mechanism, K or preset; --n 0; a file that is no
    checkpoint) or was changed without a word (--min-length above --max-length, --K dropped)."""
    (tmp_path / "empty.ckpt").write_bytes(b"")
    (tmp_path / "a-file").write_text("")
    for argv, said in [
        (["--attention", "foo"], "unknown attention 'foo'; valid names: bahdanau"),
        (["--attention", "foo", "--K", "4"], "unknown attention 'foo'"),
        (["--attention", "memory", "--K", "0"], "K must be >= 1, got 0"),
        (["--attention", "memory", "--preset", "huge"], "unknown preset 'huge'; valid presets"),
        (["--attention", "memory", "--n", "0"], "argument --n: must be at least 1, got 0"),
        (["--attention", "bahdanau", "--K", "4"], "--K is memory attention's"),
        (
            ["--attention", "memory", "--min-length", "9", "--max-length", "5"],
            "--min-length 9 is above",
        ),
        ([], "give a checkpoint (a .ckpt, or a trial's folder) or --attention NAME"),
        # with a checkpoint they were ignored: the checkpoint's own K drawn under the asked one
        ([str(tmp_path / "empty.ckpt"), "--K", "4"], "--K: for --attention; a checkpoint brings"),
        ([str(tmp_path / "empty.ckpt"), "--preset", "base"], "drop --preset"),
        ([str(tmp_path / "empty.ckpt")], "empty.ckpt: an empty file"),
        (
            ["--attention", "memory", "--output", str(tmp_path / "a-file" / "x")],
            "is a file, not a folder",
        ),
    ]:
        with pytest.raises(SystemExit) as info:
            heatmaps.main(
                [*argv, "--output", str(tmp_path / "png")] if "--output" not in argv else argv
            )
        err = capsys.readouterr().err.strip().splitlines()
        assert info.value.code == 2 and said in err[-1] and "Traceback" not in err[0], (argv, err)
    assert not (tmp_path / "png").exists()


def test_heatmap_command_refuses_a_vocabulary_the_checkpoint_lacks_and_a_file_that_is_no_checkpoint(
    tmp_path, capsys
):
    """Each ended in a traceback: --vocab-size above the model's vocabulary (IndexError in the
    embedding), a results.csv given as the checkpoint (IndexError from the unpickler)."""
    module = Seq2SeqModule(24, 24, attention="memory", attention_kwargs={"K": 3}, max_source_len=9)
    ckpt = tmp_path / "model.ckpt"  # 24 tokens: 20 copy-task symbols and the 4 special ones
    saved = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}
    torch.save({**saved, "pytorch-lightning_version": pl.__version__}, ckpt)
    torch.save(saved, tmp_path / "no-version.ckpt")  # Lightning's own KeyError, said as the name
    (tmp_path / "results.csv").write_text("trial_id,val/bleu\na1b2c3d4,12.5\n")
    torch.save({"epoch": 1}, tmp_path / "other.pt")
    for argv, said in [
        (
            [str(ckpt), "--vocab-size", "50"],
            "--vocab-size 50: the checkpoint's model knows 20 symbols; drop --vocab-size or give "
            "at most 20",
        ),
        (
            [str(tmp_path / "results.csv")],
            "results.csv: not a file torch.save wrote; pass a Lightning checkpoint (a .ckpt file",
        ),
        (
            [str(tmp_path / "other.pt")],
            "other.pt: a torch file, but not a Lightning checkpoint (it has no "
            "'pytorch-lightning_version'",
        ),
        (
            [str(tmp_path / "no-version.ckpt")],
            "no-version.ckpt: a torch file, but not a Lightning checkpoint (it has no "
            "'pytorch-lightning_version'",
        ),
    ]:
        with pytest.raises(SystemExit) as info:
            heatmaps.main([*argv, "--output", str(tmp_path / "png")])
        err = capsys.readouterr().err.strip().splitlines()
        assert info.value.code == 2 and said in err[-1] and "Traceback" not in err[0], (argv, err)
    assert not list((tmp_path / "png").glob("*.png"))


@pytest.mark.train
def test_memory_figure_grows_a_column_per_memory_vector(tmp_path):
    """Six vectors draw twice as wide as three (one panel each below alpha, beta and the combined
    alignment), at the same height: the panels are not squeezed."""
    rng = np.random.default_rng(0)
    widths, heights = {}, {}
    for k in (3, 6):
        alpha, beta = rng.random((7, k)), rng.random((5, k))  # (S, K), (T, K)
        fig = figures.heatmap_figure(
            {"alpha": alpha, "beta": beta, "weights": beta @ alpha.T}, f"K={k}"
        )
        assert len([ax for ax in fig.axes if ax.images]) == 3 + k  # and the colour bar
        image = check_png(figures.save_figure(fig, tmp_path / f"k{k}.png"))
        heights[k], widths[k] = image.shape[:2]
    assert heights[6] == heights[3] and widths[6] == pytest.approx(2 * widths[3], abs=2)
