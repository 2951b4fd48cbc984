"""``python -m sweeps.heatmaps`` on a trial's checkpoint draws the trial's own validation
sentences, the ones its val_references.txt holds and its W&B heatmaps showed. It drew a new copy
task instead (seed 0, lengths from 1, ``--n`` sentences), whose sentences no ``--data-seed`` gave
back: the validation set's lengths are drawn before its tokens, so its size shifts them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from datamodules import CopyTaskDataModule
from lightning_modules import Seq2SeqModule
from sweeps.layout import REFERENCES_FILE
from sweeps.report import figures, heatmaps
from sweeps.trial.callbacks import write_hypotheses

pytestmark = pytest.mark.train  # trains a tiny model for two steps and validates it


@pytest.fixture
def trial_checkpoint(tmp_path, quiet_trainer) -> Path:
    """A trial's checkpoint folder as a sweep leaves it: ``trainer.fit(model, datamodule=dm)``'s
    checkpoint (with its data settings) and the validation references beside it. The data are
    not the command's old defaults: seed 3, lengths from 0, 12 validation sentences."""
    dm = CopyTaskDataModule(
        vocab_size=9, max_length=6, min_length=0, train_size=32, val_size=12, batch_size=8, seed=3
    )
    dm.setup("fit")
    torch.manual_seed(0)
    module = Seq2SeqModule(
        dm.src_vocab_size,
        dm.tgt_vocab_size,
        attention="memory",
        attention_kwargs={"K": 3},
        preset="tiny",
        max_source_len=dm.max_source_len,
    )
    trainer = quiet_trainer(max_steps=2, num_sanity_val_steps=0)
    trainer.fit(module, datamodule=dm)
    trainer.validate(module, datamodule=dm, verbose=False)  # decodes the whole validation set
    folder = tmp_path / "trial" / "checkpoint_000001"
    folder.mkdir(parents=True)
    trainer.save_checkpoint(folder / "checkpoint.ckpt")
    write_hypotheses(module, str(folder))
    return folder


@pytest.fixture
def kept(monkeypatch) -> list:
    """The figures the command draws, kept open to be read rather than saved."""
    drawn: list = []

    def keep(fig, path, *args, **kwargs):
        drawn.append(fig)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    monkeypatch.setattr(heatmaps, "save_figure", keep)
    yield drawn
    figures.plt.close("all")


def sentences(drawn: list) -> list[str]:
    """Each figure's source sentence, read from its alignment panel's x tick labels (EOS dropped)."""
    out = []
    for fig in drawn:
        panel = next(ax for ax in fig.axes if ax.get_title().startswith(("alignment", "combined")))
        tokens = [t.get_text() for t in panel.get_xticklabels()]
        assert tokens and tokens[-1] == "</s>", tokens
        out.append(" ".join(tokens[:-1]))
    return out


def test_the_command_draws_a_trial_s_own_validation_sentences(
    trial_checkpoint, kept, tmp_path, capsys
):
    references = (trial_checkpoint / REFERENCES_FILE).read_text().splitlines()
    assert len(references) == 12
    paths = heatmaps.main(
        [str(trial_checkpoint.parent), "--output", str(tmp_path / "png"), "--n", "5"]
    )
    assert [p.name for p in paths] == [f"memory_K3_{i}.png" for i in range(5)]
    assert sentences(kept) == references[:5]
    said = capsys.readouterr().out
    assert "the first 5 of the trial's validation set" in said
    assert "min_length=0, val_size=12, seed=3" in said

    # an option overrides a stored setting: another draw, and the command says it is not the trial's
    kept.clear()
    heatmaps.main(
        [str(trial_checkpoint), "--output", str(tmp_path / "other"), "--n", "5", "--data-seed", "4"]
    )
    assert sentences(kept) != references[:5]
    assert "--data-seed given, so not the trial's" in capsys.readouterr().out
    # one repeating the stored setting changes nothing, and is not said to
    kept.clear()
    heatmaps.main(
        [str(trial_checkpoint), "--output", str(tmp_path / "same"), "--n", "5", "--min-length", "0"]
    )
    assert sentences(kept) == references[:5]
    assert "the first 5 of the trial's validation set" in capsys.readouterr().out


def test_more_sentences_than_the_trial_validated_on_draws_its_whole_validation_set(
    trial_checkpoint, kept, tmp_path
):
    references = (trial_checkpoint / REFERENCES_FILE).read_text().splitlines()
    paths = heatmaps.main([str(trial_checkpoint), "--output", str(tmp_path / "png"), "--n", "20"])
    assert len(paths) == 12 and sentences(kept) == references
