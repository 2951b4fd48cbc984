"""Seq2SeqModule: the LightningModule that trains, validates and decodes one attention variant.

    import lightning.pytorch as pl
    from datamodules import CopyTaskDataModule
    from lightning_modules import Seq2SeqModule

    dm = CopyTaskDataModule(max_length=10)
    model = Seq2SeqModule(dm.src_vocab_size, dm.tgt_vocab_size, attention="memory",
                          attention_kwargs={"K": 16}, max_source_len=dm.max_source_len)
    pl.Trainer(max_steps=2000).fit(model, datamodule=dm)

Reduced precision is the Trainer's choice, opt-in: ``pl.Trainer(precision="bf16-mixed")`` (or
``precision=lightning_modules.fastest_precision(device)``, bf16 only where the hardware has it;
see :mod:`lightning_modules.precision`) trains and decodes under bf16 autocast.

Metrics (names defined once below, see docs/CONTRACTS.md): ``train/loss``; ``val/loss`` and
``val/token_acc`` (teacher-forced cross-entropy and argmax accuracy, each the mean over every
non-pad target token of the split, whatever its batching), ``val/bleu``
(sacreBLEU on ``ids_to_text`` output, with the datamodule's ``bleu_tokenize``: ``"none"``, the
default, for tokenized text; ``"13a"`` for untokenized WMT text), each counting every sentence once,
also under DDP, where the samplers repeat some: batches with ``indices`` keep one sentence per
index (:func:`first_per_index`); ``val/decode_seconds`` (time spent in
decoding over the whole validation set, data loading excluded), ``val/sacrebleu`` when the
datamodule can ``detokenize``; the same under ``test/``. ``train/loss`` is logged per step and
per epoch: a Lightning logger receives ``train/loss_step`` and ``train/loss_epoch``;
``trainer.callback_metrics`` holds those and ``train/loss``, the last step's loss while an epoch
runs and the epoch's mean once it has ended.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from annotated_types import Ge, Gt, Interval

from datamodules.checkpoint_files import CheckpointError, LoadsCheckpointFiles
from datamodules.ranges import check_ranges
from datamodules.vocab import BOS_ID, EOS_ID, PAD_ID, PIECES, ids_to_text

from .attention import DEFAULT_ATTENTION
from .distill import (
    InitFromTeacher,
    Teacher,
    check_distillation,
    check_same_space,
    distillation_term,
    init_from_teacher,
)
from .metric_names import (  # noqa: F401 -- re-exported: the module's public metric names
    METRICS,
    TEST_BLEU,
    TEST_DECODE_SECONDS,
    TEST_LOSS,
    TEST_SACREBLEU,
    TEST_TOKEN_ACC,
    TRAIN_DISTILL,
    TRAIN_LOSS,
    VAL_BLEU,
    VAL_DECODE_SECONDS,
    VAL_LOSS,
    VAL_SACREBLEU,
    VAL_TOKEN_ACC,
)
from .seq2seq import Seq2Seq, get_preset, ids_error

# Value ranges, declared once here (plain annotated_types markers: pydantic's TypeAdapter,
# typing.get_type_hints(include_extras=True) and datamodules.ranges.check_ranges read them).
PositiveInt = Annotated[int, Ge(1)]
TokenId = Annotated[int, Ge(0)]
Probability = Annotated[float, Interval(ge=0, lt=1)]


class _EvalBuffer:
    """What one evaluation epoch gathers per sentence: its teacher-forced loss summed over its
    target tokens, their count and how many the argmax got right, its index in the split, and
    with decoding on its hypothesis and reference, and the decode time."""

    def __init__(self) -> None:
        self.loss: list[float] = []
        self.tokens: list[int] = []
        self.correct: list[int] = []
        #: each sentence's index in its split (the batches' ``indices``); None once a batch
        #: came without them (a plain dataloader), and then no repeat is removed
        self.indices: list[int] | None = []
        self.hyps: list[str] = []
        self.refs: list[str] = []
        self.seconds = 0.0

    def columns(self) -> tuple[list, ...]:
        """The per-sentence lists, in one order (:meth:`from_columns`)."""
        return self.loss, self.tokens, self.correct, self.hyps, self.refs

    def from_columns(self, columns: Iterable[list]) -> None:
        self.loss, self.tokens, self.correct, self.hyps, self.refs = map(list, columns)


def first_per_index(indices: list[int], *columns: list) -> list[list]:
    """Each column's entries at the first sentence of each index, in index order (a column with
    nothing in it, such as hypotheses where nothing is decoded, stays empty).

    Under DDP some sentences are evaluated twice: the samplers give every rank the same number of
    batches (so the per-step collectives match) by repeating the split's first batches
    (:class:`~datamodules.bucketing.TokenBucketBatchSampler`) or sentences (Lightning's
    ``DistributedSampler``). Keeping one per index makes the figures those of the split itself, and
    index order makes the lists the same whatever the number of ranks."""
    for column in columns:
        if column and len(column) != len(indices):
            raise ValueError(
                f"{len(indices)} indices for {len(column)} sentences' figures: give one index "
                "per evaluated sentence"
            )
    first: dict[int, int] = {}
    for at, index in enumerate(indices):
        first.setdefault(index, at)
    order = [first[i] for i in sorted(first)]
    return [[column[at] for at in order] if column else [] for column in columns]


class Seq2SeqModule(LoadsCheckpointFiles, pl.LightningModule):
    """Attention seq2seq trained with teacher-forced cross-entropy and Adam.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (the datamodule's attributes).
        attention: registered mechanism name; attention_kwargs: its options (e.g. ``{"K": 16}``).
        preset: a ``PRESETS`` name; the size arguments below override it when not None.
        embedding_dim, hidden_size, encoder_layers, decoder_layers, dropout, bidirectional: sizes
            (hidden_size: decoder units, and encoder units per direction; dropout on cell inputs).
        max_source_len: longest source incl. EOS (luong_location attention, and memory attention with
            position encodings, cover that many positions; a longer source fails at fit). Memory
            attention's position encodings take it as eq. 10's S, the data's longest source: give
            the datamodule's ``max_source_len`` (a larger one is warned of when the module is set up).
        pad_id, bos_id, eos_id: special token ids.
        lr, weight_decay: Adam settings (default: the paper's Adam at 1e-4, no weight decay).
        val_beam_size: 1 decodes greedily in validation/test, more uses beam search (the
            paper's 10 is set by the studies; greedy keeps validation cheap by default).
        length_penalty: beam search's length normalisation exponent.
        max_decode_len: most decoding steps (default: 2 * each sentence's own source length + 10).
        val_decode: decode the validation set to log BLEU and decode time.
        distill_weight: lambda of the §3.1 objective (memory attention only): adds lambda times
            the distance of the memory matrix C to the teacher's contexts to the training loss
            (:mod:`lightning_modules.distill`); 0 trains the ordinary model.
        teacher_checkpoint: the trained Seq2SeqModule checkpoint that teaches (read only while
            training; a trained student loads and decodes without it).
        init_from_teacher: "encoder" starts the student from the teacher's encoder and
            embeddings; "none" from its own random initialisation. The copy is made once, at the
            first fit of a fresh module: never over weights of its own (loaded with
            ``load_from_checkpoint`` or ``load_state_dict``, or trained by an earlier fit), so a
            trained student trains on from where it stands.
    """

    def __init__(
        self,
        src_vocab_size: PositiveInt,
        tgt_vocab_size: PositiveInt,
        attention: str = DEFAULT_ATTENTION,
        attention_kwargs: dict | None = None,
        preset: str = "tiny",
        embedding_dim: PositiveInt | None = None,
        hidden_size: PositiveInt | None = None,
        encoder_layers: PositiveInt | None = None,
        decoder_layers: PositiveInt | None = None,
        dropout: Probability | None = None,
        bidirectional: bool | None = None,
        max_source_len: PositiveInt = 256,
        pad_id: TokenId = PAD_ID,
        bos_id: TokenId = BOS_ID,
        eos_id: TokenId = EOS_ID,
        lr: Annotated[float, Gt(0)] = 1e-4,
        weight_decay: Annotated[float, Ge(0)] = 0.0,
        val_beam_size: PositiveInt = 1,
        length_penalty: Annotated[float, Ge(0)] = 1.0,
        max_decode_len: PositiveInt | None = None,
        val_decode: bool = True,
        distill_weight: Annotated[float, Ge(0)] = 0.0,
        teacher_checkpoint: str | None = None,
        init_from_teacher: InitFromTeacher = "none",
    ) -> None:
        super().__init__()
        unknown = [
            name
            for name, value in (
                ("src_vocab_size", src_vocab_size),
                ("tgt_vocab_size", tgt_vocab_size),
                ("max_source_len", max_source_len),
            )
            if value is None
        ]
        if unknown:  # a datamodule's sizes read before its setup (WMT17DataModule's are None then)
            raise ValueError(
                f"Seq2SeqModule: {', '.join(unknown)} got None: a datamodule's vocabulary and "
                'longest source are known after dm.prepare_data(); dm.setup("fit"); call those '
                "before building the model from dm.src_vocab_size, dm.tgt_vocab_size and "
                "dm.max_source_len (or pass whole numbers)"
            )
        check_ranges(Seq2SeqModule.__init__, locals())
        check_distillation(attention, distill_weight, teacher_checkpoint, init_from_teacher)
        if val_beam_size > tgt_vocab_size:  # beam search keeps at most one hypothesis per token
            raise ValueError(
                f"val_beam_size={val_beam_size} is above the target vocabulary size "
                f"({tgt_vocab_size}): a beam holds at most one hypothesis per token; pass "
                f"val_beam_size of at most {tgt_vocab_size}"
            )
        self.save_hyperparameters()
        sizes = get_preset(preset)
        overrides = dict(
            embedding_dim=embedding_dim,
            hidden_size=hidden_size,
            encoder_layers=encoder_layers,
            decoder_layers=decoder_layers,
            dropout=dropout,
            bidirectional=bidirectional,
        )
        sizes.update({k: v for k, v in overrides.items() if v is not None})
        self.model = Seq2Seq(
            src_vocab_size=src_vocab_size,
            tgt_vocab_size=tgt_vocab_size,
            attention=attention,
            attention_kwargs=attention_kwargs,
            max_source_len=max_source_len,
            pad_id=pad_id,
            bos_id=bos_id,
            eos_id=eos_id,
            **sizes,
        )
        # per stage; not ``_buffers``, which is nn.Module's registry of tensors (moved by .to())
        self._eval_buffers: dict[str, _EvalBuffer] = {}
        self.last_bleu_signature: str | None = None
        # the last evaluation's (hypotheses, references) per stage ("val", "test"), one per
        # sentence in the order of the batches' ``indices`` (the split's order; the dataloader's
        # order for batches without them): what its BLEU was computed from (e.g. for paired
        # significance tests)
        self.last_decoded: dict[str, tuple[list[str], list[str]]] = {}
        # the §3.1 teacher: loaded only to train, never a submodule (not in the state dict)
        self._teacher: Teacher | None = None
        # whether the weights are the module's own (loaded, or copied from the teacher already)
        self._own_weights = False
        self._loaded_weights = False  # trained weights loaded (not a teacher's encoder copied in)
        #: the vocabulary of the data the weights were trained on (sizes, and the datamodule's
        #: ``vocabulary_id`` where it has one), recorded at the first fit with a datamodule and
        #: saved in checkpoints; None before (and for checkpoints written before the record)
        self.data_vocabulary: dict[str, Any] | None = None

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        """Teacher-forced logits (B, T, V); see :meth:`Seq2Seq.forward`."""
        return self.model(src, src_lengths, tgt_in)

    # ---------------------------------------------------------------- training
    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, "train")

    # ---------------------------------------------------------------- validation
    def on_validation_epoch_start(self) -> None:
        self._eval_buffers["val"] = _EvalBuffer()

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._log_eval_metrics("val")

    # ---------------------------------------------------------------- test
    def on_test_epoch_start(self) -> None:
        self._eval_buffers["test"] = _EvalBuffer()

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._log_eval_metrics("test")

    # ---------------------------------------------------------------- prediction
    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, Any]:
        """Decode a batch as validation does (:meth:`decode`: ``val_beam_size``,
        ``length_penalty``, ``max_decode_len``), for ``trainer.predict``.

        Returns:
            a dict: ``hypotheses`` LongTensor (B, T') on the CPU (EOS then padding), ``text`` the
            hypotheses through :meth:`ids_to_text` (the datamodule's, when it has one), and the
            batch's ``indices`` (dataset line numbers) when it carries them.
        """
        tokens = self.decode(batch["src"], batch["src_lengths"]).cpu()  # (B, T')
        out: dict[str, Any] = {
            "hypotheses": tokens,
            "text": [self.ids_to_text(row) for row in tokens.tolist()],
        }
        if batch.get("indices") is not None:
            out["indices"] = batch["indices"].cpu()
        return out

    # ---------------------------------------------------------------- optimisation
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )

    # ---------------------------------------------------------------- other hooks
    def setup(self, stage: str) -> None:
        """Load the teacher and copy its encoder in when the student starts from it (before a
        resumed fit restores the checkpoint's weights over them); fail early when the data has
        longer sources than a position-dependent mechanism was built for."""
        if stage == "fit" and self.hparams.distill_weight > 0:
            check_same_space(self.model, self.teacher().model)
        # (weights of its own, loaded or trained: no copy, so no teacher wanted for one)
        if stage == "fit" and self.hparams.init_from_teacher != "none" and not self._own_weights:
            self.start_from_teacher(self.teacher())
        datamodule = (
            getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        )
        self._check_vocabulary(datamodule, stage)
        data_max = getattr(datamodule, "max_source_len", None)
        built = self.model.attention.longest_source
        if data_max is None or built is None:
            return
        if self._loaded_weights and data_max > built:  # trained weights: positions fixed
            raise ValueError(
                f"the datamodule's sources are up to {data_max} tokens (incl. EOS) but these "
                f"weights of {self.hparams.attention!r} attention were trained for "
                f"max_source_len={built} positions: filter longer sentences out of the data "
                f"(sources of at most {built} tokens), or train a model with a larger "
                "max_source_len"
            )
        if (
            data_max < built
            and not self._loaded_weights  # a trained model's positions are as trained
            and getattr(self.model.attention, "use_position_encoding", False)
        ):
            warnings.warn(
                f"attention {self.hparams.attention!r} encodes positions for max_source_len="
                f"{built}, but the datamodule's sources are up to {data_max} tokens (incl. EOS): "
                "its position encodings (eq. 10, S the longest source) then vary little over the "
                f"real positions; pass max_source_len={data_max} to Seq2SeqModule for the "
                "paper's form",
                UserWarning,
                stacklevel=2,
            )
        if data_max > built:
            given = (self.hparams.attention_kwargs or {}).get("max_source_len") is not None
            where = (
                f'attention_kwargs["max_source_len"]={data_max} (or larger; it is set there, '
                "which the module's max_source_len does not override)"
                if given
                else f"max_source_len={data_max} (or larger)"
            )
            raise ValueError(
                f"the datamodule's sources are up to {data_max} tokens (incl. EOS) but attention "
                f"{self.hparams.attention!r} was built for max_source_len={built}; pass "
                f"{where} to Seq2SeqModule"
            )

    def _check_vocabulary(self, datamodule: Any, stage: str) -> None:
        """Refuse a datamodule whose vocabulary is not the one the weights were trained on, and
        record it at the first fit (:attr:`data_vocabulary`, saved in checkpoints).

        A model's ids must mean what they meant in training: with trained weights (a recorded
        vocabulary, or weights loaded from a checkpoint that predates the record) the
        datamodule's vocabulary sizes must equal the ones trained on, and its
        ``vocabulary_id`` (WMT17DataModule: the BPE model's cache key) the recorded one. A fresh
        model only needs room for the data's ids."""
        current = data_vocabulary(datamodule)
        if current is None:
            return
        recorded = self.data_vocabulary
        trained = recorded is not None or self._own_weights
        for side in ("src", "tgt"):
            key, own = f"{side}_vocab_size", self.hparams[f"{side}_vocab_size"]
            data = current[key]
            was = recorded[key] if recorded is not None and recorded.get(key) else own
            if trained and data != was:
                raise ValueError(
                    self._other_data(
                        datamodule,
                        f"its {side} vocabulary has {data} ids, the data the model was trained "
                        f"on had {was}",
                        f"{side}_vocab_size={data}",
                    )
                )
            if data > own:  # an id past the model's embeddings: torch's bare IndexError
                raise ValueError(
                    f"the datamodule's {side} vocabulary has {data} ids but the model was built "
                    f"for {side}_vocab_size={own}; pass {side}_vocab_size={data} (the "
                    f"datamodule's {side}_vocab_size) to Seq2SeqModule"
                )
        was_id, now_id = (recorded or {}).get("vocabulary_id"), current["vocabulary_id"]
        if was_id is not None and now_id is not None and was_id != now_id:
            raise ValueError(
                self._other_data(
                    datamodule,
                    f"its vocabulary is {now_id!r}, the model was trained on {was_id!r} (a BPE "
                    "trained on other text or with other settings: the same id is another piece)",
                    None,
                )
            )
        if stage == "fit" and recorded is None:
            self.data_vocabulary = current

    def _other_data(self, datamodule: Any, what: str, size: str | None) -> str:
        name = type(datamodule).__name__
        fresh = (
            f"; to train a new model on this data instead, build Seq2SeqModule with {size}"
            if size
            else ""
        )
        return (
            f"the datamodule does not match the model's trained weights: {what}. Evaluate the "
            f"model with the data it was trained with: rebuild the datamodule from the model's "
            f"checkpoint, {name}.load_from_checkpoint(path) (or {name}(**torch.load(path, "
            f'weights_only=False)["datamodule_hyper_parameters"])){fresh}'
        )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.data_vocabulary is not None:
            checkpoint[DATA_VOCABULARY] = dict(self.data_vocabulary)
        if (positions := self.model.attention.longest_source) is not None:
            checkpoint[SOURCE_POSITIONS] = positions  # (load_from_checkpoint's kwargs overwrite
            # the hyperparameters it holds before on_load_checkpoint reads them)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if checkpoint.get(FUSED_MEMBER) is not None and _fitting(self):
            raise CheckpointError(
                f"a fused group's member checkpoint (step {checkpoint[FUSED_MEMBER]['step']}) "
                "holds the member's weights, step and Adam state but not a fit loop's position: "
                "Trainer.fit(ckpt_path=...) would train it again from step 0. Resume its sweep "
                "with --resume (the group goes on from its own state), or start a new fit from "
                "its weights: Seq2SeqModule.load_from_checkpoint(path), then trainer.fit(module)"
            )
        if checkpoint.get(DATA_VOCABULARY) is not None:  # absent from older checkpoints
            self.data_vocabulary = dict(checkpoint[DATA_VOCABULARY])
        self._check_positions(checkpoint.get(SOURCE_POSITIONS))

    def _check_positions(self, trained: int | None) -> None:
        """Refuse weights trained for another number of source positions (``trained``, recorded
        in the checkpoint since this version) than this module's mechanism covers
        (``max_source_len``: memory attention's position encodings, eq. 10's S, are no weights
        and would change without a word; luong_location's score layer would not load)."""
        built = self.model.attention.longest_source
        if built is None or trained is None or int(trained) == built:
            return
        raise CheckpointError(
            f"these weights were trained with {self.hparams.attention!r} attention over "
            f"max_source_len={trained} source positions, and this module is built for {built}: "
            + (
                "memory attention's position encodings (eq. 10, S the longest source) are "
                "computed from it, so the same weights would be another model"
                if self.hparams.attention == "memory"
                else "luong_location's score layer has one output per position"
            )
            + f"; load them without overriding max_source_len (sources up to {trained} tokens, "
            "incl. EOS)"
        )

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ):
        """:meth:`torch.nn.Module.load_state_dict`; the weights loaded are the module's own from
        then on (``init_from_teacher`` never copies the teacher's encoder over them)."""
        if strict and _location_bias_unbuilt(self, state_dict):
            stored = {**(self.hparams.attention_kwargs or {}), "bias": True}  # the others kept
            raise CheckpointError(
                "these weights give luong_location's W_a a bias, which this version builds "
                "without (Luong's eq. 8 has none; versions up to 0.1.0 had one): load them with "
                f"Seq2SeqModule.load_from_checkpoint(path, attention_kwargs={stored!r})"
            )
        result = super().load_state_dict(state_dict, strict=strict, assign=assign)
        self._own_weights = self._loaded_weights = True
        return result

    def start_from_teacher(self, teacher: Teacher) -> None:
        """``init_from_teacher``'s copy of the teacher's encoder into a fresh student, once: not
        into a module whose weights are its own already (loaded or trained)."""
        if self.hparams.init_from_teacher != "none" and not self._own_weights:
            init_from_teacher(self.model, teacher.model, self.hparams.init_from_teacher)
        self._own_weights = True

    # ---------------------------------------------------------------- internals
    def teacher(self) -> Teacher:
        """The §3.1 teacher, loaded from ``teacher_checkpoint`` on first use."""
        if self._teacher is None:
            self._teacher = load_teacher(str(self.hparams.teacher_checkpoint))
        return self._teacher

    def _shared_step(self, batch: dict[str, Any], stage: str) -> torch.Tensor:
        src, src_lengths, tgt = batch["src"], batch["src_lengths"], batch["tgt"]
        batch_size = src.shape[0]
        tgt_in = self.model.shift_target(tgt)  # (B, T)
        distilling = stage == "train" and self.hparams.distill_weight > 0
        try:
            if distilling:
                logits, cache, _ = self.model.forward_with_contexts(
                    src, src_lengths, tgt_in, check=False
                )
            else:
                logits = self.model(src, src_lengths, tgt_in, check=False)  # (B, T, V)
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                tgt.reshape(-1),
                ignore_index=self.hparams.pad_id,
                reduction="mean" if stage == "train" else "none",
            )
        except IndexError as exc:  # an id past the vocabulary: named here, free until raised
            self._check_batch_ids(batch, exc)
            raise
        names = METRICS[stage]
        if distilling:
            contexts = self.teacher().contexts(src, src_lengths, tgt_in)  # (B, T, D)
            lengths = (tgt != self.hparams.pad_id).sum(1)  # (B,) real target positions
            term = distillation_term(cache["C"], contexts, lengths)
            self.log(TRAIN_DISTILL, term, on_step=True, on_epoch=True, batch_size=batch_size)
            loss = loss + self.hparams.distill_weight * term
        if stage == "train":
            self.log(
                names["loss"],
                loss,
                on_step=True,
                on_epoch=True,
                prog_bar=True,
                batch_size=batch_size,
            )
            return loss
        # per sentence, summed at the epoch's end over the split's sentences, each once
        # (:meth:`_log_eval_metrics`): the means over every target token of the split, however
        # it is batched and sharded
        real = tgt != self.hparams.pad_id  # (B, T)
        sentence_loss = loss.view_as(tgt).sum(1)  # (B,) pad positions give 0
        correct = (logits.argmax(-1) == tgt) & real
        # one copy to the host for the three (token counts are exact in float32)
        figures = torch.stack((sentence_loss, real.sum(1).float(), correct.sum(1).float()))
        losses, tokens, right = figures.tolist()
        buffer = self._eval_buffers.setdefault(stage, _EvalBuffer())
        buffer.loss.extend(losses)
        buffer.tokens.extend(int(n) for n in tokens)  # at least one a sentence: its EOS
        buffer.correct.extend(int(n) for n in right)
        indices = batch.get("indices")
        if indices is None:
            buffer.indices = None
        elif buffer.indices is not None:
            buffer.indices.extend(int(i) for i in indices.tolist())
        if self.hparams.val_decode:
            self._decode_into_buffer(batch, buffer)
        return sentence_loss.sum() / max(sum(tokens), 1)

    def _check_batch_ids(self, batch: dict[str, Any], exc: IndexError) -> None:
        """Raise ValueError naming the largest id of a batch past the model's vocabulary, in place
        of torch's bare IndexError (dataloaders without a datamodule skip :meth:`setup`'s check).
        On the CPU only: on a GPU such an id stops the device, with no IndexError to catch."""
        for side in ("src", "tgt"):
            ids = batch[side]
            error = ids_error(
                f"the batch's {side}",
                side,
                int(ids.min()),
                int(ids.max()),
                self.hparams[f"{side}_vocab_size"],
            )
            if error is not None:
                raise error from exc

    def decode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> torch.Tensor:
        """Decode with the configured strategy (greedy or beam): tokens (B, T'), an ordinary
        tensor (the decoders run under ``torch.inference_mode``; a copy of their result can be
        changed in place or fed to a training step). A module in training mode decodes in eval
        mode (no dropout, no monotonic attention's noise) and is left in training mode."""
        if self.training:
            modes = [(m, m.training) for m in self.modules()]
            self.eval()
            try:
                return self.decode(src, src_lengths)
            finally:
                for m, training in modes:
                    m.training = training
        if self.hparams.val_beam_size == 1:
            tokens, _ = self.model.greedy_decode(src, src_lengths, self.hparams.max_decode_len)
        else:
            tokens = self.model.beam_search(
                src,
                src_lengths,
                beam_size=self.hparams.val_beam_size,
                max_len=self.hparams.max_decode_len,
                length_penalty=self.hparams.length_penalty,
            )
        return tokens.clone()

    def _decode_into_buffer(self, batch: dict[str, Any], buffer: _EvalBuffer) -> None:
        on_cuda = batch["src"].is_cuda
        if on_cuda:
            torch.cuda.synchronize(batch["src"].device)
        start = time.perf_counter()
        tokens = self.decode(batch["src"], batch["src_lengths"])  # (B, T')
        if on_cuda:
            torch.cuda.synchronize(batch["src"].device)
        buffer.seconds += time.perf_counter() - start
        buffer.hyps.extend(self.ids_to_text(row) for row in tokens.tolist())
        if batch.get("references") is not None:
            buffer.refs.extend(batch["references"])
        else:
            buffer.refs.extend(self.ids_to_text(row) for row in batch["tgt"].tolist())

    def _log_eval_metrics(self, stage: str) -> None:
        """The epoch's figures from its buffer: every rank's sentences gathered under DDP, each
        index once; the loss and token accuracy over their tokens, and BLEU where decoding is on."""
        buffer = self._eval_buffers.pop(stage, None)
        if buffer is None:
            return
        if (
            self.trainer.world_size > 1
            and torch.distributed.is_available()
            and torch.distributed.is_initialized()
        ):
            gathered: list[Any] = [None] * self.trainer.world_size
            mine = (buffer.columns(), buffer.indices, buffer.seconds)
            torch.distributed.all_gather_object(gathered, mine)
            buffer.from_columns(
                [x for part in gathered for x in part[0][c]] for c in range(len(mine[0]))
            )
            buffer.indices = (
                None
                if any(part[1] is None for part in gathered)
                else [i for part in gathered for i in part[1]]
            )
            buffer.seconds = sum(part[2] for part in gathered)
        if buffer.indices is not None:  # the sentences the samplers repeated under DDP, once each
            buffer.from_columns(first_per_index(buffer.indices, *buffer.columns()))
        names = METRICS[stage]
        if tokens := sum(buffer.tokens):
            self.log(names["loss"], sum(buffer.loss) / tokens, prog_bar=True)
            self.log(names["token_acc"], sum(buffer.correct) / tokens)
        if self.hparams.val_decode:
            self._log_decode_metrics(stage, buffer)

    def _log_decode_metrics(self, stage: str, buffer: _EvalBuffer) -> None:
        import sacrebleu  # lazy: only needed once per evaluation epoch

        hyps, refs, seconds = buffer.hyps, buffer.refs, buffer.seconds
        names = METRICS[stage]
        self.last_decoded[stage] = (list(hyps), list(refs))
        # tokenized text is scored as it is (multi-bleu's figure); a datamodule of untokenized
        # text (WMT17DataModule(moses_tokenized=False)) names sacreBLEU's tokenizer instead
        tokenize = getattr(self._datamodule(), "bleu_tokenize", "none")
        bleu = sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize).score if hyps else 0.0
        self.log(names["bleu"], float(bleu), prog_bar=True)
        self.log(names["decode_seconds"], float(seconds))
        detokenize = getattr(self._datamodule(), "detokenize", None)
        if detokenize is not None and hyps:
            from sacrebleu.metrics import BLEU

            metric = BLEU()
            score = metric.corpus_score(
                [detokenize(h) for h in hyps], [[detokenize(r) for r in refs]]
            )
            self.last_bleu_signature = str(metric.get_signature())
            self.log(names["sacrebleu"], float(score.score))

    def _datamodule(self) -> Any:
        if self._trainer is None:
            return None
        return getattr(self.trainer, "datamodule", None)

    def ids_to_text(self, ids: list[int]) -> str:
        """The datamodule's ``ids_to_text``; without one, space-joined ids up to EOS, padding and
        BOS dropped, as both datamodules do (an unknown token stays: a wrong token in BLEU)."""
        datamodule = self._datamodule()
        if datamodule is not None and hasattr(datamodule, "ids_to_text"):
            return datamodule.ids_to_text(ids)
        hp = self.hparams
        return ids_to_text(ids, hp.eos_id, (hp.pad_id, hp.bos_id))

    def _token_string(self, token: int) -> str:
        hp = self.hparams
        specials = {hp.pad_id: PIECES[PAD_ID], hp.bos_id: PIECES[BOS_ID], hp.eos_id: PIECES[EOS_ID]}
        if token in specials:
            return specials[token]
        datamodule = self._datamodule()
        if datamodule is not None and hasattr(datamodule, "ids_to_text"):
            text = datamodule.ids_to_text([token])
            return text if text else str(token)
        return str(token)

    @torch.no_grad()
    def attention_heatmaps(self, batch: dict[str, Any], max_items: int = 4) -> list[dict[str, Any]]:
        """Greedy-decode the first ``max_items`` sentences of a batch and return their alignments.

        Returns:
            one dict per sentence: ``source`` (list[str], incl. EOS), ``output`` (list[str], incl.
            EOS), ``weights`` numpy array (T, S); plus ``alpha`` (S, K) and ``beta`` (T, K) when the
            mechanism provides them (memory attention). Data only; plotting is elsewhere.
        """
        src = batch["src"][:max_items].to(self.device)  # (N, S)
        src_lengths = batch["src_lengths"][:max_items].to(self.device)  # (N,)
        modes = [(m, m.training) for m in self.modules()]  # each put back as it was (decode)
        self.eval()
        try:
            trace = self.model.attention_trace(src, src_lengths, self.hparams.max_decode_len)
        finally:
            for m, training in modes:
                m.training = training
        items = []
        for i in range(src.shape[0]):
            s_len = int(src_lengths[i])
            t_len = int(trace["lengths"][i])
            item: dict[str, Any] = {
                "source": [self._token_string(t) for t in src[i, :s_len].tolist()],
                "output": [self._token_string(t) for t in trace["tokens"][i, :t_len].tolist()],
                "weights": trace["weights"][i, :t_len, :s_len].float().cpu().numpy(),
            }
            if "alpha" in trace:  # (N, T, S, K); the encoder scores do not change with the step
                item["alpha"] = trace["alpha"][i, 0, :s_len].float().cpu().numpy()  # (S, K)
            if "beta" in trace:
                item["beta"] = trace["beta"][i, :t_len].float().cpu().numpy()  # (T, K)
            items.append(item)
        return items


#: the checkpoint key of :attr:`Seq2SeqModule.data_vocabulary`
DATA_VOCABULARY = "data_vocabulary"
#: the checkpoint key of the source positions the weights were trained over (the mechanism's
#: ``longest_source``: luong_location, memory attention with position encodings)
SOURCE_POSITIONS = "source_positions"
#: the checkpoint key that marks a fused group's member checkpoint (its step and epoch): it loads
#: as a plain module's, but its fit loop's counters are a validation's, not a fit's
FUSED_MEMBER = "fused_member"


def _location_bias_unbuilt(module: Seq2SeqModule, state_dict: Mapping[str, Any]) -> bool:
    """Whether ``state_dict`` has a luong_location bias that ``module`` was built without."""
    options = module.hparams.get("attention_kwargs") or {}
    return (
        module.hparams.get("attention") == "luong_location"
        and not options.get("bias")
        and any(key.endswith("attention.W_a.bias") for key in state_dict)
    )


def _fitting(module: pl.LightningModule) -> bool:
    """Whether ``module`` is attached to a Trainer that is fitting (restoring a fit's checkpoint)."""
    try:
        trainer = module.trainer
    except RuntimeError:  # attached to none (load_from_checkpoint)
        return False
    return trainer is not None and trainer.state.fn == "fit"


def data_vocabulary(datamodule: Any) -> dict[str, Any] | None:
    """A datamodule's vocabulary as the module records it: ``src_vocab_size``,
    ``tgt_vocab_size`` and ``vocabulary_id`` (None where the datamodule has none); None when its
    sizes are not known (no datamodule, or one not set up)."""
    sizes = [getattr(datamodule, f"{side}_vocab_size", None) for side in ("src", "tgt")]
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in sizes):
        return None
    identity = getattr(datamodule, "vocabulary_id", None)
    return {
        "src_vocab_size": sizes[0],
        "tgt_vocab_size": sizes[1],
        "vocabulary_id": identity if isinstance(identity, str) else None,
    }


def load_teacher(checkpoint: str) -> Teacher:
    """The §3.1 teacher of a ``Seq2SeqModule`` checkpoint, built without drawing from the global
    RNG (what :meth:`Seq2SeqModule.teacher` loads; a fused group loads its members' the same way)."""
    return Teacher.load(checkpoint, _load_model)


def _load_model(checkpoint: str) -> Seq2Seq:
    """The ``Seq2Seq`` of a ``Seq2SeqModule`` checkpoint, on the CPU (a teacher's loader)."""
    return Seq2SeqModule.load_from_checkpoint(checkpoint, map_location="cpu").model


__all__ = ["Seq2SeqModule", "METRICS", "load_teacher"]
