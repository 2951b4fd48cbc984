"""A stand-in for ``lightning_modules.fused.FusedSeq2Seq`` with the same API: M plain modules
stepped one after another, each with its own Adam and its own gradient clipping, as Lightning's
automatic optimisation steps one module. For testing the sweep's orchestration of fused trials
without the fused model itself."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


class SequentialFused:
    def __init__(self, modules: list, clip: float | None) -> None:
        self.modules = list(modules)
        self.clip = clip
        self.member_ids = list(range(len(self.modules)))
        self.optimizers = [
            torch.optim.Adam(m.parameters(), lr=m.hparams.lr, weight_decay=m.hparams.weight_decay)
            for m in self.modules
        ]

    @classmethod
    def from_modules(cls, modules: list, clip: float | None = None) -> SequentialFused:
        return cls(modules, clip)

    def to(self, device: Any) -> SequentialFused:
        for m in self.modules:
            m.to(device)
        return self

    def train_step(self, batches: list[dict]) -> torch.Tensor:
        losses = []
        for module, opt, batch in zip(self.modules, self.optimizers, batches):
            module.train()
            opt.zero_grad()
            tgt = batch["tgt"]
            logits = module.model(
                batch["src"], batch["src_lengths"], module.model.shift_target(tgt)
            )  # (B, T, V)
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                tgt.reshape(-1),
                ignore_index=module.hparams.pad_id,
            )
            loss.backward()
            if self.clip:
                torch.nn.utils.clip_grad_norm_(module.parameters(), self.clip)
            opt.step()
            losses.append(loss.detach())
        return torch.stack(losses)  # (M,)

    def member_module(self, i: int):
        from lightning_modules.module import Seq2SeqModule

        source = self.modules[i]
        module = Seq2SeqModule(**dict(source.hparams))
        module.load_state_dict(source.state_dict())
        return module

    def optimizer_state(self, i: int) -> dict:
        return self.optimizers[i].state_dict()

    def keep(self, indices: list[int]) -> None:
        self.modules = [self.modules[i] for i in indices]
        self.optimizers = [self.optimizers[i] for i in indices]
        self.member_ids = [self.member_ids[i] for i in indices]

    def state_dict(self) -> dict:
        return {
            "member_ids": list(self.member_ids),
            "modules": [m.state_dict() for m in self.modules],
            "optimizers": [o.state_dict() for o in self.optimizers],
        }

    def load_state_dict(self, state: dict) -> None:
        for m, s in zip(self.modules, state["modules"]):
            m.load_state_dict(s)
        for o, s in zip(self.optimizers, state["optimizers"]):
            o.load_state_dict(s)
        self.member_ids = list(state["member_ids"])


def shape_key(hparams: dict) -> tuple:
    free = {"lr", "weight_decay", "dropout", "seed"}
    return tuple(sorted((k, repr(v)) for k, v in hparams.items() if k not in free))


FusedSeq2Seq = SequentialFused
