"""WMT'17 translation data (en-cs, en-de, en-fi, en-tr, either direction) with a shared BPE vocabulary.

    python -m datamodules.wmt17 fetch --pair en-de --to data/wmt17/en-de    # the paper's release

    dm = WMT17DataModule(pair="en-de", data_dir="data/wmt17/en-de", vocab_size=16000,
                         max_length=80, batch_tokens=4096)   # download=True fetches in prepare_data
    dm.prepare_data()            # once per node: BPE model + binary token caches (cache hits later)
    dm.setup("fit")
    model = Seq2SeqModule(dm.src_vocab_size, dm.tgt_vocab_size, max_source_len=dm.max_source_len)
    pl.Trainer(use_distributed_sampler=False).fit(model, datamodule=dm)

File layout (``source="files"``): ``data_dir`` holds line-aligned, one-sentence-per-line UTF-8 files
``{prefix}.{lang}`` for the three splits; with ``pair="en-de"``::

    train.en  train.de                 training corpus
    newstest2015.en  newstest2015.de   validation
    newstest2016.en  newstest2016.de   test

Default prefixes per pair are in :data:`PAIR_DEFAULTS` (en-tr has no newstest2015: it validates on
newsdev2016). Any prefix can be overridden (``train_prefix`` / ``valid_prefix`` / ``test_prefix``;
``test_prefix=""`` means no test split). The ``fetch`` command (:mod:`datamodules.wmt17_fetch`)
downloads the paper's data, the WMT'17 "preprocessed" release (Moses-tokenized and truecased), and
writes exactly this layout; ``download=True`` makes :meth:`prepare_data` do the same when files are
missing (off by default, so nothing downloads by surprise). ``moses_tokenized=True`` (the default
for files) means the text is Moses-tokenized, so ``ids_to_text`` gives tokenized text for
``val/bleu`` and ``detokenize`` undoes it for ``val/sacrebleu``.

``source="hf"`` fetches the same splits with Hugging Face ``datasets`` (needs internet, or a local
copy: ``hf_train``/``hf_eval`` take any name or folder ``datasets.load_dataset`` accepts): the
training corpus from ``wmt/wmt17`` and validation/test from ``wmt/wmt16`` (whose validation/test are
newstest2015/newstest2016, newsdev2016/newstest2016 for tr), config ``<xx>-en``, writes them to the
layout above, and goes on identically. Two of Hugging Face's splits are not the release's
(:func:`hf_deviations`, logged as a warning): fi-en's test split is newstest2016 with both of its
references (newstestB2016 too: each source twice, 6,000 lines), and cs-en's training corpus leaves
out CzEng (about 1M pairs against the release's ~52M); the ``fetch`` command gets the paper's. That text is not tokenized (``moses_tokenized`` defaults to
False there, ``detokenize`` is then the identity, and ``val/bleu`` is sacreBLEU's score, as
``val/sacrebleu``: BLEU on untokenized words would count "house." and "house" apart).

Caches (``cache_dir``, default ``<data_dir>/.cache``): the sentencepiece model, keyed by the content
of the two training files (order-free, so en-de and de-en share it), the vocabulary size and the
BPE options, trained once under a file lock; and each split/language encoded once into a numpy
token file + offsets (see :mod:`datamodules.bpe`), which is what trials and DataLoader workers read.
A damaged entry (a token file cut short, a model sentencepiece cannot read) is built again, with a
logged warning.

Batching: length-bucketed batches under a token budget (``batch_tokens``, padded size per side) or
a fixed ``batch_size``; deterministic per ``(seed, epoch)``; each DDP rank takes an equal share of
the batches. The Trainer must not replace the sampler: pass ``use_distributed_sampler=False``
(a multi-device Trainer without it gets a clear error from :meth:`train_dataloader`).
"""

from __future__ import annotations

if __name__ == "__main__":  # `python -m datamodules.wmt17 fetch ...`: before torch is imported
    import sys

    from .wmt17_fetch import main

    sys.exit(main())

import functools
import itertools
import logging
import os
import tempfile
from collections.abc import Sequence
from typing import Annotated, Literal, get_args, get_type_hints

import lightning.pytorch as pl
import numpy as np
import torch
from annotated_types import Ge, Interval
from torch.utils.data import DataLoader

from .bpe import (
    TokenizedCorpus,
    bpe_cache_key,
    ensure_bpe_model,
    ensure_encoded,
    file_lock,
    import_sentencepiece,
    load_sentencepiece,
    read_lines,
    token_cache_dir,
)
from .bucketing import ParallelTokenDataset, TokenBucketBatchSampler, collate_pairs
from .checkpoint_files import LoadsCheckpointFiles
from .extras import import_extra
from .ranges import check_ranges
from .resumable import ResumableDataLoader
from .vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, content_ids
from .wmt17_fetch import PAIR_DEFAULTS, RELEASE_URL, fetch, layout_files, other_language
from .wmt_checks import (
    check_files,
    check_kept,
    check_line_counts,
    check_pair,
    in_release,
    layout,
    missing_line,
    no_test_split,
    settings_problem,
    unfetched_line,
)
from .wmt_text import bleu_scores, make_detokenizer, moses_detokenize, unescape

log = logging.getLogger(__name__)

__all__ = ["WMT17DataModule", "PAIR_DEFAULTS", "bleu_scores", "moses_detokenize", "unescape"]

SPLITS = ("train", "valid", "test")
#: smallest BPE vocabulary: 4 special ids + 256 byte-fallback pieces (a corpus with many distinct
#: characters needs more; sentencepiece then says how many)
MIN_VOCAB = 260
#: how sentencepiece writes the unknown token in text (its default ``unk_surface``, less the spaces)
UNK_MARK = "\u2047"

_FALLBACK_DEFAULTS = dict(train="train", valid="newstest2015", test="newstest2016")

#: Hugging Face split per split of ``source="hf"`` (config "<xx>-en"); train comes from ``hf_train``
#: (wmt/wmt17), valid/test from ``hf_eval`` (wmt/wmt16: newstest2015, or newsdev2016 for tr-en;
#: newstest2016)
HF_SPLITS: dict[str, str] = {"train": "train", "valid": "validation", "test": "test"}


def _default_prefixes(src_lang: str, tgt_lang: str) -> dict[str, str]:
    """The file prefix of each split when none is given: :data:`PAIR_DEFAULTS` of the pair."""
    other = tgt_lang if src_lang == "en" else src_lang
    return PAIR_DEFAULTS.get(other, _FALLBACK_DEFAULTS)


class WMT17DataModule(LoadsCheckpointFiles, pl.LightningDataModule):
    """WMT'17 parallel text -> shared BPE -> cached ids -> length-bucketed batches (CONTRACTS.md).

    Args:
        pair: ``"src-tgt"`` in lower case, e.g. ``"en-de"`` (English to German) or ``"de-en"``;
            a pair the release does not have (``"en-fr"``) reads files placed in ``data_dir``.
        data_dir: folder with the ``{prefix}.{lang}`` files (written there for ``source="hf"``).
        vocab_size: shared BPE vocabulary size (the real size is read back from the model).
        max_length: training pairs with more than ``max_length`` BPE tokens (EOS not counted) on
            either side are dropped, as are pairs with an empty side; both counts are logged (the
            copy task's name for its longest sequence too: one name for a task's length).
        batch_tokens: padded tokens per side per batch; ignored when ``batch_size`` is given.
        batch_size: fixed sentences per batch (still length-bucketed).
        eval_batch_tokens, eval_batch_size: the same for validation/test (default: the training ones).
        max_sentences: optional cap on sentences per token-budget batch.
        eval_max_length: drop longer validation/test pairs too (default None: keep all but empties).
        source: ``"files"`` or ``"hf"`` (Hugging Face ``datasets``; needs internet).
        train_prefix, valid_prefix, test_prefix: file prefixes (None: :data:`PAIR_DEFAULTS`;
            ``test_prefix=""``: no test split).
        cache_dir: BPE and token caches (default ``<data_dir>/.cache``).
        bpe_model_type: sentencepiece ``model_type`` (``"bpe"`` or ``"unigram"``).
        character_coverage: sentencepiece coverage; rarer characters fall back to bytes.
        bpe_sample_sentences: at most this many training lines (both sides) train the BPE.
        moses_tokenized: the text is Moses-tokenized (None: True for files, False for hf).
        detokenizer: for ``val/sacrebleu``, in the target language: ``"sacremoses"`` (the
            standard Moses post-processing; the ``data`` extra) or ``"builtin"`` (an
            approximation of it that needs no extra; its scores are further off). Either way
            ``val/sacrebleu`` approximates a published score's protocol but is not it: its
            references are the files' tokenized (in the release, truecased) lines detokenized,
            not WMT's raw references (docs/running.md). Used only with ``moses_tokenized`` text.
        shuffle, seed: training batch order, deterministic per (seed, epoch).
        num_workers: DataLoader workers (token caches are memory-mapped, not copied).
        encode_threads: sentencepiece threads for encoding and for training a BPE model (default:
            all cores, <= 16); a unigram model always trains on 16, which its pieces depend on.
        download: let :meth:`prepare_data` fetch the WMT'17 preprocessed release into ``data_dir``
            when files are missing (``source="files"``, default prefixes; see
            :mod:`datamodules.wmt17_fetch`). Off by default: nothing downloads by surprise.
        release_url: root of the release (a mirror; :data:`~datamodules.wmt17_fetch.RELEASE_URL`).
        hf_train, hf_eval: ``datasets.load_dataset`` names (or local folders) of the training and
            of the validation/test data for ``source="hf"``.
        hf_cache_dir: ``cache_dir`` for ``datasets.load_dataset``.
    """

    #: shards its own batches across DDP ranks: the Trainer must not wrap the sampler
    handles_distributed_sampling = True

    def __init__(
        self,
        pair: str = "en-de",
        data_dir: str = "data/wmt17/en-de",
        vocab_size: Annotated[int, Ge(MIN_VOCAB)] = 16000,
        max_length: Annotated[int, Ge(1)] = 80,
        batch_tokens: Annotated[int, Ge(1)] | None = 4096,
        batch_size: Annotated[int, Ge(1)] | None = None,
        eval_batch_tokens: Annotated[int, Ge(1)] | None = None,
        eval_batch_size: Annotated[int, Ge(1)] | None = None,
        max_sentences: Annotated[int, Ge(1)] | None = None,
        eval_max_length: Annotated[int, Ge(1)] | None = None,
        source: Literal["files", "hf"] = "files",
        train_prefix: str | None = None,
        valid_prefix: str | None = None,
        test_prefix: str | None = None,
        cache_dir: str | None = None,
        bpe_model_type: Literal["bpe", "unigram"] = "bpe",
        character_coverage: Annotated[float, Interval(gt=0.0, le=1.0)] = 0.9995,
        bpe_sample_sentences: Annotated[int, Ge(1)] = 2_000_000,
        moses_tokenized: bool | None = None,
        detokenizer: Literal["sacremoses", "builtin"] = "sacremoses",
        shuffle: bool = True,
        seed: Annotated[int, Ge(0)] = 0,
        num_workers: Annotated[int, Ge(0)] = 0,
        encode_threads: Annotated[int, Ge(1)] | None = None,
        download: bool = False,
        release_url: str = RELEASE_URL,
        hf_train: str = "wmt/wmt17",
        hf_eval: str = "wmt/wmt16",
        hf_cache_dir: str | None = None,
    ) -> None:
        super().__init__()
        check_ranges(WMT17DataModule.__init__, locals())
        # Lightning stores these in every checkpoint written by trainer.fit(model, dm), so the
        # timing command (python -m sweeps.timing CKPT) can rebuild the data from the checkpoint alone
        self.save_hyperparameters()
        langs = check_pair(pair)
        _check_choices(bpe_model_type, detokenizer, moses_tokenized)
        if source not in ("files", "hf"):
            raise ValueError(f"source must be 'files' or 'hf', got {source!r}")
        if problem := settings_problem(dict(locals())):
            raise ValueError(f"WMT17DataModule: {problem[0]} {problem[1]}")
        self.pair = pair
        self.src_lang, self.tgt_lang = langs
        self.data_dir = data_dir
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.batch_tokens = None if batch_size is not None else batch_tokens
        self.batch_size = batch_size
        self.eval_batch_size = (
            eval_batch_size
            if eval_batch_size is not None
            else (None if eval_batch_tokens is not None else batch_size)
        )
        self.eval_batch_tokens = (
            None
            if self.eval_batch_size is not None
            else (eval_batch_tokens if eval_batch_tokens is not None else self.batch_tokens)
        )
        self.max_sentences = max_sentences
        self.eval_max_length = eval_max_length
        self.source = source
        defaults = _default_prefixes(self.src_lang, self.tgt_lang)
        self.prefixes: dict[str, str] = dict(
            train=defaults["train"] if train_prefix is None else train_prefix,
            valid=defaults["valid"] if valid_prefix is None else valid_prefix,
            test=defaults["test"] if test_prefix is None else test_prefix,
        )
        self.cache_dir = cache_dir or os.path.join(data_dir, ".cache")
        self.bpe_model_type = bpe_model_type
        self.character_coverage = character_coverage
        self.bpe_sample_sentences = bpe_sample_sentences
        self.moses_tokenized = (source == "files") if moses_tokenized is None else moses_tokenized
        self.detokenizer = detokenizer
        self.shuffle = shuffle
        self.seed = seed
        self.num_workers = num_workers
        self.encode_threads = encode_threads
        self.download = download
        self.release_url = release_url
        self.hf_train = hf_train
        self.hf_eval = hf_eval
        self.hf_cache_dir = hf_cache_dir

        self.pad_id, self.bos_id, self.eos_id, self.unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID
        self.src_vocab_size: int | None = None
        self.tgt_vocab_size: int | None = None
        self.max_source_len: int | None = None
        self.max_target_len: int | None = None
        self.bpe_model_path: str | None = None
        #: first outcome per artefact in this instance: "trained"/"encoded" or "hit"
        self.cache_report: dict[str, str] = {}
        #: per split: dict(total=, empty=, too_long=, kept=)
        self.filter_stats: dict[str, dict[str, int]] = {}
        self.datasets: dict[str, ParallelTokenDataset] = {}
        self._sp = None
        self._detok = make_detokenizer(
            detokenizer if self.moses_tokenized else "none", self.tgt_lang
        )

    # ------------------------------------------------------------------ files
    @property
    def splits(self) -> tuple[str, ...]:
        """Splits configured (test only with a non-empty ``test_prefix``)."""
        return tuple(s for s in SPLITS if self.prefixes[s])

    def path(self, split: str, lang: str) -> str:
        """Path of one side of one split: ``<data_dir>/<prefix>.<lang>``."""
        return os.path.join(self.data_dir, f"{self.prefixes[split]}.{lang}")

    def _layout(self) -> str:
        return layout(self.pair, self.src_lang, self.tgt_lang, self.prefixes, self.data_dir)

    def _check_line_counts(self, split: str) -> None:
        check_line_counts(split, self.path(split, self.src_lang), self.path(split, self.tgt_lang))

    # ------------------------------------------------------------------ caches
    def _train_files(self) -> list[str]:
        return [self.path("train", lang) for lang in sorted((self.src_lang, self.tgt_lang))]

    def _prepare(self) -> dict[tuple[str, str], TokenizedCorpus]:
        """Files checked, BPE model and all token caches present (built here if missing)."""
        # each file there, not empty and text: else an error naming it and the fix
        check_files(self.pair, self.src_lang, self.tgt_lang, self.prefixes, self.data_dir)
        try:
            os.makedirs(self.cache_dir, exist_ok=True)
        except OSError as exc:  # a read-only data_dir (the default <data_dir>/.cache), a file there
            raise type(exc)(
                f"WMT17DataModule(pair={self.pair!r}): cannot create the cache folder "
                f"{self.cache_dir} ({exc.strerror or exc}); the BPE model and token caches are "
                "written there (default <data_dir>/.cache): pass cache_dir= a writable folder"
            ) from exc
        train_files = self._train_files()
        key = bpe_cache_key(
            train_files,
            self.vocab_size,
            self.bpe_model_type,
            self.character_coverage,
            self.bpe_sample_sentences,
        )
        if not os.path.exists(os.path.join(self.cache_dir, f"bpe-{key}.model")):
            self._check_line_counts("train")  # fail fast, before minutes of BPE training
        model, hit = ensure_bpe_model(
            train_files,
            self.cache_dir,
            self.vocab_size,
            self.bpe_model_type,
            self.character_coverage,
            self.bpe_sample_sentences,
            self.encode_threads,
            self.seed,
        )
        self.cache_report.setdefault("bpe", "hit" if hit else "trained")
        log.info("BPE model %s (%s)", model, "cache hit" if hit else "trained now")
        self.bpe_model_path = model
        corpora: dict[tuple[str, str], TokenizedCorpus] = {}
        for split in self.splits:
            paths = {lang: self.path(split, lang) for lang in (self.src_lang, self.tgt_lang)}
            if not all(
                os.path.exists(os.path.join(token_cache_dir(self.cache_dir, key, p), "meta.json"))
                for p in paths.values()
            ):
                self._check_line_counts(split)
            for lang, p in paths.items():
                corpus, hit = ensure_encoded(
                    p, model, self.cache_dir, num_threads=self.encode_threads
                )
                self.cache_report.setdefault(f"{split}.{lang}", "hit" if hit else "encoded")
                corpora[split, lang] = corpus
            a, b = corpora[split, self.src_lang], corpora[split, self.tgt_lang]
            if len(a) != len(b):
                raise ValueError(
                    f"{split}: {paths[self.src_lang]} has {len(a)} lines but "
                    f"{paths[self.tgt_lang]} has {len(b)} lines; the two sides of a "
                    "parallel corpus must be line-aligned"
                )
        return corpora

    def _split_paths(self) -> list[str]:
        return [self.path(s, lang) for s in self.splits for lang in (self.src_lang, self.tgt_lang)]

    def _lacking(self) -> list[str]:
        """The split files missing or empty under ``data_dir``."""
        return [
            p for p in self._split_paths() if not (os.path.isfile(p) and os.path.getsize(p) > 0)
        ]

    def missing_data(self) -> str | None:
        """What :meth:`prepare_data` would stop on, in one line, before it runs: split files
        missing or empty under ``data_dir`` while nothing fetches them (``download`` off, a pair
        the release does not have, or a prefix of the caller's whose files the release's fetch does
        not write); None when they are there or will be fetched. The line names each argument
        both ways, as passed here and as a sweep file's ``task.<argument>`` (a sweep's
        ``--dry-run`` prints it as a note)."""
        if self.source == "hf":
            return None
        lacking = self._lacking()
        if not lacking or self._fetch_needed(lacking):
            return None
        if self.download and in_release(self.src_lang, self.tgt_lang):
            unfetched = self._unfetchable(lacking)
            return unfetched_line(self.pair, self.data_dir, unfetched, self.prefixes)
        return missing_line(
            self.pair, self.src_lang, self.tgt_lang, self.data_dir, self._split_paths(), lacking
        )

    def _unfetchable(self, lacking: list[str]) -> list[str]:
        """The files of ``lacking`` that the release's fetch does not write (a prefix of the
        caller's, not the pair's default); for a pair of the release."""
        fetched = set(layout_files(other_language(self.pair), self.data_dir))
        return [p for p in lacking if p not in fetched]

    def _fetch_needed(self, lacking: list[str]) -> bool:
        """Whether prepare_data() fetches the files ``lacking`` (:meth:`_lacking`): some missing,
        download on, a pair of the release, and every missing file one the fetch writes."""
        return (
            bool(lacking)
            and self.download
            and in_release(self.src_lang, self.tgt_lang)
            and not self._unfetchable(lacking)
        )

    def written_dirs(self) -> dict[str, str]:
        """The folders :meth:`prepare_data` writes, by the argument that sets each: ``cache_dir``
        always; ``data_dir`` when the data is fetched into it (``source="hf"``, or ``download``
        with files missing); ``hf_cache_dir`` when set for ``source="hf"``. A sweep's ``--dry-run``
        checks that each can be written (a read-only ``data_dir`` is fine when nothing is fetched)."""
        out = {"cache_dir": self.cache_dir}
        if self.source == "hf" or self._fetch_needed(self._lacking()):
            out["data_dir"] = self.data_dir
        if self.source == "hf" and self.hf_cache_dir:
            out["hf_cache_dir"] = self.hf_cache_dir
        return out

    def prepare_data(self) -> None:
        """Download (``source="hf"``, or ``download=True``) if needed, check the files, train/reuse
        BPE, encode/reuse every split."""
        import_sentencepiece()  # missing: the clear ImportError now, not after a download
        if self.source == "hf":
            self._download_hf()
        elif self._fetch_needed(self._lacking()):
            fetch(self.pair, self.data_dir, base_url=self.release_url)
        self._prepare()

    # ------------------------------------------------------------------ setup
    def setup(self, stage: str | None = None) -> None:
        """Open the caches (building them if ``prepare_data`` did not), filter, build datasets."""
        if self.datasets:
            return
        corpora = self._prepare()
        self._sp = load_sentencepiece(self.bpe_model_path)
        size = int(self._sp.get_piece_size())
        if size < self.vocab_size:
            log.warning(
                "BPE vocabulary has %d pieces, fewer than vocab_size=%d (small corpus)",
                size,
                self.vocab_size,
            )
        self.src_vocab_size = self.tgt_vocab_size = size
        for split in self.splits:
            src, tgt = corpora[split, self.src_lang], corpora[split, self.tgt_lang]
            limit = self.max_length if split == "train" else self.eval_max_length
            keep = self._filter(split, src, tgt, limit)
            arg = "max_length" if split == "train" else "eval_max_length"
            paths = [self.path(split, lang) for lang in (self.src_lang, self.tgt_lang)]
            check_kept(split, paths, self.filter_stats[split], arg, limit)  # no empty loader later
            refs = None if split == "train" else read_lines(self.path(split, self.tgt_lang))
            self.datasets[split] = ParallelTokenDataset(src, tgt, keep, refs)
        self.max_source_len = int(max(d.src_lengths.max() for d in self.datasets.values()))
        self.max_target_len = int(max(d.tgt_lengths.max() for d in self.datasets.values()))

    def _filter(
        self, split: str, src: TokenizedCorpus, tgt: TokenizedCorpus, limit: int | None
    ) -> np.ndarray:
        ls, lt = src.lengths(), tgt.lengths()  # (N,), (N,)
        empty = (ls == 0) | (lt == 0)
        too_long = ~empty & ((ls > limit) | (lt > limit)) if limit else np.zeros_like(empty)
        keep = np.flatnonzero(~(empty | too_long))
        stats = dict(
            total=len(ls), empty=int(empty.sum()), too_long=int(too_long.sum()), kept=len(keep)
        )
        self.filter_stats[split] = stats
        level = logging.WARNING if split != "train" and len(keep) < len(ls) else logging.INFO
        log.log(
            level,
            "dropped %d empty and %d over-long pairs of %d in %s (%s=%s)",
            stats["empty"],
            stats["too_long"],
            stats["total"],
            split,
            "max_length" if split == "train" else "eval_max_length",
            limit,
        )
        return keep

    # ------------------------------------------------------------------ loaders
    def _rank_world(self) -> tuple[int, int]:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        trainer = self.trainer
        if trainer is not None:
            return int(trainer.global_rank), int(trainer.world_size)
        return 0, 1

    def _check_trainer(self) -> None:
        trainer = self.trainer
        connector = getattr(trainer, "_accelerator_connector", None)
        if (
            trainer is not None
            and trainer.world_size > 1
            and getattr(connector, "use_distributed_sampler", False)
        ):
            raise RuntimeError(
                "WMT17DataModule shards its own length-bucketed batches across ranks; create the "
                "Trainer with use_distributed_sampler=False so Lightning does not replace them"
            )

    def batch_sampler(
        self, split: str, rank: int | None = None, world_size: int | None = None
    ) -> TokenBucketBatchSampler:
        """The batch sampler of a split (rank/world_size default to the running job's)."""
        if split not in self.datasets:
            raise RuntimeError(self._no_split(split))
        r, w = self._rank_world()
        ds = self.datasets[split]
        train = split == "train"
        return TokenBucketBatchSampler(
            ds.src_lengths,
            ds.tgt_lengths,
            batch_tokens=self.batch_tokens if train else self.eval_batch_tokens,
            batch_size=self.batch_size if train else self.eval_batch_size,
            shuffle=self.shuffle and train,
            seed=self.seed,
            rank=r if rank is None else rank,
            world_size=w if world_size is None else world_size,
            max_sentences=self.max_sentences,
        )

    def _no_split(self, split: str) -> str:
        """Why ``split`` has no dataset: no test split configured, or setup() not run yet."""
        if split == "test" and not self.prefixes["test"]:
            default = _default_prefixes(self.src_lang, self.tgt_lang)["test"]
            return no_test_split(self.pair, self.src_lang, self.tgt_lang, default)
        if not self.datasets:
            return f"no {split!r} split yet: call setup() first"
        return f"no {split!r} split; the splits are {', '.join(self.datasets)}"

    def _loader(self, split: str) -> DataLoader:
        self._check_trainer()
        kwargs = dict(
            batch_sampler=self.batch_sampler(split),
            collate_fn=functools.partial(collate_pairs, pad_id=self.pad_id, eos_id=self.eos_id),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )
        if split == "train":  # batches a function of (seed, epoch); position saved in checkpoints
            return ResumableDataLoader(
                self.datasets[split], generator=torch.Generator().manual_seed(self.seed), **kwargs
            )
        # its own generator: the base seed each iterator draws for its workers would otherwise come
        # from the global RNG that dropout draws from (CopyTaskDataModule._loader says why)
        return DataLoader(
            self.datasets[split], generator=torch.Generator().manual_seed(self.seed), **kwargs
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("valid")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        """What ``trainer.predict`` decodes: the test split, in the test loader's batches; the
        validation split when no test split is configured (``test_prefix=""``). Each batch's
        ``indices`` are the split's line numbers (``predict_step`` returns them). Lightning warns
        that it cannot set ``drop_last=False`` on this loader's batch sampler, a custom one:
        :class:`~datamodules.bucketing.TokenBucketBatchSampler` drops no sentence, so on one
        process every line the split keeps is decoded once."""
        return self._loader("test" if self.prefixes["test"] else "valid")

    # ------------------------------------------------------------------ text
    @property
    def vocabulary_id(self) -> str | None:
        """The BPE model's identity, ``"bpe-<key>"`` (its cache key: the training text's content,
        the vocabulary size and the BPE options), once :meth:`prepare_data` or :meth:`setup` has
        built or found it; None before. A model records it when it is fit, and refuses data
        under another BPE later."""
        if self.bpe_model_path is None:
            return None
        return os.path.splitext(os.path.basename(self.bpe_model_path))[0]

    @property
    def sp(self):
        """The shared ``SentencePieceProcessor`` (after setup)."""
        if self._sp is None:
            if self.bpe_model_path is None:
                raise RuntimeError("call setup() first")
            self._sp = load_sentencepiece(self.bpe_model_path)
        return self._sp

    def text_to_ids(self, text: str) -> list[int]:
        """BPE ids of one line of (tokenized) text, no EOS."""
        return self.sp.encode(text, out_type=int)

    def ids_to_text(self, ids: Sequence[int]) -> str:
        """Ids -> BPE-merged text (tokenized, as in the files); stops at EOS, drops padding and
        BOS. An unknown token stays, as sentencepiece's mark ``⁇``, a word of its own: one a model
        emitted is a wrong word in BLEU, not a word left out
        (:data:`~datamodules.vocab.DROPPED_IDS`). Sentencepiece writes it with a space each side,
        which beside a word's own leading space left two in the hypothesis files."""
        kept = content_ids(ids, self.eos_id, (self.pad_id, self.bos_id))
        if self.unk_id not in kept:
            return self.sp.decode(kept)  # exactly the line its encoding came from
        words = []  # the pieces between unknown tokens decoded apart, each mark a word
        for unknown, run in itertools.groupby(kept, lambda token: token == self.unk_id):
            run = list(run)
            words += [UNK_MARK] * len(run) if unknown else [self.sp.decode(run).strip()]
        return " ".join(word for word in words if word)

    def detokenize(self, text: str) -> str:
        """Moses-style detokenization of tokenized target text (identity for raw text)."""
        return self._detok(text)

    @property
    def bleu_tokenize(self) -> str:
        """The sacreBLEU tokenizer of ``val/bleu``: none on Moses-tokenized text (multi-bleu's
        figure), ``13a`` on untokenized text (words would keep their punctuation)."""
        return "none" if self.moses_tokenized else "13a"

    def bleu(self, hyps: Sequence[str], refs: Sequence[str]) -> dict:
        """:func:`~datamodules.wmt_text.bleu_scores` with this datamodule's detokenizer (text that
        is not Moses-tokenized is scored with sacreBLEU's tokenizer both ways)."""
        return bleu_scores(hyps, refs, self.detokenize, tokenized=self.bleu_tokenize == "none")

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        # the processor is reloaded from bpe_model_path on demand; the detokenizer pickles as its
        # settings (ddp_spawn sends the datamodule to its processes)
        state["_sp"] = None
        return state

    # ------------------------------------------------------------------ Hugging Face
    def _download_hf(self) -> None:
        """Write the splits from Hugging Face ``datasets`` into the files layout (once)."""
        datasets = import_extra(
            "datasets",
            "WMT17DataModule(source='hf') loads WMT with the Hugging Face package datasets",
            "It also needs internet; offline, put the WMT'17 files under data_dir and use "
            f"source='files'.\n{self._layout()}",
        )
        config = f"{other_language(self.pair)}-en"
        for deviation in hf_deviations(self.pair, self.splits):
            log.warning("WMT17DataModule(source='hf'): %s", deviation)
        os.makedirs(self.data_dir, exist_ok=True)
        with file_lock(os.path.join(self.data_dir, ".hf-download.lock")):
            for split in self.splits:
                paths = {lang: self.path(split, lang) for lang in (self.src_lang, self.tgt_lang)}
                if all(os.path.exists(p) for p in paths.values()):
                    continue
                name, hf_split = (
                    (self.hf_train if split == "train" else self.hf_eval),
                    HF_SPLITS[split],
                )
                log.info("loading %s/%s split %s -> %s", name, config, hf_split, paths)
                ds = datasets.load_dataset(
                    name, config, split=hf_split, cache_dir=self.hf_cache_dir
                )
                _write_parallel(ds, paths)


def hf_deviations(pair: str, splits: Sequence[str]) -> list[str]:
    """Where Hugging Face's splits (``source="hf"``) of ``pair`` are not the WMT'17 release's, for
    the ``splits`` loaded: one line each, naming the way to the release's."""
    other = other_language(pair)
    fetch = (
        f"for the release's, `python -m datamodules.wmt17 fetch --pair {pair}` and source='files'"
    )
    out = []
    if other == "fi" and "test" in splits:
        out.append(
            "Hugging Face's fi-en test split is newstest2016 with both of its references "
            "(newstest2016 and newstestB2016: each source twice, 6,000 lines), so test BLEU is "
            f"not newstest2016's published protocol; {fetch}"
        )
    if other == "cs" and "train" in splits:
        out.append(
            "Hugging Face's cs-en training corpus leaves out CzEng (a manual download there): "
            f"about 1M pairs against the release's ~52M; {fetch}"
        )
    return out


@functools.cache
def _choices(parameter: str) -> tuple[str, ...]:
    """The values a ``Literal`` parameter of :class:`WMT17DataModule` takes (its annotation)."""
    return get_args(get_type_hints(WMT17DataModule.__init__)[parameter])


def _check_choices(bpe_model_type: object, detokenizer: object, moses_tokenized: object) -> None:
    """Refuse a ``bpe_model_type`` or ``detokenizer`` outside its ``Literal`` (sentencepiece took
    ``"BPE"`` and ``"char"`` as given; a detokenizer was only looked at for Moses-tokenized text,
    so ``detokenizer="moses"`` with ``moses_tokenized=False`` passed unseen)."""
    models = _choices("bpe_model_type")
    if bpe_model_type not in models:
        lower = bpe_model_type.lower() if isinstance(bpe_model_type, str) else None
        fix = (
            f"pass {lower!r} (lower case)"
            if lower in models
            else "pass 'bpe' (the default) or 'unigram'; sentencepiece's other model types "
            "(char, word) are not offered"
        )
        raise ValueError(
            f"WMT17DataModule: bpe_model_type must be one of {', '.join(map(repr, models))}, "
            f"got {bpe_model_type!r}; {fix}"
        )
    detokenizers = _choices("detokenizer")
    if detokenizer not in detokenizers:
        unused = (
            " (with moses_tokenized=False the text is taken as untokenized and no detokenizer "
            "runs: leave detokenizer out, or pass moses_tokenized=True for Moses-tokenized files)"
            if moses_tokenized is False
            else ""
        )
        raise ValueError(
            f"WMT17DataModule: detokenizer must be one of {', '.join(map(repr, detokenizers))}, "
            f"got {detokenizer!r}; pass detokenizer='sacremoses' for Moses' own detokenizer or "
            f"'builtin' for the approximation that needs no extra package{unused}"
        )


def _write_parallel(ds, paths: dict[str, str]) -> None:
    """Write a ``translation`` dataset to one file per language atomically, one line per pair."""
    tmp = {
        lang: tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", delete=False, dir=os.path.dirname(p) or ".", suffix=".tmp"
        )
        for lang, p in paths.items()
    }
    try:
        for rows in ds.iter(batch_size=10_000):
            for pair in rows["translation"]:
                for lang, fh in tmp.items():
                    fh.write(" ".join(pair[lang].split()) + "\n")  # no embedded newlines
        for lang, fh in tmp.items():
            fh.close()
            os.replace(fh.name, paths[lang])
    finally:
        for fh in tmp.values():
            fh.close()
            if os.path.exists(fh.name):
                os.unlink(fh.name)
