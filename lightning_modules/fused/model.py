"""FusedSeq2Seq: M Seq2SeqModules of one group key trained as one model (see the package
docstring)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import Attention, build_attention
from ..distill import Teacher, check_same_space, sentence_distances
from ..module import Seq2SeqModule, load_teacher
from ..seq2seq import check_inputs
from .adam import adam_state_dict, adam_step_, clip_grad_norms_, load_adam_state_dict
from .decoder import FusedDecoder
from .encoder import FusedEncoder
from .key import (
    module_arguments,
    resolved_attention_options,
    resolved_sizes,
    shape_difference,
    shape_key,
    unfusable_reason,
)
from .layers import DropoutRates
from .layout import FlatParameters, Leaf

PRECISIONS = ("32-true", "bf16-mixed")
#: 2: members may differ along the member axes (the layout follows from the members' hparams);
#: a version-1 state (a group of one shape, whose layout is the same) still loads
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)


def _new_module(hparams: Mapping[str, Any]) -> Seq2SeqModule:
    """A Seq2SeqModule built from ``hparams`` without touching the caller's random stream (its
    random initial weights are overwritten at once)."""
    with torch.random.fork_rng(devices=[]):
        return Seq2SeqModule(**hparams)


def _source_limit(args: Mapping[str, Any]) -> int | None:
    """The longest batch a member's mechanism takes (a longer one raises in the unfused
    module): memory attention's with position encodings and luong_location's
    ``max_source_len``; None for the others."""
    options = resolved_attention_options(args)
    if args["attention"] == "luong_location" or (
        args["attention"] == "memory" and options["position_encoding"]
    ):
        return int(options["max_source_len"])
    return None


def _start_students(modules: Sequence[Seq2SeqModule]) -> dict[str, Teacher]:
    """What ``Seq2SeqModule.setup("fit")`` does to a student before it trains, for each student
    among ``modules`` (in place): its teacher loaded (one per checkpoint), its memory size checked
    against the teacher's contexts, the teacher's encoder copied in for
    ``init_from_teacher="encoder"``. Returns the teachers by checkpoint."""
    teachers: dict[str, Teacher] = {}
    for module in modules:
        hp = module.hparams
        if hp.distill_weight <= 0 and hp.init_from_teacher == "none":
            continue
        path = str(hp.teacher_checkpoint)
        if path not in teachers:
            teachers[path] = module.teacher()
        teacher = teachers[path]
        if hp.distill_weight > 0:
            check_same_space(module.model, teacher.model)
        module.start_from_teacher(teacher)
    return teachers


class FusedSeq2Seq:
    """M Seq2SeqModules (members) of one group key trained as one model with a leading member
    dimension; they may differ along the member axes
    (:func:`~lightning_modules.fused.key.member_axes`: memory attention's K, scoring and position
    encodings, ``max_source_len``...), padded and masked per member.

    Build it with :meth:`from_modules`; then :meth:`train_step` trains every member one step on
    its own batch, :meth:`member_module` gives member i as a plain module (to validate or
    checkpoint), :meth:`keep` drops members, :meth:`state_dict` saves the whole group.

    Args:
        hparams: each member's Seq2SeqModule arguments (equal shape keys).
        template: a module built from one of them (for the sizes; its weights are not used).
        clip: each member's gradient-norm clipping value (None or 0: none).
        device: where the weights live.
        precision: ``"32-true"`` or ``"bf16-mixed"`` (bf16 autocast over the forward pass, as
            Lightning's precision of that name; a caller's own ``torch.autocast`` works too).
    """

    def __init__(
        self,
        hparams: Sequence[Mapping[str, Any]],
        template: Seq2SeqModule,
        clip: Sequence[float | None],
        device: torch.device,
        precision: str = "32-true",
    ) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision={precision!r}; valid: {', '.join(PRECISIONS)}")
        if len(clip) != len(hparams):
            raise ValueError(f"clip has {len(clip)} values for {len(hparams)} members")
        self.hparams = [dict(h) for h in hparams]
        self.member_ids = list(range(len(hparams)))
        self.clip = list(clip)
        self.steps = [0] * len(hparams)
        self.precision = precision
        # the §3.1 teachers of the members that distil, by checkpoint: loaded only to train (on
        # the first step after a restore), never part of the group's state
        self._teachers: dict[str, Teacher] = {}
        self.last_distill: torch.Tensor | None = None
        self.pad_id, self.bos_id = template.hparams.pad_id, template.hparams.bos_id
        model = template.model
        self._attention_dims = (model.decoder.hidden_size, model.encoder.output_size)
        rates = self._member_settings()
        self.encoder = FusedEncoder(model.encoder, rates)
        self.decoder = FusedDecoder(
            model.decoder, self._member_attentions(self.hparams), rates, "model.decoder."
        )
        self.net = nn.ModuleDict({"encoder": self.encoder, "decoder": self.decoder}).to(device)
        self.param_names = [name for name, _ in template.named_parameters()]
        self.flat = FlatParameters(self._leaves(), len(hparams), device)
        covered = [name for leaf in self.flat.leaves for name in leaf.parts]
        if sorted(covered) != sorted(self.param_names):
            raise RuntimeError(
                "the fused layout does not hold the module's parameters one to one: missing "
                f"{sorted(set(self.param_names) - set(covered))}, extra "
                f"{sorted(set(covered) - set(self.param_names))}"
            )
        self.flat.bind()

    # ---------------------------------------------------------------- building
    @classmethod
    def from_modules(
        cls,
        modules: Sequence[Seq2SeqModule],
        clip: Sequence[float | None] | None = None,
        precision: str = "32-true",
    ) -> FusedSeq2Seq:
        """Fuse ``modules`` (their current weights are copied in; Adam starts fresh).

        A student (``distill_weight`` > 0 or ``init_from_teacher="encoder"``) starts as
        ``Seq2SeqModule.setup("fit")`` starts it alone: its teacher is loaded (one per checkpoint,
        without touching the global RNG), its memory size is checked against the teacher's, and
        ``init_from_teacher="encoder"`` copies the teacher's encoder into the module, in place,
        before its weights are copied in.

        Args:
            modules: Seq2SeqModules of equal :func:`shape_key`, on one device.
            clip: each member's ``gradient_clip_val`` (None: no clipping for any).
            precision: see the class.
        Raises:
            ValueError: no modules, shapes differ (naming the settings), devices differ, or a
                module has no fused form (:func:`unfusable_reason`).
        """
        if not modules:
            raise ValueError("from_modules needs at least one module")
        hparams = [dict(m.hparams) for m in modules]
        for i, h in enumerate(hparams):
            reason = unfusable_reason(h)
            if reason:
                raise ValueError(f"member {i} cannot train fused: {reason}")
            if shape_key(h) != shape_key(hparams[0]):
                raise ValueError(
                    f"member {i} does not fuse with member 0; differing settings: "
                    + "; ".join(shape_difference(hparams[0], h))
                )
        devices = {m.device for m in modules}
        if len(devices) > 1:
            raise ValueError(f"modules are on different devices {sorted(map(str, devices))}")
        clip = [None] * len(modules) if clip is None else list(clip)
        teachers = _start_students(modules)
        fused = cls(hparams, modules[0], clip, devices.pop(), precision)
        fused._teachers.update(
            {path: t for path, t in teachers.items() if path in fused._teacher_paths}
        )
        for i, module in enumerate(modules):
            fused._load_weights(i, module.state_dict())
        return fused

    @classmethod
    def from_state_dict(
        cls, state: Mapping[str, Any], device: str | torch.device = "cpu"
    ) -> FusedSeq2Seq:
        """Rebuild a group saved by :meth:`state_dict` (an exact resume)."""
        template = _new_module(state["hparams"][0])
        fused = cls(
            state["hparams"], template, state["clip"], torch.device(device), state["precision"]
        )
        fused.load_state_dict(state)
        return fused

    @torch.no_grad()
    def _load_weights(self, member: int, state: Mapping[str, torch.Tensor]) -> None:
        for name, view in self.flat.named_parts(self.flat.data, member):
            view.copy_(state[name])

    def _member_settings(self) -> DropoutRates:
        """Each member's Adam settings (:attr:`lr`, :attr:`weight_decay`), longest batch
        (``_source_limits``) and §3.1 term (:attr:`distill_weight`, its teacher's checkpoint and
        its memory's K) from its hparams, and its dropout probability."""
        args = [module_arguments(h) for h in self.hparams]
        self.lr = [float(a["lr"]) for a in args]
        self.weight_decay = [float(a["weight_decay"]) for a in args]
        self._source_limits = [_source_limit(a) for a in args]
        self.distill_weight = [float(a["distill_weight"]) for a in args]
        self._teacher_paths = [
            str(a["teacher_checkpoint"]) if a["distill_weight"] > 0 else None for a in args
        ]
        self._students = [i for i, path in enumerate(self._teacher_paths) if path is not None]
        self._student_k = [int(resolved_attention_options(args[i])["K"]) for i in self._students]
        self._teachers = {p: t for p, t in self._teachers.items() if p in self._teacher_paths}
        self._tensors: dict[str, torch.Tensor] = {}
        return DropoutRates([resolved_sizes(a)["dropout"] for a in args])

    def _member_attentions(self, hparams: Sequence[Mapping[str, Any]]) -> list[Attention]:
        """Each member's own attention mechanism, built from its hparams as its module builds it
        (for its options and sizes; its random weights are not used, and the caller's random
        stream is left alone)."""
        query_dim, memory_dim = self._attention_dims
        with torch.random.fork_rng(devices=[]):
            return [
                build_attention(
                    args["attention"], query_dim, memory_dim, **resolved_attention_options(args)
                )
                for args in map(module_arguments, hparams)
            ]

    def _leaves(self) -> list[Leaf]:
        return self.encoder.leaves("model.encoder.") + self.decoder.leaves("model.decoder.")

    def _relayout(self, hparams: Sequence[Mapping[str, Any]], members: Sequence[int]) -> None:
        """Rebuild the mechanism and the flat buffers for the members ``hparams``, which were
        members ``members`` of the current layout: their weights, gradients and Adam state move
        over (by rows where the padded shapes stay, else part by part into fresh zeros)."""
        old = self.flat
        self.decoder.set_attention(self._member_attentions(hparams))
        self.decoder.attention.to(self.device)
        flat = FlatParameters(self._leaves(), len(hparams), self.device)
        if [leaf.shape for leaf in flat.leaves] == [leaf.shape for leaf in old.leaves]:
            rows = torch.tensor(list(members), device=self.device)
            flat.data, flat.grad = old.data.index_select(0, rows), old.grad.index_select(0, rows)
            flat.exp_avg = old.exp_avg.index_select(0, rows)
            flat.exp_avg_sq = old.exp_avg_sq.index_select(0, rows)
        else:
            flat.copy_members(old, members)
        self.flat = flat
        flat.bind()

    # ---------------------------------------------------------------- properties
    @property
    def members(self) -> int:
        return len(self.hparams)

    @property
    def device(self) -> torch.device:
        return self.flat.data.device

    # ---------------------------------------------------------------- training
    def train_step(self, batches: Sequence[Mapping[str, torch.Tensor]]) -> torch.Tensor:
        """One optimisation step of every member: ``batches[i]`` is member i's batch (the
        datamodule's dict: src (B, S), src_lengths (B,), tgt (B, T); sizes may differ between
        members). Forward, each member's mean token cross-entropy (plus, for a student, its
        ``distill_weight`` times its §3.1 term against its own teacher's contexts on its batch:
        :meth:`_distillation`), backward of their sum, per-member gradient-norm clipping, Adam.
        Returns the (M,) losses, detached (each as its module's ``train/loss``); a student's
        term alone is then in :attr:`last_distill` (``train/distill``)."""
        if len(batches) != self.members:
            raise ValueError(f"train_step got {len(batches)} batches for {self.members} members")
        src, lengths, tgt = self._stack(batches)
        self.net.train()
        self.flat.grad.zero_()
        losses = self._losses(src, lengths, tgt)
        self._backward(losses)
        clip_grad_norms_(self.flat.grad, self.clip)
        adam_step_(self.flat, self.steps, self.lr, self.weight_decay)
        return losses.detach()

    @staticmethod
    def _backward(losses: torch.Tensor) -> None:
        """The gradients of the members' summed losses, added into the flat gradient buffer."""
        with warnings.catch_warnings():
            # the leaves view rows of one flat buffer, strided over the members: autograd adds
            # their gradients in place all the same, and says that this layout is unusual
            warnings.filterwarnings("ignore", message="grad and param do not obey the gradient")
            losses.sum().backward()

    def _losses(
        self,
        src: torch.Tensor,
        lengths: torch.Tensor,
        tgt: torch.Tensor,
        contexts: torch.Tensor | None = None,
        masked: bool = False,
    ) -> torch.Tensor:
        """Each member's training loss, (M,): its mean token cross-entropy over its non-pad
        targets, plus its §3.1 term for a student. ``contexts``: the students' teacher contexts
        (computed here when None); ``masked``: the encoder's masked recurrence (no host
        reads: what a CUDA graph captures) in place of its packed one."""
        autocast = (
            torch.autocast(self.device.type, dtype=torch.bfloat16)
            if self.precision == "bf16-mixed"
            else contextlib.nullcontext()
        )
        with autocast:
            encode = self.encoder.masked if masked else self.encoder
            memory, mask, state = encode(src, lengths)
            tgt_in = self.shift_target(tgt)  # (M, B, T)
            logits, cache = self.decoder(tgt_in, state, memory, mask)  # (M, B, T, V)
            per_token = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                tgt.reshape(-1),
                ignore_index=self.pad_id,
                reduction="none",
            ).view(self.members, -1)  # (M, B*T)
            if self._students and contexts is None:
                contexts = self.teacher_contexts(src, lengths, tgt)
        counts = (tgt != self.pad_id).view(self.members, -1).sum(1)  # (M,)
        losses = per_token.sum(1) / counts
        if not self._students:
            return losses
        terms = self._distillation(cache["C"], contexts, tgt)  # (M,) 0 for the others
        self.last_distill = terms.detach()
        return losses + self.member_tensor("distill_weight") * terms

    def shift_target(self, tgt: torch.Tensor) -> torch.Tensor:
        """(M, B, T) targets -> (M, B, T) decoder inputs: BOS followed by tgt[..., :-1]."""
        bos = tgt.new_full((*tgt.shape[:2], 1), self.bos_id)  # (M, B, 1)
        return torch.cat([bos, tgt[..., :-1]], dim=-1)  # (M, B, T)

    def member_tensor(self, name: str) -> torch.Tensor:
        """A per-member setting on the model's device, made once per set of members (so that a
        step captured in a CUDA graph reads it without a copy from the host): ``"lr"``,
        ``"weight_decay"``, ``"clip"`` (each (M, 1); a member without clipping 0),
        ``"distill_weight"`` (M,), ``"students"`` and ``"student_k"`` (the students' rows and
        their K, long)."""
        cached = self._tensors.get(name)
        if cached is None or cached.device != self.device:
            values, dtype = {
                "lr": ([[v] for v in self.lr], torch.float32),
                "weight_decay": ([[v] for v in self.weight_decay], torch.float32),
                "clip": ([[float(c or 0.0)] for c in self.clip], torch.float32),
                "distill_weight": (self.distill_weight, torch.float32),
                "students": (self._students, torch.long),
                "student_k": (self._student_k, torch.long),
            }[name]
            cached = self._tensors[name] = torch.tensor(values, dtype=dtype, device=self.device)
        return cached

    # ---------------------------------------------------------------- the §3.1 teachers
    @property
    def students(self) -> list[int]:
        """The members that distil (``distill_weight`` > 0), in member order."""
        return list(self._students)

    def teacher(self, member: int) -> Teacher:
        """Member ``member``'s teacher, loaded on first use from its ``teacher_checkpoint`` (as
        ``Seq2SeqModule.teacher`` loads it: without drawing from the global RNG); members of one
        checkpoint share it."""
        path = self._teacher_paths[member]
        if path is None:
            raise ValueError(f"member {member} has no teacher (distill_weight 0)")
        if path not in self._teachers:
            self._teachers[path] = load_teacher(path)
        return self._teachers[path]

    @torch.no_grad()
    def teacher_contexts(
        self, src: torch.Tensor, lengths: torch.Tensor, tgt: torch.Tensor
    ) -> torch.Tensor:
        """Each student's teacher's contexts on the student's own (stacked) batch: src (M, B, S),
        lengths (M, B), tgt (M, B, T) -> (len(students), B, T, D), in :attr:`students`' order.
        Teacher-forced on the student's gold decoder inputs, in eval mode, one call per teacher
        over all its students' rows (a filler row is one pad token: its contexts are unread)."""
        tgt_in = self.shift_target(tgt)
        by_teacher: dict[str, list[int]] = {}
        for position, member in enumerate(self._students):
            by_teacher.setdefault(self._teacher_paths[member], []).append(position)
        out: list[torch.Tensor | None] = [None] * len(self._students)
        B, T = tgt.shape[1:]
        for positions in by_teacher.values():
            rows = torch.tensor([self._students[p] for p in positions], device=src.device)
            teacher = self.teacher(self._students[positions[0]])
            contexts = teacher.contexts(
                src.index_select(0, rows).flatten(0, 1),
                lengths.index_select(0, rows).flatten(0, 1),
                tgt_in.index_select(0, rows).flatten(0, 1),
            ).view(len(positions), B, T, -1)  # (n, B, T, D)
            for k, position in enumerate(positions):
                out[position] = contexts[k]
        return torch.stack(out)  # (students, B, T, D)

    def _distillation(
        self, C: torch.Tensor, contexts: torch.Tensor, tgt: torch.Tensor
    ) -> torch.Tensor:
        """Each member's §3.1 term, (M,), 0 for a member that does not distil: as
        :func:`lightning_modules.distill.distillation_term` computes it alone, with the
        member's own K (its padded slots of C are never matched) and its own sentences (a
        filler row has no target and is not counted).

        Args:
            C: (M * B, K, D) the memory matrices of every member's rows (K the group's largest).
            contexts: (len(students), B, T, D) the students' teachers' contexts.
            tgt: (M, B, T) the targets.
        """
        M, B = tgt.shape[:2]
        rows = self.member_tensor("students")  # (students,)
        C = C.view(M, B, *C.shape[1:]).index_select(0, rows)  # (students, B, K, D)
        lengths = (tgt.index_select(0, rows) != self.pad_id).sum(-1)  # (students, B)
        own_k = self.member_tensor("student_k").view(-1, 1)  # (students, 1)
        distances = sentence_distances(C, contexts, lengths, own_k)  # (students, B)
        real = (lengths > 0).to(distances.dtype)  # (students, B) not a filler row
        terms = (distances * real).sum(1) / real.sum(1)  # (students,)
        return terms.new_zeros(M).index_copy(0, rows, terms)

    def _stack(
        self, batches: Sequence[Mapping[str, torch.Tensor]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The members' batches padded to common sizes: src (M, B, S), lengths (M, B), tgt
        (M, B, T), each member's sentences sorted longest first (the loss is a sum over them). A
        member with fewer sentences gets filler rows (one pad token, all-pad target) that the
        loss ignores. A batch on the CPU is checked as the unfused model checks its inputs
        (:func:`~lightning_modules.seq2seq.check_inputs`: lengths 1 to S, ids in the
        vocabulary); one already on a GPU is not (that would read the device every step)."""
        M = self.members
        B = max(b["src"].shape[0] for b in batches)
        S = max(b["src"].shape[1] for b in batches)
        T = max(b["tgt"].shape[1] for b in batches)
        device = batches[0]["src"].device
        for m, (batch, limit) in enumerate(zip(batches, self._source_limits)):
            if batch["src"].device.type == "cpu":  # a GPU's batch is not read back every step
                h = self.hparams[m]
                try:
                    check_inputs(
                        batch["src"],
                        batch["src_lengths"],
                        h["src_vocab_size"],
                        batch["tgt"],
                        h["tgt_vocab_size"],
                    )
                except ValueError as exc:  # a length past the row would read the next sentence
                    raise ValueError(f"member {m}'s batch: {exc}") from None
            if limit is not None and batch["src"].shape[1] > limit:
                raise ValueError(
                    f"member {m}'s batch has {batch['src'].shape[1]} source positions, but its "
                    f"{self.hparams[m].get('attention')} attention covers "
                    f"max_source_len={limit}: build it with a larger max_source_len or filter "
                    "longer sentences out of its data"
                )
        src = torch.full((M, B, S), self.pad_id, dtype=torch.long, device=device)
        tgt = torch.full((M, B, T), self.pad_id, dtype=torch.long, device=device)
        lengths = torch.ones(M, B, dtype=torch.long, device=device)
        for m, batch in enumerate(batches):
            rows, width = batch["src"].shape
            src[m, :rows, :width] = batch["src"]
            tgt[m, :rows, : batch["tgt"].shape[1]] = batch["tgt"]
            lengths[m, :rows] = batch["src_lengths"]
        # each member's sentences longest first: the encoder's packed steps then narrow fastest
        order = lengths.argsort(dim=1, descending=True, stable=True)  # (M, B)
        src = src.gather(1, order.unsqueeze(-1).expand_as(src))
        tgt = tgt.gather(1, order.unsqueeze(-1).expand_as(tgt))
        lengths = lengths.gather(1, order)
        return src.to(self.device), lengths.to(self.device), tgt.to(self.device)

    # ---------------------------------------------------------------- members
    def member_module(self, i: int) -> Seq2SeqModule:
        """Member ``i`` as a plain Seq2SeqModule (its own hparams, copies of its current weights,
        on this model's device, in eval mode): what to validate with and to checkpoint."""
        module = _new_module(self.hparams[i])
        state = module.state_dict()
        state.update(
            {name: t.detach().clone() for name, t in self.flat.named_parts(self.flat.data, i)}
        )
        module.load_state_dict(state)
        return module.to(self.device).eval()

    def member_gradients(self, i: int) -> dict[str, torch.Tensor]:
        """Member ``i``'s gradients of the last step (after clipping), copies under the unfused
        module's parameter names."""
        return {name: t.clone() for name, t in self.flat.named_parts(self.flat.grad, i)}

    def optimizer_state(self, i: int) -> dict[str, Any]:
        """Member ``i``'s Adam state as ``torch.optim.Adam(member_module(i).parameters(), lr,
        weight_decay=...).state_dict()`` would hold it (what Lightning's checkpoint stores)."""
        return adam_state_dict(
            self.flat, i, self.param_names, self.steps[i], self.lr[i], self.weight_decay[i]
        )

    def load_optimizer_state(self, i: int, state_dict: Mapping[str, Any]) -> None:
        """Member ``i``'s Adam moments and step count from an unfused optimiser's state dict."""
        self.steps[i] = load_adam_state_dict(self.flat, i, self.param_names, state_dict)

    def keep(self, indices: Sequence[int]) -> None:
        """Keep only members ``indices`` (weights, gradients, Adam state and settings), numbered
        0.. in that order; :attr:`member_ids` maps them to the original members. The padding
        follows the kept members: dropping the member of the largest K shrinks the padded
        weights to the largest K left (a group costs what its largest member costs)."""
        indices = [int(i) for i in indices]
        if (
            not indices
            or len(set(indices)) != len(indices)
            or not all(0 <= i < self.members for i in indices)
        ):
            raise ValueError(
                f"keep({indices}): need distinct member indices in 0..{self.members - 1}"
            )
        self._relayout([self.hparams[i] for i in indices], indices)
        self.hparams = [self.hparams[i] for i in indices]
        self.member_ids = [self.member_ids[i] for i in indices]
        self.clip = [self.clip[i] for i in indices]
        self.steps = [self.steps[i] for i in indices]
        self.encoder.rates = self.decoder.rates = self._member_settings()

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """The whole group: weights, Adam's moments and step counts, each member's settings."""
        return {
            "version": STATE_VERSION,
            "hparams": [dict(h) for h in self.hparams],
            "member_ids": list(self.member_ids),
            "clip": list(self.clip),
            "steps": list(self.steps),
            "precision": self.precision,
            **{
                name: t.detach().clone()
                for name, t in self.flat.buffers().items()
                if name != "grad"
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (members of the same group key as this model's;
        their number and member axes may differ: the layout follows the saved members)."""
        if state.get("version") not in READABLE_VERSIONS:
            raise ValueError(
                f"fused state version {state.get('version')!r}; this code reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))}: resume it with the code that saved it"
            )
        if shape_key(state["hparams"][0]) != shape_key(self.hparams[0]):
            raise ValueError(
                "the saved group's shapes differ from this model's: "
                + "; ".join(shape_difference(self.hparams[0], state["hparams"][0]))
            )
        hparams = [dict(h) for h in state["hparams"]]
        device = self.device
        before = self.decoder.attention, self.decoder._attention_leaves
        self.decoder.set_attention(self._member_attentions(hparams))
        self.decoder.attention.to(device)
        flat = FlatParameters(self._leaves(), len(hparams), device)
        if tuple(state["data"].shape) != tuple(flat.data.shape):
            self.decoder.attention, self.decoder._attention_leaves = before
            raise ValueError(
                f"the saved weights are {tuple(state['data'].shape)}, but the saved members' "
                f"layout is {tuple(flat.data.shape)}: the state was not written by "
                "FusedSeq2Seq.state_dict of these members"
            )
        self.hparams = hparams
        self.member_ids = list(state["member_ids"])
        self.clip = list(state["clip"])
        self.steps = list(state["steps"])
        self.precision = state["precision"]
        self.flat = flat
        flat.data = state["data"].to(device).clone()
        flat.exp_avg = state["exp_avg"].to(device).clone()
        flat.exp_avg_sq = state["exp_avg_sq"].to(device).clone()
        flat.grad = torch.zeros_like(flat.data)
        flat.bind()
        self.encoder.rates = self.decoder.rates = self._member_settings()

    def to(self, device: str | torch.device) -> FusedSeq2Seq:
        """Move the weights, Adam's state and the mechanisms' constant buffers to ``device``."""
        device = torch.device(device)
        self.flat.apply(lambda t: t.to(device))
        for module in self.net.modules():
            for name, buffer in list(module.named_buffers(recurse=False)):
                setattr(module, name, buffer.to(device))  # still a registered buffer
        return self
