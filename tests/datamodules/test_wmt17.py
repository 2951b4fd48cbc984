"""WMT'17 data path on real text: tests/data/wmt-ende-tiny (1,000 + 50 real en-de pairs)."""

from __future__ import annotations

import gzip
import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import datamodules.wmt_text
from datamodules import WMT17DataModule
from datamodules.bpe import read_lines
from datamodules.bucketing import TokenBucketBatchSampler
from datamodules.wmt17 import PAIR_DEFAULTS
from datamodules.wmt_text import bleu_scores, moses_detokenize, unescape

TINY = Path(__file__).resolve().parents[1] / "data" / "wmt-ende-tiny"
# The 10k-pair sample corpus: MEMATTN_SHARED_DATA (a folder holding wmt-ende-sample/), else the
# `shared/` folder beside the repository; the tests that need it skip, saying so, when it is absent.
SAMPLE = (
    Path(
        os.environ.get("MEMATTN_SHARED_DATA")
        or Path(__file__).resolve().parents[3] / "shared" / "data"
    )
    / "wmt-ende-sample"
)
VOCAB = 800
BUDGET = 1200


def make_dm(cache_dir, pair: str = "en-de", data_dir=TINY, **kw) -> WMT17DataModule:
    args = dict(
        pair=pair,
        data_dir=str(data_dir),
        vocab_size=VOCAB,
        max_length=100,
        batch_tokens=BUDGET,
        valid_prefix="valid",
        test_prefix="",
        cache_dir=None if cache_dir is None else str(cache_dir),  # None: <data_dir>/.cache
    )
    args.update(kw)
    return WMT17DataModule(**args)


#: every text file of the tiny corpus: train, valid and test, both sides
ALL_TINY = tuple(f"{split}.{lang}" for split in ("train", "valid", "test") for lang in ("en", "de"))


def copy_tiny(to: Path, names=("train.en", "train.de", "valid.en", "valid.de")) -> Path:
    """A writable copy of the tiny corpus's ``names`` in the folder ``to`` (made if missing): a
    data_dir a test may break."""
    to.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(TINY / name, to / name)
    return to


@pytest.fixture(scope="module")
def dm(tmp_path_factory) -> WMT17DataModule:
    d = make_dm(tmp_path_factory.mktemp("wmt-cache"))
    d.prepare_data()
    d.setup("fit")
    return d


def test_bpe_trained_once_then_cache_hit_for_both_directions(tmp_path):
    first = make_dm(tmp_path)
    first.prepare_data()
    first.setup("fit")
    assert first.cache_report["bpe"] == "trained"
    assert first.cache_report["train.en"] == "encoded"
    mtime = os.path.getmtime(first.bpe_model_path)
    for pair in ("en-de", "de-en"):  # a new trial, either direction: nothing is rebuilt
        again = make_dm(tmp_path, pair=pair)
        again.prepare_data()
        again.setup("fit")
        assert set(again.cache_report.values()) == {"hit"}, again.cache_report
        assert again.bpe_model_path == first.bpe_model_path
        assert again.src_vocab_size == again.tgt_vocab_size == first.src_vocab_size
    assert os.path.getmtime(first.bpe_model_path) == mtime
    assert len(list(tmp_path.glob("bpe-*.model"))) == 1
    assert not list(tmp_path.glob(".*"))  # no temporary leftovers


# Runs in a bare interpreter: imports datamodules.bpe (numpy + sentencepiece only, no torch
# import: checked). Every sentencepiece training appends a line to a marker file and lasts >= 2 s, and
# both racers wait until both are ready, so without the lock both would train (two marker lines).
_RACER = r"""
import json, os, sys, time
import sentencepiece as spm
import datamodules.bpe as bpe
assert "torch" not in sys.modules, "datamodules.bpe imported torch"
cache, ready_dir, marker, me, files = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
real_train = spm.SentencePieceTrainer.train
def counted_train(*args, **kwargs):
    with open(marker, "a") as fh:
        fh.write(me + "\n")
    time.sleep(2.0)  # the other racer is surely past its own cache check by now
    return real_train(*args, **kwargs)
spm.SentencePieceTrainer.train = counted_train
open(os.path.join(ready_dir, me), "w").close()
while len(os.listdir(ready_dir)) < 2:
    time.sleep(0.002)
model, hit = bpe.ensure_bpe_model(files, cache, int(os.environ["VOCAB"]), num_threads=1)
corpus, tok_hit = bpe.ensure_encoded(files[1], model, cache, num_threads=1)
print(json.dumps([hit, tok_hit, len(corpus), corpus.n_tokens]))
"""


@pytest.mark.train
def test_two_processes_at_once_build_each_cache_once(tmp_path):
    bpe_py = Path(__file__).resolve().parents[2] / "datamodules" / "bpe.py"
    ready, marker, cache = tmp_path / "ready", tmp_path / "trainings", tmp_path / "cache"
    ready.mkdir()
    env = dict(os.environ, VOCAB=str(VOCAB))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _RACER,
                str(bpe_py),
                str(cache),
                str(ready),
                str(marker),
                str(i),
                str(TINY / "train.de"),
                str(TINY / "train.en"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert len(marker.read_text().splitlines()) == 1  # one training, though both raced for it
    assert sorted(r[0] for r in results) == [False, True]  # one trained, the other reused it
    assert sorted(r[1] for r in results) == [False, True]
    assert results[0][2:] == results[1][2:] and results[0][2] == 1000
    assert len(list(cache.glob("bpe-*.model"))) == 1
    assert not list(cache.glob(".*"))  # no half-written temporaries left


def test_round_trip_text_ids_text_is_exact(dm):
    for split in ("train", "valid"):
        for lang in ("en", "de"):
            lines = read_lines(str(TINY / f"{split}.{lang}"))
            for line in lines:
                ids = dm.text_to_ids(line) + [dm.eos_id, 7, 9]  # decoding stops at EOS
                assert dm.ids_to_text(ids) == (line if line.strip() else "")
    # the cached binary corpus decodes to the file too
    corpus = dm.datasets["valid"].tgt
    refs = read_lines(str(TINY / "valid.de"))
    assert [dm.ids_to_text(corpus[i].tolist()) for i in range(len(corpus))] == refs
    assert dm.ids_to_text(torch.tensor([dm.bos_id, *dm.text_to_ids("Haus"), dm.pad_id])) == "Haus"
    # an unknown token a model emits stays in the text, as sentencepiece's mark: a wrong word
    # for BLEU (which splits at whitespace), where dropping it would score "Haus <unk> Haus" as
    # "Haus Haus"; one space each side, as between words (sentencepiece's own writing, " ⁇ ",
    # beside the next word's space gives two)
    haus, unk = dm.text_to_ids("Haus"), dm.unk_id
    assert dm.ids_to_text([*haus, unk, *haus, dm.eos_id]) == "Haus ⁇ Haus"
    assert dm.ids_to_text([unk, *haus, unk, unk]) == "⁇ Haus ⁇ ⁇"
    assert dm.ids_to_text([unk, dm.eos_id, *haus]) == "⁇"


@pytest.mark.train
@pytest.mark.skipif(
    not SAMPLE.is_dir(), reason=f"needs the sample corpus at {SAMPLE} (set MEMATTN_SHARED_DATA)"
)
def test_round_trip_on_the_whole_10k_sample(tmp_path):
    d = make_dm(tmp_path, data_dir=SAMPLE, vocab_size=4000)
    d.setup("fit")
    for lang in ("en", "de"):
        lines = read_lines(str(SAMPLE / f"train.{lang}"))
        corpus = d.datasets["train"].src if lang == "en" else d.datasets["train"].tgt
        decoded = [d.ids_to_text(corpus[i].tolist()) for i in range(len(corpus))]
        assert decoded == [line if line.strip() else "" for line in lines]  # 100% exact


def test_batches_respect_token_budget_and_cover_every_pair_once(dm):
    loader = dm.train_dataloader()
    seen = []
    for batch in loader:
        b, s = batch["src"].shape  # (B, S)
        t = batch["tgt"].shape[1]  # (B, T)
        assert b * s <= BUDGET and b * t <= BUDGET
        assert int(batch["src_lengths"].max()) == s and int(batch["tgt_lengths"].max()) == t
        rows = torch.arange(b)
        assert (batch["src"][rows, batch["src_lengths"] - 1] == dm.eos_id).all()
        assert (batch["tgt"][rows, batch["tgt_lengths"] - 1] == dm.eos_id).all()
        assert (batch["tgt"][:, 0] != dm.bos_id).all()
        pad_mask = torch.arange(s)[None, :] >= batch["src_lengths"][:, None]  # (B, S)
        assert (batch["src"][pad_mask] == dm.pad_id).all()
        seen.extend(batch["indices"].tolist())
    assert sorted(seen) == sorted(dm.datasets["train"].keep.tolist())
    assert len(seen) > len(loader)  # real batching, not one pair per batch
    val = next(iter(dm.val_dataloader()))
    refs = read_lines(str(TINY / "valid.de"))
    assert val["references"] == [refs[i] for i in val["indices"].tolist()]


def test_fixed_batch_size_mode(dm):
    d = make_dm(dm.cache_dir, batch_size=16)
    d.setup("fit")
    sizes = [len(b["indices"]) for b in d.train_dataloader()]
    assert max(sizes) == 16 and sum(sizes) == len(d.datasets["train"])


def test_epochs_are_deterministic_and_ddp_shards_are_equal_and_disjoint(dm):
    ds = dm.datasets["train"]

    def sampler(rank, world, epoch):
        s = TokenBucketBatchSampler(
            ds.src_lengths, ds.tgt_lengths, batch_tokens=BUDGET, seed=3, rank=rank, world_size=world
        )
        s.set_epoch(epoch)
        return [tuple(b) for b in s]

    assert sampler(0, 1, 0) == sampler(0, 1, 0)
    assert sampler(0, 1, 0) != sampler(0, 1, 1)
    full = sampler(0, 1, 1)
    shards = [sampler(r, 3, 1) for r in range(3)]
    assert len({len(s) for s in shards}) == 1  # equal counts, so no rank waits on a collective
    flat = [b for s in shards for b in s]
    assert set(flat) == set(full)
    assert len(flat) - len(full) == len(flat) - len(set(flat)) < 3  # only the padding repeats


def test_lightning_sets_epoch_and_rank_from_trainer(dm):
    from lightning.fabric.utilities.data import _set_sampler_epoch

    loader = dm.train_dataloader()
    _set_sampler_epoch(loader, 5)  # what the fit loop calls at each epoch start
    assert loader.batch_sampler.epoch == 5
    connector = SimpleNamespace(use_distributed_sampler=False)
    dm.trainer = SimpleNamespace(global_rank=1, world_size=2, _accelerator_connector=connector)
    try:
        sampler = dm.train_dataloader().batch_sampler
        assert (sampler.rank, sampler.world_size) == (1, 2)
        connector.use_distributed_sampler = True
        with pytest.raises(RuntimeError, match="use_distributed_sampler=False"):
            dm.train_dataloader()
    finally:
        dm.trainer = None


def test_empty_and_overlong_pairs_are_dropped_and_logged(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="datamodules.wmt17")
    d = make_dm(tmp_path, max_length=40)
    d.setup("fit")
    stats = d.filter_stats["train"]
    src_len = d.datasets["train"].src.lengths()
    tgt_len = d.datasets["train"].tgt.lengths()
    assert stats["empty"] == int(((src_len == 0) | (tgt_len == 0)).sum()) >= 1  # the slice has one
    assert (
        stats["too_long"] > 0
        and stats["kept"] == stats["total"] - stats["empty"] - stats["too_long"]
    )
    msg = f"dropped {stats['empty']} empty and {stats['too_long']} over-long pairs of 1000 in train"
    assert any(msg in r.getMessage() for r in caplog.records)
    assert int(d.datasets["train"].src_lengths.max()) <= 41  # max_length + EOS
    assert d.max_source_len == max(int(ds.src_lengths.max()) for ds in d.datasets.values())


def test_missing_file_names_path_and_layout(tmp_path):
    copy_tiny(tmp_path, ("train.en",))
    d = make_dm(tmp_path / "cache", data_dir=tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        d.prepare_data()
    text = str(err.value)
    assert str(tmp_path / "train.de") in text and "expected layout" in text and "valid.en" in text


@pytest.mark.parametrize("empty", [("train.en", "train.de"), ("train.de",), ("valid.en",)])
def test_empty_file_names_the_file_and_the_fix_before_sentencepiece(tmp_path, empty):
    """Both training files empty made sentencepiece raise a RuntimeError; one empty side a
    line-count error that did not say why."""
    copy_tiny(tmp_path)
    for name in empty:
        (tmp_path / name).write_bytes(b"")
    d = make_dm(tmp_path / "cache", data_dir=tmp_path)
    with pytest.raises(ValueError) as err:
        d.prepare_data()
    text = str(err.value)
    assert f"file {tmp_path / empty[0]} is empty" in text
    assert f"python -m datamodules.wmt17 fetch --pair en-de --to {tmp_path}" in text
    assert not list((tmp_path / "cache").glob("bpe-*"))  # failed before sentencepiece ran


@pytest.mark.parametrize("blocked", ["a file there", "a read-only data_dir"])
def test_a_cache_folder_that_cannot_be_made_is_named_with_the_fix(tmp_path, blocked):
    """The default cache (<data_dir>/.cache) in a shared, read-only corpus folder: a bare
    PermissionError named only the folder, not that it is the cache nor how to move it."""
    if blocked == "a read-only data_dir" and os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder")
    copy_tiny(tmp_path)
    if blocked == "a file there":
        (tmp_path / ".cache").write_text("not a folder")
    else:
        tmp_path.chmod(0o555)
    try:
        with pytest.raises(OSError) as err:
            make_dm(None, data_dir=tmp_path).prepare_data()
    finally:
        tmp_path.chmod(0o755)
    text = str(err.value)
    assert f"cannot create the cache folder {tmp_path / '.cache'}" in text
    assert "pass cache_dir= a writable folder" in text


def test_line_count_mismatch_reports_both_counts(tmp_path):
    copy_tiny(tmp_path, ("train.en", "valid.en", "valid.de"))
    lines = (TINY / "train.de").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "train.de").write_text("".join(lines[:-3]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"has 1000 lines but .*has 997 lines"):
        make_dm(tmp_path / "cache", data_dir=tmp_path).prepare_data()


def test_untokenized_text_is_scored_by_sacrebleus_tokenizer_both_ways(tmp_path):
    """With text that is not Moses-tokenized (source="hf"'s default), val/bleu was BLEU over
    untokenized words ("gut." and "gut" apart), neither multi-bleu's figure nor sacreBLEU's."""
    hyps, refs = ["Es ist gut", "Das Haus ist rot"], ["Es ist gut.", "Das Haus ist rot!"]
    raw = bleu_scores(hyps, refs, detokenize=lambda t: t, tokenized=False)
    assert raw["bleu"] == pytest.approx(raw["sacrebleu"]) and "tok:13a" in raw["bleu_signature"]
    assert bleu_scores(hyps, refs, detokenize=lambda t: t)["bleu"] < raw["bleu"]
    d = make_dm(tmp_path / "cache", moses_tokenized=False)
    scores = d.bleu(hyps, refs)
    assert scores["bleu"] == pytest.approx(raw["bleu"]) and "tok:13a" in scores["bleu_signature"]


def test_the_logged_val_bleu_of_untokenized_text_is_sacrebleus(dm, tmp_path, quiet_trainer):
    """The module logs val/bleu itself: with untokenized text it scores as the datamodule says
    (sacreBLEU's 13a), with Moses-tokenized text as the text is."""
    import sacrebleu

    from lightning_modules import Seq2SeqModule

    for tokenized in (False, True):
        d = make_dm(dm.cache_dir, moses_tokenized=tokenized, test_prefix="")
        d.prepare_data()
        d.setup("fit")
        torch.manual_seed(0)
        model = Seq2SeqModule(
            d.src_vocab_size, d.tgt_vocab_size, attention="bahdanau", max_decode_len=5
        )
        trainer = quiet_trainer(use_distributed_sampler=False, limit_val_batches=2)
        logged = trainer.validate(model, datamodule=d, verbose=False)[0]["val/bleu"]
        hyps, refs = model.last_decoded["val"]
        tokenize = "none" if tokenized else "13a"
        assert logged == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize).score)


def test_bleu_of_references_against_themselves_is_100(dm):
    refs = read_lines(str(TINY / "valid.de"))
    scores = bleu_scores(refs, refs)
    assert scores["bleu"] == pytest.approx(100.0) and scores["sacrebleu"] == pytest.approx(100.0)
    assert "tok:13a" in scores["signature"] and "tok:none" in scores["bleu_signature"]
    assert dm.bleu(refs, refs)["sacrebleu"] == pytest.approx(100.0)
    hyps = [dm.ids_to_text(dm.text_to_ids(r)) for r in refs]  # through BPE and back
    assert dm.bleu(hyps, refs)["bleu"] == pytest.approx(100.0)


def test_detokenizer_undoes_moses_escapes_and_spacing(dm):
    assert unescape("a &amp;quot; &#124; &lt;b&gt;") == "a &quot; | <b>"
    assert (
        moses_detokenize("Parliament &apos;s role , ( in 2010 ) costs $ 5 or 10 % .")
        == "Parliament's role, (in 2010) costs $5 or 10%."
    )
    assert (
        dm.detokenize("zum &quot; Autonomen Gemeindezentrum &quot; .")
        == 'zum "Autonomen Gemeindezentrum".'
    )
    assert (
        moses_detokenize("state @-@ of @-@ the @-@ art „ gut “ !", lang="de")
        == "state-of-the-art „gut“!"
    )


def test_hf_source_without_datasets_says_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    d = WMT17DataModule(pair="de-en", data_dir=str(tmp_path), source="hf")
    assert not d.moses_tokenized
    with pytest.raises(
        ImportError,
        match=r"^WMT17DataModule\(source='hf'\) loads WMT with the Hugging Face package datasets, "
        r"which is not installed: `pip install -e \.\[data\]` \(or `pip install datasets`\)\. "
        r"It also needs internet; offline, put the WMT'17 files under data_dir",
    ):
        d.prepare_data()


def _hub_folder(root: Path) -> Path:
    """A local dataset in the Hub's layout of wmt/wmt16 and wmt/wmt17 (config "de-en", parquet files
    of ``{"translation": {"de": ..., "en": ...}}`` rows, configs declared in README.md), built from
    the shipped slice: train = its 1,000 pairs, validation/test = its 50 valid pairs split 25/25."""
    datasets = pytest.importorskip("datasets")
    text = {
        f"{split}.{lang}": read_lines(str(TINY / f"{split}.{lang}"))
        for split in ("train", "valid")
        for lang in ("en", "de")
    }
    splits = {"train": slice(None), "validation": slice(0, 25), "test": slice(25, None)}
    (root / "de-en").mkdir(parents=True)
    for split, part in splits.items():
        src = "train" if split == "train" else "valid"
        rows = [
            {"de": de, "en": en} for de, en in zip(text[f"{src}.de"][part], text[f"{src}.en"][part])
        ]
        datasets.Dataset.from_dict({"translation": rows}).to_parquet(
            str(root / "de-en" / f"{split}-00000-of-00001.parquet")
        )
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: de-en\n  data_files:\n"
        + "".join(f"  - split: {split}\n    path: de-en/{split}-*\n" for split in splits)
        + "---\n"
    )
    return root


@pytest.mark.train
def test_hf_source_loads_a_datasets_folder_and_trains_the_same_pipeline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub = _hub_folder(tmp_path / "hub")
    d = WMT17DataModule(
        pair="en-de",
        data_dir=str(tmp_path / "data"),
        source="hf",
        hf_train=str(hub),
        hf_eval=str(hub),
        hf_cache_dir=str(tmp_path / "hf-cache"),
        vocab_size=VOCAB,
        max_length=100,
        batch_tokens=BUDGET,
        cache_dir=str(tmp_path / "cache"),
    )
    d.prepare_data()
    d.setup("fit")
    normalised = lambda name: [" ".join(line.split()) for line in read_lines(str(TINY / name))]
    assert read_lines(d.path("train", "de")) == normalised("train.de")
    assert d.path("valid", "en").endswith("newstest2015.en")  # written under the default names
    assert read_lines(d.path("valid", "en")) == normalised("valid.en")[:25]
    assert read_lines(d.path("test", "de")) == normalised("valid.de")[25:]
    assert (
        d.filter_stats["train"]["total"] == 1000
        and len(d.datasets["train"]) == d.filter_stats["train"]["kept"]
    )
    batch = next(iter(d.val_dataloader()))
    assert batch["references"][0] in normalised("valid.de")[:25]
    assert not d.moses_tokenized and d.detokenize("a , b") == "a , b"  # raw text: no detokenizer
    mtime = os.path.getmtime(d.path("train", "en"))
    d.prepare_data()  # files present: nothing is loaded or written again
    assert os.path.getmtime(d.path("train", "en")) == mtime


def test_pair_defaults_and_paths():
    assert PAIR_DEFAULTS["tr"]["valid"] == "newsdev2016"  # no newstest2015 for en-tr
    d = WMT17DataModule(pair="cs-en", data_dir="/d")
    assert (d.src_lang, d.tgt_lang) == ("cs", "en")
    assert (
        d.path("valid", "cs") == "/d/newstest2015.cs"
        and d.path("test", "en") == "/d/newstest2016.en"
    )
    assert WMT17DataModule(pair="en-tr", data_dir="/d").path("valid", "tr") == "/d/newsdev2016.tr"
    with pytest.raises(ValueError):
        WMT17DataModule(pair="en")


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("vocab_size", 0, "vocab_size must be >= 260, got 0"),
        ("max_length", 0, "max_length must be >= 1, got 0"),
        ("batch_tokens", 0, "batch_tokens must be >= 1, got 0"),
        ("character_coverage", 1.5, "character_coverage must be <= 1.0, got 1.5"),
        ("character_coverage", 0.0, "character_coverage must be > 0.0, got 0.0"),
        ("eval_max_length", -1, "eval_max_length must be >= 1, got -1"),
        ("max_length", 100.0, "max_length must be a whole number, got 100.0"),
        ("batch_tokens", "4096", "batch_tokens must be a whole number, got '4096'"),
        ("character_coverage", "0.9", "character_coverage must be a number, got '0.9'"),
    ],
)
def test_out_of_range_arguments_fail_naming_the_argument(key, value, message):
    with pytest.raises(ValueError, match=f"^WMT17DataModule: {message}$"):
        WMT17DataModule(**{key: value})
    assert WMT17DataModule(eval_max_length=None).eval_max_length is None  # None stays allowed


@pytest.mark.parametrize(
    "value,fix",
    [("BPE", "pass 'bpe' (lower case)"), ("char", "pass 'bpe' (the default) or 'unigram'")],
)
def test_a_bpe_model_type_other_than_bpe_or_unigram_is_refused(value, fix):
    """sentencepiece took "BPE" (a second BPE model under another cache key) and "char" as given."""
    with pytest.raises(ValueError) as info:
        WMT17DataModule(bpe_model_type=value)
    said = str(info.value)
    assert said.startswith(
        f"WMT17DataModule: bpe_model_type must be one of 'bpe', 'unigram', got {value!r}; {fix}"
    )
    assert WMT17DataModule(bpe_model_type="unigram").bpe_model_type == "unigram"


@pytest.mark.parametrize("moses_tokenized", [None, True, False])
def test_a_detokenizer_outside_its_choices_is_refused_whatever_the_text(moses_tokenized):
    """With moses_tokenized=False no detokenizer runs, and detokenizer="moses" passed unseen."""
    with pytest.raises(ValueError) as info:
        WMT17DataModule(detokenizer="moses", moses_tokenized=moses_tokenized)
    said = str(info.value)
    assert said.startswith(
        "WMT17DataModule: detokenizer must be one of 'sacremoses', 'builtin', got 'moses'; pass "
        "detokenizer='sacremoses'"
    )
    unused = "with moses_tokenized=False the text is taken as untokenized and no detokenizer runs"
    assert (unused in said) == (moses_tokenized is False)


def test_the_docstrings_say_val_sacrebleu_approximates_the_published_protocol():
    """docs/running.md says val/sacrebleu's references are the files' tokenized text detokenized,
    so it approximates a published score's protocol; the docstrings called it comparable."""
    texts = {
        "wmt_text": datamodules.wmt_text.__doc__,
        "WMT17DataModule": WMT17DataModule.__doc__,
    }
    for where, text in texts.items():
        flat = " ".join(text.split())
        assert "comparable with published" not in flat, where
        assert "approximates a published score's protocol" in flat, where
        assert "not WMT's raw references" in flat, where
    running = " ".join(
        (Path(__file__).resolve().parents[2] / "docs" / "running.md").read_text().split()
    )
    assert "approximates a published score's protocol closely but is not it" in running


@pytest.mark.parametrize(
    "key,value",
    [("shuffle", "false"), ("download", "False"), ("moses_tokenized", 0), ("max_length", None)],
)
def test_bools_and_counts_refuse_values_of_another_kind(key, value):
    """shuffle="false" and download="False" are truthy and were used as given; max_length=None
    got past the range check, which skipped None even where the argument is not Optional."""
    must = "True or False" if key != "max_length" else "a whole number >= 1"
    with pytest.raises(ValueError, match=rf"^WMT17DataModule: {key} must be {must}, got {value!r}"):
        WMT17DataModule(**{key: value})
    assert WMT17DataModule(moses_tokenized=None, shuffle=False).hparams.shuffle is False


def test_datasets_pickle_without_copying_the_corpus(dm):
    ds = dm.datasets["train"]
    blob = pickle.dumps(ds)
    assert len(blob) < 200_000  # memmaps are reopened, not serialised
    again = pickle.loads(blob)
    assert np.array_equal(again[3][0], ds[3][0])


@pytest.mark.parametrize("detokenizer", ["sacremoses", "builtin"])
@pytest.mark.parametrize("moses_tokenized", [True, False])
def test_the_datamodule_pickles_for_ddp_spawn_and_detokenizes_the_same(
    dm, detokenizer, moses_tokenized
):
    """Lightning's ddp_spawn pickles the datamodule with the trainer: every detokenizer setting
    survives it, and the copy detokenizes, decodes and batches as the original does."""
    d = make_dm(dm.cache_dir, detokenizer=detokenizer, moses_tokenized=moses_tokenized)
    d.setup("fit")
    again = pickle.loads(pickle.dumps(d))
    lines = read_lines(str(TINY / "valid.de")) + [
        "zum &quot; Autonomen Gemeindezentrum &quot; .",
        "1 @,@ 000 @.@ 5 Euro , state @-@ of @-@ the @-@ art",
    ]
    assert [again.detokenize(t) for t in lines] == [d.detokenize(t) for t in lines]
    changed = d.detokenize(lines[-1]) != lines[-1]
    assert changed == moses_tokenized  # raw text: the identity; Moses text: detokenized
    ids = d.text_to_ids(lines[0])
    assert again.ids_to_text(ids) == d.ids_to_text(ids) == lines[0]
    first, copied = next(iter(d.val_dataloader())), next(iter(again.val_dataloader()))
    assert torch.equal(first["src"], copied["src"]) and first["references"] == copied["references"]


def _blocked_sentencepiece(monkeypatch) -> str:
    """Make `import sentencepiece` fail; the message expected then."""
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    return (
        r"^WMT17DataModule's shared BPE vocabulary \(training it, encoding and decoding text\) uses "
        r"sentencepiece, which is not installed: `pip install -e \.\[data\]` \(or "
        r"`pip install sentencepiece`\)$"
    )


def test_without_sentencepiece_the_error_names_the_extra_before_any_download(
    dm, tmp_path, monkeypatch
):
    message = _blocked_sentencepiece(monkeypatch)
    fresh = make_dm(tmp_path / "cache")
    with pytest.raises(ImportError, match=message):
        fresh.prepare_data()
    with pytest.raises(ImportError, match=message):
        fresh.setup("fit")  # setup without prepare_data trains the BPE itself
    # download on and nothing there: the error comes before the fetch tries the (dead) address
    fetching = make_dm(
        tmp_path / "cache", data_dir=tmp_path / "none", download=True, valid_prefix=None
    )  # the release's file names: a fetch would write them
    assert "data_dir" in fetching.written_dirs()  # it would fetch
    fetching.release_url = "http://127.0.0.1:9/nothing-listens-here"
    with pytest.raises(ImportError, match=message):
        fetching.prepare_data()
    assert not (tmp_path / "none").exists()
    with pytest.raises(ImportError, match=message):
        pickle.loads(pickle.dumps(dm)).ids_to_text([5, 6])  # a spawned process reloads the model


def test_missing_data_names_each_argument_for_python_and_for_a_sweep_file(tmp_path):
    copy_tiny(tmp_path, ("train.en",))
    (tmp_path / "valid.de").write_bytes(b"")  # an interrupted copy
    d = make_dm(tmp_path / "cache", data_dir=tmp_path)
    assert d.missing_data() == (
        f"data_dir {tmp_path} (task.data_dir in a sweep file) lacks 3 of the 4 en-de files "
        "(train.de, valid.en, valid.de), missing or empty, and download is off: prepare_data() "
        "(a sweep's data stage) would stop. Fetch them with `python -m datamodules.wmt17 fetch "
        f"--pair en-de --to {tmp_path}`, or set download=True (task.download: true in a sweep file)"
    )
    # download=True fetches the release's files under the pair's default names only: a prefix of
    # the caller's (valid_prefix="valid") stays missing after the fetch, said before it
    fetching = make_dm(tmp_path / "cache", data_dir=tmp_path, download=True)
    assert fetching.missing_data() == (
        f"data_dir {tmp_path} (task.data_dir in a sweep file) lacks valid.en, valid.de, and "
        "download cannot fetch them: it writes the release's en-de files under their default "
        "names only, and valid_prefix='valid' names others. Place those files in "
        f"{tmp_path}, or leave the prefix unset (task.<split>_prefix in a sweep file) to read "
        "the release's"
    )
    assert "data_dir" not in fetching.written_dirs()  # nothing is fetched for it
    defaults = make_dm(tmp_path / "cache", data_dir=tmp_path, download=True, valid_prefix=None)
    assert defaults.missing_data() is None and "data_dir" in defaults.written_dirs()
    assert make_dm(tmp_path / "cache").missing_data() is None  # TINY has them all


def test_testing_without_a_test_split_says_test_prefix_is_empty_and_how_to_set_it(dm, tmp_path):
    assert dm.prefixes["test"] == "" and dm.datasets  # set up, with no test split
    with pytest.raises(RuntimeError) as err:
        dm.test_dataloader()
    assert str(err.value) == (
        "WMT17DataModule(pair='en-de') has no test split: test_prefix is empty. To test, create "
        "it with test_prefix set to the name of the test files in data_dir without the language "
        "suffix (test_prefix='newstest2016' for newstest2016.en and newstest2016.de), or leave "
        "test_prefix unset for the pair's default, 'newstest2016'"
    )
    with pytest.raises(RuntimeError, match=r"^no 'valid' split yet: call setup\(\) first$"):
        make_dm(tmp_path).val_dataloader()
    d = make_dm(dm.cache_dir, test_prefix="valid")  # a test split: the same files as valid
    d.setup("test")
    assert next(iter(d.test_dataloader()))["references"]


def test_every_batch_key_is_one_contracts_lists(dm):
    """docs/CONTRACTS.md's batch table names every key a WMT or copy-task batch carries."""
    from datamodules import CopyTaskDataModule

    contracts = (Path(__file__).resolve().parents[2] / "docs" / "CONTRACTS.md").read_text()
    table = contracts.split("## Batches", 1)[1].split("\n## ", 1)[0]
    listed = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    copy = CopyTaskDataModule(train_size=8, val_size=8, test_size=8, batch_size=4)
    copy.setup("fit")
    for batch in (
        next(iter(dm.train_dataloader())),
        next(iter(dm.val_dataloader())),
        next(iter(copy.train_dataloader())),
    ):
        assert set(batch) <= listed, set(batch) - listed


@pytest.mark.slow
@pytest.mark.skipif(
    not SAMPLE.is_dir(), reason=f"needs the sample corpus at {SAMPLE} (set MEMATTN_SHARED_DATA)"
)
def test_tiny_model_validation_loss_falls_on_10k_sample(tmp_path, quiet_trainer):
    import lightning.pytorch as pl

    from lightning_modules import Seq2SeqModule

    pl.seed_everything(0)
    d = WMT17DataModule(
        pair="en-de",
        data_dir=str(SAMPLE),
        vocab_size=2000,
        max_length=50,
        batch_tokens=1500,
        valid_prefix="valid",
        test_prefix="",
        cache_dir=str(tmp_path),
    )
    d.prepare_data()
    d.setup("fit")
    model = Seq2SeqModule(
        src_vocab_size=d.src_vocab_size,
        tgt_vocab_size=d.tgt_vocab_size,
        attention="bahdanau",
        preset="tiny",
        lr=1e-3,
        max_source_len=d.max_source_len,
    )
    trainer = quiet_trainer(
        max_steps=300,
        num_sanity_val_steps=0,
        limit_val_batches=1.0,
        check_val_every_n_epoch=1000,
        use_distributed_sampler=False,
    )
    before = trainer.validate(model, datamodule=d, verbose=False)[0]["val/loss"]
    trainer.fit(model, datamodule=d)
    after = trainer.validate(model, datamodule=d, verbose=False)[0]
    print(
        f"val/loss {before:.3f} -> {after['val/loss']:.3f}, val/bleu {after['val/bleu']:.2f}, "
        f"val/sacrebleu {after['val/sacrebleu']:.2f}, steps {trainer.global_step}"
    )
    assert after["val/loss"] < before - 0.5, (before, after)  # measured: 7.60 -> 6.15
    assert 0.0 <= after["val/bleu"] <= 100.0 and "val/sacrebleu" in after


def test_settings_are_saved_for_checkpoints_and_rebuild_the_same_data(dm):
    """trainer.fit(model, dm) writes dm.hparams into the checkpoint: they alone rebuild the data."""
    again = WMT17DataModule(**dm.hparams)
    assert again.prefixes == dm.prefixes and again.cache_dir == dm.cache_dir
    assert again.path("valid", "de") == dm.path("valid", "de") and again.vocab_size == dm.vocab_size


def test_a_data_file_edited_in_place_gets_a_new_cache_key(tmp_path):
    """The caches' key hashed 16 blocks of 64 KiB of each file: a same-size edit elsewhere in a
    training file over 1 MiB (a re-cased word, a fixed character) kept the old BPE model and token
    ids without a word. The key is the whole content's; a copy of the file (new path, new mtime)
    keeps it."""
    from datamodules.bpe import file_fingerprint

    line = b"As you walk down the bazaar on your left there are couple of stone stores .\n"
    path = tmp_path / "train.en"
    path.write_bytes(line * 40_000)  # 3 MB
    before = file_fingerprint(str(path))
    data = bytearray(path.read_bytes())
    gap = (
        (len(data) - (1 << 16)) // 15 + (1 << 16) + 5000
    )  # between the old key's 2nd and 3rd blocks
    at = gap + data[gap:].index(b"the")
    data[at : at + 3] = b"THE"
    path.write_bytes(bytes(data))
    assert path.stat().st_size == len(line) * 40_000
    assert file_fingerprint(str(path)) != before
    copy = tmp_path / "copy.en"
    shutil.copyfile(path, copy)
    assert file_fingerprint(str(copy)) == file_fingerprint(str(path))


def test_a_truncated_token_cache_is_encoded_again_with_a_warning(tmp_path, caplog):
    """A tokens.bin shorter than its meta.json says (a partial copy of the cache) made setup fail
    with numpy's bare "mmap length is greater than file size", naming no file."""
    first = make_dm(tmp_path)
    first.setup("fit")
    ids = np.array(first.datasets["valid"].src.tokens)  # a copy: the file is cut below
    del first.datasets  # its memory maps: reading a cut mapped file is a bus error
    valid_en = next(
        d
        for d in tmp_path.glob("tok-*")
        if d.is_dir() and "valid.en" in (d / "meta.json").read_text()
    )
    tokens = valid_en / "tokens.bin"
    os.truncate(tokens, tokens.stat().st_size // 2)
    caplog.set_level(logging.WARNING, logger="datamodules.bpe")
    again = make_dm(tmp_path)
    again.prepare_data()
    again.setup("fit")
    assert again.cache_report["valid.en"] == "encoded"
    assert {k: v for k, v in again.cache_report.items() if k != "valid.en"} == {
        k: "hit" for k in first.cache_report if k != "valid.en"
    }
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        f"the token cache {valid_en} of {TINY / 'valid.en'} is damaged (tokens.bin has" in warning
    )
    np.testing.assert_array_equal(again.datasets["valid"].src.tokens, ids)
    assert not list(tmp_path.glob(".*"))  # the damaged copy is gone, no temporaries left


def test_an_unreadable_bpe_model_is_trained_again_with_its_token_caches(tmp_path, caplog):
    """Garbage in bpe-*.model made setup fail with sentencepiece's RuntimeError; the token caches
    made with the old model are encoded again too, since a new model may give other ids."""
    first = make_dm(tmp_path)
    first.setup("fit")
    Path(first.bpe_model_path).write_bytes(b"not a sentencepiece model")
    caplog.set_level(logging.WARNING, logger="datamodules.bpe")
    again = make_dm(tmp_path)
    again.prepare_data()
    again.setup("fit")
    assert again.bpe_model_path == first.bpe_model_path
    assert set(again.cache_report.values()) == {"trained", "encoded"}
    assert again.cache_report["bpe"] == "trained"
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"the cached BPE model {first.bpe_model_path} is damaged (sentencepiece" in warning
    line = read_lines(str(TINY / "valid.de"))[0]
    assert again.ids_to_text(again.text_to_ids(line)) == line
    assert len(list(tmp_path.glob("tok-*/meta.json"))) == 4 and not list(tmp_path.glob(".*"))


def test_a_damaged_cache_in_a_folder_that_cannot_be_written_names_it_and_the_fix(
    tmp_path, monkeypatch
):
    first = make_dm(tmp_path)
    first.setup("fit")
    (meta,) = [m for m in tmp_path.glob("tok-*/meta.json") if "train.de" in m.read_text()]
    (meta.parent / "offsets.bin").write_bytes(b"")
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # a read-only shared cache
    with pytest.raises(ValueError) as err:
        make_dm(tmp_path).setup("fit")
    assert str(err.value) == (
        f"the token cache {meta.parent} of {TINY / 'train.de'} is damaged (offsets.bin has 0 "
        "bytes, where meta.json's 1000 lines and "
        f"{json.loads(meta.read_text())['n_tokens']} tokens make 8008) and cache_dir {tmp_path} is "
        f"not writable, so it cannot be rebuilt here: delete {meta.parent} from an account that "
        "can write there, or set cache_dir to a writable folder"
    )


def test_a_pair_outside_the_release_says_to_place_the_files_not_to_fetch(tmp_path):
    """The release has en-cs, en-de, en-fi and en-tr: for en-fr the messages suggested
    `fetch --pair en-fr` or download=True, which cannot work."""
    data = copy_tiny(tmp_path / "data", ALL_TINY)  # en-de files: no train.fr
    d = make_dm(tmp_path / "cache", pair="en-fr", data_dir=data)
    note = d.missing_data()
    assert note is not None and "fetch --pair" not in note
    assert "the WMT'17 release has no en-fr (only en-cs, en-de, en-fi, en-tr" in note
    assert f"Place train.en, train.fr, valid.en, valid.fr in {data}" in note
    fetching = make_dm(tmp_path / "cache", pair="fr-en", data_dir=data, download=True)
    assert fetching.missing_data() is not None  # download=True cannot fetch it either
    assert "data_dir" not in fetching.written_dirs()
    for dm_ in (d, fetching):
        with pytest.raises(FileNotFoundError) as err:
            dm_.prepare_data()  # no download attempted
        text = str(err.value)
        assert f"missing train file {data / 'train.fr'}" in text and "train.en / train.fr" in text
        assert "fetch --pair" not in text and f"Place the files above in {data}" in text
    assert "fetch --pair en-de" in make_dm(tmp_path / "c", data_dir=tmp_path / "x").missing_data()


def test_an_upper_case_pair_is_refused_naming_the_lower_case_spelling():
    """pair="EN-DE" looked for train.EN and suggested `fetch --pair EN-DE`."""
    with pytest.raises(ValueError) as err:
        WMT17DataModule(pair="EN-DE", data_dir=str(TINY))
    assert str(err.value) == (
        "pair must be lower case, as the files' language suffixes are: pair='en-de', not 'EN-DE'"
    )


@pytest.mark.parametrize(
    "kind,encode,expected",
    [
        ("gzip", gzip.compress, "is gzip-compressed: gunzip it"),
        ("utf-16", lambda b: b.decode().encode("utf-16"), "is not UTF-8 text: it has NUL bytes"),
    ],
    ids=["gzip", "utf-16"],
)
def test_a_compressed_or_non_utf8_file_is_named_before_the_line_counts(
    tmp_path, kind, encode, expected
):
    """A gzipped train.en (not gunzipped after a download) was reported as a line-count mismatch
    between the two sides."""
    data = copy_tiny(tmp_path / "data", ALL_TINY)
    path = data / "train.en"
    path.write_bytes(encode(path.read_bytes()))
    with pytest.raises(ValueError) as err:
        make_dm(tmp_path / "cache", data_dir=data).prepare_data()
    assert str(err.value).startswith(
        f"WMT17DataModule(pair='en-de'): train file {path} {expected}"
    ), err.value
    assert "\n" not in str(err.value)
    if kind == "gzip":
        assert f"(`mv {path} {path}.gz && gunzip {path}.gz`)" in str(err.value)
    assert not list((tmp_path / "cache").glob("bpe-*"))


def test_a_latin_1_file_is_refused_naming_the_conversion(tmp_path):
    """A Latin-1 train.de passed every check: read with U+FFFD for each byte that is not UTF-8,
    it trained a BPE model and scored BLEU with every umlaut replaced."""
    data = copy_tiny(tmp_path / "data", ALL_TINY)
    path = data / "train.de"
    text = path.read_text(encoding="utf-8")
    path.write_bytes(text.encode("latin-1", errors="replace"))
    first = next(i for i, line in enumerate(text.splitlines(), 1) if not line.isascii())
    with pytest.raises(ValueError) as err:
        make_dm(tmp_path / "cache", data_dir=data).prepare_data()
    message = str(err.value)
    assert message.startswith(f"WMT17DataModule(pair='en-de'): train file {path} is not UTF-8 text")
    assert f"on line {first} is not UTF-8 (Latin-1 or Windows-1252?)" in message
    assert f"`iconv -f latin1 -t utf-8 {path} > {path}.utf8 && mv {path}.utf8 {path}`" in message
    assert not list((tmp_path / "cache").glob("bpe-*"))


def test_a_latin_1_line_past_the_checked_start_is_refused_when_read(tmp_path):
    """The start of each file is checked before the BPE is trained; a Latin-1 line further on was
    read with U+FFFD without a word. Reading it raises, naming the line."""
    data = copy_tiny(tmp_path / "data", ALL_TINY)
    pad = [f"line {i} " + "x" * 90 for i in range(800)]  # past the 64 KiB checked first
    for lang, last in (("en", "Cafe"), ("de", "Caf\u00e9")):
        path = data / f"train.{lang}"
        text = path.read_text(encoding="utf-8") + "\n".join(pad) + "\n"
        path.write_bytes(text.encode("utf-8") + last.encode("latin-1") + b"\n")
    line = 1000 + len(pad) + 1
    with pytest.raises(ValueError) as err:
        d = make_dm(tmp_path / "cache", data_dir=data)
        d.prepare_data()
        d.setup("fit")
    path = data / "train.de"
    assert f"{path} is not UTF-8 text: byte 0xe9 on line {line} is not UTF-8" in str(err.value)


def test_a_unigram_model_is_the_same_whatever_the_threads_asked_for(tmp_path):
    """sentencepiece's unigram pieces depend on how many threads split its work (1 and 16 gave 4
    of the tiny corpus's 800 pieces apart), and the threads were the machine's CPUs or the
    datamodule's encode_threads: two nodes trained two vocabularies under one vocabulary id."""
    from datamodules.bpe import ensure_bpe_model, load_sentencepiece

    files = [str(TINY / "train.en"), str(TINY / "train.de")]
    pieces = []
    for threads in (1, 16):
        model, _ = ensure_bpe_model(
            files, str(tmp_path / str(threads)), VOCAB, "unigram", num_threads=threads
        )
        sp = load_sentencepiece(model)
        pieces.append([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    assert pieces[0] == pieces[1]


def test_windows_line_endings_train_the_model_encoding_reads(tmp_path):
    """The BPE trainer read CRLF files with each line's \\r, which encoding strips: the model
    held pieces ending in \\r that no encoded line uses, under the key of the LF files' model.
    It trains on the lines encoding reads, under a key of its own."""
    from datamodules.bpe import bpe_cache_key, ensure_bpe_model, load_sentencepiece

    lf = copy_tiny(tmp_path / "lf", ("train.en", "train.de"))
    crlf = copy_tiny(tmp_path / "crlf", ("train.en", "train.de"))
    for name in ("train.en", "train.de"):
        path = crlf / name
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    files = {d: [str(d / "train.en"), str(d / "train.de")] for d in (lf, crlf)}
    models = {d: ensure_bpe_model(files[d], str(tmp_path / d.name), VOCAB)[0] for d in files}
    pieces = {
        d: [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        for d, sp in ((d, load_sentencepiece(m)) for d, m in models.items())
    }
    assert not [p for p in pieces[crlf] if "\r" in p]
    assert pieces[crlf] == pieces[lf]
    assert bpe_cache_key(files[crlf], VOCAB) != bpe_cache_key(files[lf], VOCAB)


@pytest.mark.parametrize("split", ["valid", "test"])
def test_an_evaluation_split_of_blank_lines_is_refused_in_setup(dm, tmp_path, split):
    """Validation files of blank lines passed setup (a logged warning only) and the first
    `next(iter(dm.val_dataloader()))` raised a bare StopIteration."""
    data = copy_tiny(tmp_path / "data", ALL_TINY)
    (data / f"{split}.de").write_text("\n" * 50, encoding="utf-8")
    d = make_dm(dm.cache_dir, data_dir=data, test_prefix="test")
    label = dict(valid="validation", test="test")[split]
    with pytest.raises(ValueError) as err:
        d.setup("fit")
    assert str(err.value) == (
        f"no {label} pair is left in {data / f'{split}.en'} and {data / f'{split}.de'}: each of "
        f"its 50 pairs has an empty side (a blank or whitespace-only line); put the {label} "
        "sentences there, one per line, line-aligned"
    )


def test_an_evaluation_split_longer_than_eval_max_length_says_to_raise_it(dm):
    d = make_dm(dm.cache_dir, eval_max_length=1)
    with pytest.raises(ValueError) as err:
        d.setup("fit")
    stats = d.filter_stats["valid"]
    assert stats["kept"] == 0 and stats["too_long"] > 0
    assert str(err.value) == (
        f"no validation pair survived the length filter in {TINY / 'valid.en'} and "
        f"{TINY / 'valid.de'}: of 50 pairs, {stats['empty']} have an empty side and "
        f"{stats['too_long']} have more than eval_max_length=1 BPE tokens on a side; raise "
        "eval_max_length"
    )


def test_trainer_predict_translates_the_validation_split_without_a_test_split(dm, quiet_trainer):
    """trainer.predict needed a predict_dataloader; with test_prefix="" it is the validation
    split, every line once, with its line number."""
    from lightning_modules import Seq2SeqModule

    torch.manual_seed(0)
    model = Seq2SeqModule(
        dm.src_vocab_size, dm.tgt_vocab_size, attention="bahdanau", max_decode_len=5
    )
    predicted = quiet_trainer(use_distributed_sampler=False).predict(model, datamodule=dm)
    indices = torch.cat([out["indices"] for out in predicted]).tolist()
    assert sorted(indices) == dm.datasets["valid"].keep.tolist()
    batch = next(iter(dm.val_dataloader()))
    assert torch.equal(predicted[0]["hypotheses"], model.decode(batch["src"], batch["src_lengths"]))
    assert predicted[0]["text"] == [dm.ids_to_text(r) for r in predicted[0]["hypotheses"].tolist()]


def test_building_the_model_before_setup_says_to_set_the_datamodule_up(tmp_path):
    """WMT17DataModule's sizes are None until setup(); the model said only "src_vocab_size must be
    a whole number >= 1, got None"."""
    from lightning_modules import Seq2SeqModule

    d = make_dm(tmp_path)
    with pytest.raises(
        ValueError,
        match=r"src_vocab_size, tgt_vocab_size, max_source_len got None.*"
        r"dm\.prepare_data\(\); dm\.setup\(\"fit\"\)",
    ):
        Seq2SeqModule(d.src_vocab_size, d.tgt_vocab_size, max_source_len=d.max_source_len)
    d.prepare_data()
    d.setup("fit")
    Seq2SeqModule(d.src_vocab_size, d.tgt_vocab_size, max_source_len=d.max_source_len)


def test_a_trained_model_refuses_another_bpe_of_the_same_size(dm, tmp_path, quiet_trainer):
    """Nothing identified the BPE: a checkpoint evaluated under a BPE trained differently (same
    piece count) ran with every id meaning another piece. The model records the datamodule's
    ``vocabulary_id`` when fit and checks it after loading."""
    from lightning_modules import Seq2SeqModule

    assert dm.vocabulary_id.startswith("bpe-")
    model = Seq2SeqModule(dm.src_vocab_size, dm.tgt_vocab_size, attention="none")
    trainer = quiet_trainer(max_steps=1, limit_val_batches=0, use_distributed_sampler=False)
    trainer.fit(model, datamodule=dm)
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    loaded = Seq2SeqModule.load_from_checkpoint(path)
    assert loaded.data_vocabulary["vocabulary_id"] == dm.vocabulary_id

    other = make_dm(tmp_path / "cache", bpe_model_type="unigram")
    other.prepare_data()
    other.setup("fit")
    assert other.src_vocab_size == dm.src_vocab_size and other.vocabulary_id != dm.vocabulary_id
    with pytest.raises(ValueError, match=r"its vocabulary is 'bpe-.*WMT17DataModule\.load_from_c"):
        quiet_trainer(use_distributed_sampler=False).validate(loaded, datamodule=other)
    same = WMT17DataModule.load_from_checkpoint(path)
    quiet_trainer(use_distributed_sampler=False, limit_val_batches=1).validate(
        loaded, datamodule=same, verbose=False
    )


def test_hugging_faces_splits_that_are_not_the_releases_are_named():
    """source="hf" was said to fetch "the same splits"; fi-en's test split holds newstestB2016's
    second reference too, and cs-en's training corpus leaves out CzEng."""
    from datamodules.wmt17 import hf_deviations

    assert hf_deviations("en-de", ["train", "valid", "test"]) == []
    (fi,) = hf_deviations("fi-en", ["train", "valid", "test"])
    assert "newstestB2016" in fi and "6,000 lines" in fi and "fetch --pair fi-en" in fi
    assert hf_deviations("en-fi", ["train", "valid"]) == []  # no test split loaded
    (cs,) = hf_deviations("en-cs", ["train", "valid"])
    assert "CzEng" in cs and "source='files'" in cs
