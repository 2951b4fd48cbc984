"""Training and decoding speed of this project's Seq2Seq against JoeyNMT and OpenNMT-py, on the
same model as far as each toolkit's options allow, measured side by side in one run.

Run it (from the repository root; the peers are optional, see requirements/peers.txt):

    .venv/bin/pip install --no-deps -r requirements/peers.txt          # JoeyNMT + OpenNMT-py
    .venv/bin/python benchmarks/peers.py                               # ~6 min, idle 2-core CPU
    .venv/bin/python benchmarks/peers.py --quick                       # seconds: plumbing only
    .venv/bin/python benchmarks/peers.py --systems project project:bf16 joeynmt opennmt
    .venv/bin/python benchmarks/peers.py --device cuda --rounds 10     # on a GPU

Prints the machine, each system's parameter count and the architectural differences that its
options cannot remove, a table of medians (all on stderr), and ONE JSON line on stdout:
``systems`` (per system: ``available``, ``params``, ``train`` {L: ``s_per_step``,
``tokens_per_s``, ``cpu_s_per_step``}, ``greedy_s``, ``beam_s``, ``greedy_cpu_s``, ``beam_cpu_s``),
``ratios`` (per peer and per project variant: its seconds / the project's seconds for
``train_L<L>``, ``greedy``, ``beam``: above 1 means the project is faster), ``ratios_cpu_time``
(the same from each process's CPU time, on CPU: on a shared machine the wall clock also counts
what other processes take from the core), ``unavailable`` (peer -> why it could not be imported
or built), ``differences``, ``machine``, ``settings`` and ``loadavg`` (at start and end).
Each ``train`` cell also holds the step's arithmetic (``benchmarks/_flops.py``): ``gflop_per_step``
(matrix products, forward, backward and optimiser; ``gflop_lstm_added`` of it are fused LSTM calls
counted from their sizes), ``gflops`` (the rate the step ran at) and ``floor_s_per_step`` (the
FLOPs at ``machine.gemm_gflops``, the best fp32 rate of the step's product shapes on the pinned
core: no implementation at this precision is faster). ``ceilings``: per peer and length, the
peer's seconds over the project's floor, the highest ratio peer / project this precision allows.

The model (the paper_copy preset, Britz et al. 2017 §4.1): copy-task vocabulary 24 (20 symbols +
4 specials), embeddings 256, bidirectional 2-layer LSTM encoder of 256 units per direction,
2-layer 256-unit LSTM decoder with input feeding and Bahdanau (additive) attention, dropout 0.2,
Adam 1e-4, batch 128. A training step is a teacher-forced forward pass, cross-entropy over the
target tokens, backward pass and Adam step, on a batch whose sentences all have L symbols + EOS
(tokens/s counts the B * (L + 1) target tokens). Decoding is greedy of 128 sentences and beam 10
of 32 sentences at L = 40, each system with its own search code, forced to exactly L + 1 steps
(EOS masked until the last step: the models have random weights).

How it is measured: each system runs in its own process (so one toolkit's allocator, thread pool
or import side effects cannot slow another), all pinned to the same CPU core (the
highest-numbered) with ``--threads`` torch threads (default 1). The parent sends one operation at
a time, round by round, every system in turn (a slow spell of a shared machine then lands on all
of them alike); ``--warmup`` untimed rounds first, then ``--rounds`` timed ones; medians. On CUDA
each operation is timed with CUDA events and synchronised. A peer that cannot be imported is
reported (``unavailable``) and the rest still runs.

Peers are imported as model code only: OpenNMT-py's package ``__init__`` imports every data
transform, and three of them need spaCy, pyahocorasick, rapidfuzz and fastText, which its model
code never uses; those transform modules are replaced by empty ones before the import.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _args import nonnegative_int, positive_int, refusal  # noqa: E402

PROJECT = "project"
PEERS = ("joeynmt", "opennmt")
VOCAB = 24  # the copy task's 20 symbols + pad, bos, eos, unk
FULL = dict(
    lengths=[10, 40, 100],
    batch=128,
    decode_length=40,
    greedy_batch=128,
    beam_batch=32,
    beam=10,
    embedding_dim=256,
    hidden_size=256,
    rounds=5,
    warmup=1,
)
QUICK = dict(
    lengths=[4, 8],
    batch=8,
    decode_length=8,
    greedy_batch=8,
    beam_batch=4,
    beam=3,
    embedding_dim=32,
    hidden_size=32,
    rounds=1,
    warmup=1,
)
#: OpenNMT-py data transforms whose imports (spaCy, pyahocorasick, rapidfuzz, fastText) the model
#: code never needs; replaced by empty modules before ``import onmt``
ONMT_DATA_ONLY_TRANSFORMS = ("terminology", "inlinetags", "fuzzymatch", "clean")

DIFFERENCES = {
    PROJECT: [
        "the reference: Bahdanau score v^T tanh(W_q h + W_k s) with W_k s computed once per "
        "source; the decoder feeds back the raw context c (512) and predicts from softmax(W [h; c] "
        "+ b); bridge tanh(W [every encoder layer's and direction's final state]) with separate "
        "linears for h and c; dropout on each cell's input only",
    ],
    "joeynmt": [
        "attentional layer (Luong-style input feeding): JoeyNMT feeds back, and predicts from, "
        "att = tanh(W_att [h; c] + b) of 256 units; the project feeds back the raw 512-wide "
        "context. So Joey's first decoder layer reads 256 + 256 inputs (the project: 256 + 512), "
        "it has an extra 768 x 256 layer, and its output layer is 256 x V without bias (the "
        "project: 768 x V with bias)",
        "bridge: every decoder layer's h and c start from the same tanh(W s) of the top encoder "
        "layer's final states (512 -> 256); the project maps all layers' final h and c (1024 -> "
        "512) with separate linears",
        "decoder recurrence: nn.LSTM of 2 layers called once per step (seq_len 1); the project "
        "runs two nn.LSTMCell",
    ],
    "opennmt": [
        "sizes: OpenNMT-py's global attention needs memory size == decoder size and its decoder "
        "starts from the encoder's final states concatenated over directions, so the encoder has "
        "128 units per direction (memory 256) where the project has 256 (memory 512); the "
        "decoder is 256 units as in the project",
        "attention 'mlp' (Bahdanau): the key projection W_k s is recomputed at every decoder step "
        "(not cached) and the query projection has a bias; then attn_h = W_out [c; h] + b "
        "(256, no tanh) is fed back and predicted from (Luong-style input feeding): the output "
        "layer is 256 x V",
        "bridge: Linear + ReLU on each encoder layer's final h and c (the 'bridge' option); the "
        "project: tanh of one linear over all layers",
        "dropout 0.2 also on the attentional vector (so on the output layer's input)",
    ],
}


# ------------------------------------------------------------------------------------------------
# The systems (run inside a child process)


def _copy_batch(
    batch: int, length: int, bos: int, eos: int, first: int, seed: int
) -> dict[str, Any]:
    """``batch`` random copy-task sentences of ``length`` symbols + EOS (ids from ``first``)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(first, first + 20, (batch, length + 1), generator=gen)  # (B, L + 1)
    src[:, -1] = eos
    lengths = torch.full((batch,), length + 1, dtype=torch.long)  # (B,)
    tgt_in = torch.cat([torch.full((batch, 1), bos), src[:, :-1]], dim=1)  # (B, L + 1)
    return {"src": src, "lengths": lengths, "tgt": src.clone(), "tgt_in": tgt_in}


class ProjectSystem:
    """lightning_modules.seq2seq.Seq2Seq with Bahdanau attention: the paper_copy model."""

    def __init__(self, cfg: dict[str, Any], device, precision: str = "32") -> None:
        import torch

        from datamodules.vocab import BOS_ID, EOS_ID, FIRST_SYMBOL, PAD_ID
        from lightning_modules.seq2seq import Seq2Seq

        self.ids = dict(bos=BOS_ID, eos=EOS_ID, first=FIRST_SYMBOL, pad=PAD_ID)
        torch.manual_seed(cfg["seed"])
        self.model = Seq2Seq(
            VOCAB,
            VOCAB,
            attention="bahdanau",
            embedding_dim=cfg["embedding_dim"],
            hidden_size=cfg["hidden_size"],
            encoder_layers=2,
            decoder_layers=2,
            dropout=0.2,
            bidirectional=True,
            max_source_len=max(cfg["lengths"] + [cfg["decode_length"]]) + 1,
        ).to(device)
        self.device = device
        self.bf16 = precision == "bf16"
        self.graphs = None
        if precision == "graphed":  # the training step a sweep with trainer.cuda_graphs runs
            from lightning_modules.cuda_graphs import GraphedSteps

            capture = device.type == "cuda"
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4, capturable=capture)
            self.graphs = GraphedSteps(self.model, self.optimizer, PAD_ID, capture=capture)
        else:
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4)

    def _autocast(self):
        import torch

        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def train_step(self, b: dict[str, Any]) -> None:
        import torch.nn.functional as F

        self.model.train()
        if self.graphs is not None:  # a replayed graph on CUDA (the same step eagerly on a CPU)
            self.graphs.step({"src": b["src"], "src_lengths": b["lengths"], "tgt": b["tgt"]})
            return
        with self._autocast():
            logits = self.model(b["src"], b["lengths"], b["tgt_in"])  # (B, T, V)
            loss = F.cross_entropy(
                logits.reshape(-1, VOCAB).float(),
                b["tgt"].reshape(-1),
                ignore_index=self.ids["pad"],
            )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def greedy(self, b: dict[str, Any], steps: int) -> None:
        self.model.eval()
        with self._autocast():
            self.model.greedy_decode(b["src"], b["lengths"], max_len=steps, min_len=steps)

    def beam(self, b: dict[str, Any], steps: int, beam: int) -> None:
        self.model.eval()
        with self._autocast():
            self.model.beam_search(
                b["src"], b["lengths"], beam_size=beam, max_len=steps, min_len=steps
            )

    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


class JoeySystem:
    """JoeyNMT 2.3: ``build_model`` with a recurrent encoder/decoder config, its own greedy and
    beam search (``joeynmt.search``)."""

    def __init__(self, cfg: dict[str, Any], device, precision: str = "32") -> None:
        import logging
        from types import SimpleNamespace

        import torch
        from joeynmt.model import build_model
        from joeynmt.search import beam_search, greedy
        from joeynmt.vocabulary import Vocabulary

        logging.getLogger("joeynmt").setLevel(logging.WARNING)
        specials = SimpleNamespace(
            unk_token="<unk>",
            pad_token="<pad>",
            bos_token="<s>",
            eos_token="</s>",
            sep_token=None,
            lang_tags=[],
            unk_id=0,
            pad_id=1,
            bos_id=2,
            eos_id=3,
            sep_id=None,
        )
        vocab = Vocabulary([f"w{i}" for i in range(VOCAB - 4)], specials)
        assert len(vocab) == VOCAB
        E, H = cfg["embedding_dim"], cfg["hidden_size"]
        model_cfg = {
            "encoder": {
                "type": "recurrent",
                "rnn_type": "lstm",
                "embeddings": {"embedding_dim": E, "dropout": 0.2},
                "hidden_size": H,  # per direction
                "bidirectional": True,
                "dropout": 0.2,
                "num_layers": 2,
            },
            "decoder": {
                "type": "recurrent",
                "rnn_type": "lstm",
                "embeddings": {"embedding_dim": E, "dropout": 0.2},
                "hidden_size": H,
                "dropout": 0.2,
                "hidden_dropout": 0.0,
                "num_layers": 2,
                "input_feeding": True,
                "init_hidden": "bridge",
                "attention": "bahdanau",
            },
        }
        torch.manual_seed(cfg["seed"])
        self.model = build_model(model_cfg, vocab, vocab).to(device)
        self.model.loss_function = ("crossentropy", 0.0)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.ids = dict(bos=2, eos=3, first=4, pad=1)
        self._greedy, self._beam_search = greedy, beam_search

    @staticmethod
    def _masks(b: dict[str, Any]) -> tuple[Any, Any]:
        src_mask = (b["src"] != 1).unsqueeze(1)  # (B, 1, S)
        trg_mask = (b["tgt_in"] != 1).unsqueeze(1)  # (B, 1, T)
        return src_mask, trg_mask

    def train_step(self, b: dict[str, Any]) -> None:
        self.model.train()
        src_mask, trg_mask = self._masks(b)
        batch_loss, *_ = self.model(
            return_type="loss",
            src=b["src"],
            trg=b["tgt"],
            trg_input=b["tgt_in"],
            src_mask=src_mask,
            src_length=b["lengths"],
            trg_mask=trg_mask,
        )
        loss = batch_loss / b["tgt"].numel()  # JoeyNMT's normalisation "tokens"
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def _encode(self, b: dict[str, Any]) -> tuple[Any, Any, Any]:
        src_mask, _ = self._masks(b)
        out, hidden, _, _ = self.model(
            return_type="encode", src=b["src"], src_length=b["lengths"], src_mask=src_mask
        )
        return out, hidden, src_mask

    def greedy(self, b: dict[str, Any], steps: int) -> None:
        import torch

        self.model.eval()
        with torch.no_grad():
            out, hidden, src_mask = self._encode(b)
            self._greedy(src_mask, steps, self.model, out, hidden, min_output_length=steps)

    def beam(self, b: dict[str, Any], steps: int, beam: int) -> None:
        import torch

        self.model.eval()
        with torch.no_grad():
            out, hidden, src_mask = self._encode(b)
            self._beam_search(
                self.model,
                beam,
                out,
                hidden,
                src_mask,
                steps,
                alpha=1.0,
                n_best=1,
                min_output_length=steps,
            )

    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def import_onmt() -> Any:
    """``import onmt`` with the data-only transforms stubbed (module docstring)."""
    import types

    for name in ONMT_DATA_ONLY_TRANSFORMS:
        full = f"onmt.transforms.{name}"
        sys.modules.setdefault(full, types.ModuleType(full))
    import onmt

    return onmt


class OnmtSystem:
    """OpenNMT-py 3.5: ``RNNEncoder`` (brnn, bridge) + ``InputFeedRNNDecoder`` (global attention
    ``mlp``) in an ``NMTModel`` with a linear generator; decoding with its ``GreedySearch`` and
    ``BeamSearch`` strategies, in the loop of ``Translator._translate_batch_with_strategy``."""

    def __init__(self, cfg: dict[str, Any], device, precision: str = "32") -> None:
        import torch

        import_onmt()
        from onmt.decoders.decoder import InputFeedRNNDecoder
        from onmt.encoders.rnn_encoder import RNNEncoder
        from onmt.models.model import NMTModel
        from onmt.modules import Embeddings
        from onmt.translate.beam_search import BeamSearch, GNMTGlobalScorer
        from onmt.translate.greedy_search import GreedySearch

        E, H = cfg["embedding_dim"], cfg["hidden_size"]
        self.ids = dict(pad=1, bos=2, eos=3, first=4, unk=0)
        torch.manual_seed(cfg["seed"])
        src_emb = Embeddings(E, VOCAB, self.ids["pad"], dropout=0.2)
        tgt_emb = Embeddings(E, VOCAB, self.ids["pad"], dropout=0.2)
        # enc_hid_size is the total over both directions; it must equal the decoder's (module doc)
        encoder = RNNEncoder("LSTM", True, 2, H, 0.2, src_emb, use_bridge=True)
        decoder = InputFeedRNNDecoder(
            "LSTM",
            True,
            2,
            H,
            attn_type="mlp",
            attn_func="softmax",
            coverage_attn=False,
            context_gate=None,
            copy_attn=False,
            dropout=0.2,
            embeddings=tgt_emb,
            reuse_copy_attn=False,
            copy_attn_type="general",
        )
        self.model = NMTModel(encoder, decoder).to(device)
        self.model.generator = torch.nn.Linear(H, VOCAB).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.device = device
        self._strategies = (GreedySearch, BeamSearch, GNMTGlobalScorer)

    def train_step(self, b: dict[str, Any]) -> None:
        import torch
        import torch.nn.functional as F

        self.model.train()
        bos = b["tgt_in"][:, :1]
        tgt = torch.cat([bos, b["tgt"]], dim=1).unsqueeze(
            -1
        )  # (B, T + 1, 1): NMTModel drops the last
        dec_out, _ = self.model(b["src"].unsqueeze(-1), tgt, b["lengths"])  # (B, T, H)
        logits = self.model.generator(dec_out)  # (B, T, V)
        loss = F.cross_entropy(
            logits.reshape(-1, VOCAB), b["tgt"].reshape(-1), ignore_index=self.ids["pad"]
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def _decode(self, b: dict[str, Any], strategy: Any) -> None:
        """Translator._translate_batch_with_strategy's loop (no copy attention, no gold score)."""
        import torch
        import torch.nn.functional as F

        self.model.eval()
        with torch.no_grad():
            src = b["src"].unsqueeze(-1)  # (B, S, 1)
            enc_out, enc_final_hs, src_len = self.model.encoder(src, b["lengths"])
            self.model.decoder.init_state(src, enc_out, enc_final_hs)
            fn_map_state, enc_out, _ = strategy.initialize(enc_out, src_len, None)
            if fn_map_state is not None:
                self.model.decoder.map_state(fn_map_state)
            for step in range(strategy.max_length):
                decoder_in = strategy.current_predictions.view(-1, 1, 1)
                dec_out, _ = self.model.decoder(
                    decoder_in, enc_out, src_len=strategy.src_len, step=step
                )
                log_probs = F.log_softmax(self.model.generator(dec_out.squeeze(1)), dim=-1)
                strategy.advance(log_probs, None)
                any_finished = any(any(row) for row in strategy.is_finished_list)
                if any_finished:
                    strategy.update_finished()
                    if strategy.done:
                        break
                select = strategy.select_indices
                if any_finished:
                    enc_out = enc_out[select]
                if strategy.parallel_paths > 1 or any_finished:
                    self.model.decoder.map_state(lambda state, dim: state[select])

    def _common(self, batch: int, steps: int) -> dict[str, Any]:
        ids = self.ids
        return dict(
            pad=ids["pad"],
            bos=ids["bos"],
            eos=ids["eos"],
            unk=ids["unk"],
            start=ids["bos"],
            n_best=1,
            batch_size=batch,
            min_length=steps,
            max_length=steps,
            block_ngram_repeat=0,
            exclusion_tokens=set(),
            return_attention=False,
            ban_unk_token=False,
        )

    def greedy(self, b: dict[str, Any], steps: int) -> None:
        greedy_cls, _, scorer_cls = self._strategies
        scorer = scorer_cls(alpha=0.0, beta=0.0, length_penalty="none", coverage_penalty="none")
        strategy = greedy_cls(
            global_scorer=scorer,
            sampling_temp=0.0,
            keep_topk=1,
            keep_topp=0.0,
            beam_size=1,
            **self._common(b["src"].shape[0], steps),
        )
        self._decode(b, strategy)

    def beam(self, b: dict[str, Any], steps: int, beam: int) -> None:
        _, beam_cls, scorer_cls = self._strategies
        scorer = scorer_cls(alpha=1.0, beta=0.0, length_penalty="avg", coverage_penalty="none")
        strategy = beam_cls(
            beam,
            global_scorer=scorer,
            stepwise_penalty=False,
            ratio=0.0,
            **self._common(b["src"].shape[0], steps),
        )
        self._decode(b, strategy)

    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


SYSTEMS = {PROJECT: ProjectSystem, "joeynmt": JoeySystem, "opennmt": OnmtSystem}


def parse_system(name: str) -> tuple[str, str | None, str]:
    """``project@DIR:bf16`` -> ("project", "DIR", "bf16"): the system, the checkout to import the
    project from (None: this one), the variant ("32" unless ``:bf16``, or ``:graphed``: the
    project's training step replayed from CUDA graphs, as ``trainer.cuda_graphs`` trains)."""
    precision = "32"
    for variant in ("bf16", "graphed"):
        if name.endswith(f":{variant}"):
            name, precision = name[: -len(variant) - 1], variant
    base, _, root = name.partition("@")
    return base, root or None, precision


def child_main(name: str) -> None:
    """One system's process: build it (report its size, or why it could not be built), then time
    each operation the parent sends (JSON lines on stdin, answers on stdout)."""
    import logging
    import warnings

    base, root, precision = parse_system(name)
    if root:  # another checkout of the project (e.g. before a change), timed side by side
        sys.path.insert(0, str(Path(root).resolve()))
    warnings.filterwarnings("ignore")  # the peers' deprecation warnings
    logging.disable(logging.INFO)  # JoeyNMT's "Building an encoder-decoder model..."
    import torch
    from _flops import gemm_rate, step_flops

    cfg = json.loads(sys.stdin.readline())
    torch.set_num_threads(cfg["threads"])
    device = torch.device(cfg["device"])
    out = sys.stdout
    try:
        system = SYSTEMS[base](cfg, device, precision)
    except Exception as exc:  # a peer that is not installed, or fails to build
        reason = f"{type(exc).__name__}: {exc}".strip()
        out.write(json.dumps({"ready": False, "reason": reason}) + "\n")
        out.flush()
        return
    batches: dict[tuple[str, int], dict[str, Any]] = {}

    def batch(kind: str, size: int, length: int) -> dict[str, Any]:
        key = (kind, length)
        if key not in batches:
            ids = system.ids
            b = _copy_batch(size, length, ids["bos"], ids["eos"], ids["first"], cfg["seed"])
            batches[key] = {k: v.to(device) for k, v in b.items()}
        return batches[key]

    hello = {"ready": True, "params": system.parameters()}
    if base == PROJECT:  # which checkout's model this process runs (project@DIR: DIR's)
        hello["source"] = str(Path(sys.modules[type(system.model).__module__].__file__).parents[1])
    out.write(json.dumps(hello) + "\n")
    out.flush()
    cuda = device.type == "cuda"
    for line in sys.stdin:
        op = json.loads(line)
        if op["op"] in ("flops", "gemm"):  # not timed: the step's arithmetic, the product rate
            try:
                if op["op"] == "flops":
                    b = batch("train", cfg["batch"], op["L"])
                    answer = step_flops(system.model, lambda: system.train_step(b))
                else:
                    answer = gemm_rate([tuple(s) for s in op["shapes"]], device, op["seconds"])
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            out.write(json.dumps(answer) + "\n")
            out.flush()
            continue
        if op["op"] == "train":
            fn = lambda: system.train_step(batch("train", cfg["batch"], op["L"]))
        elif op["op"] == "greedy":
            L = cfg["decode_length"]
            fn = lambda: system.greedy(batch("greedy", cfg["greedy_batch"], L), L + 1)
        elif op["op"] == "beam":
            L = cfg["decode_length"]
            fn = lambda: system.beam(batch("beam", cfg["beam_batch"], L), L + 1, cfg["beam"])
        else:
            break
        try:
            if cuda:
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                torch.cuda.synchronize(device)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize(device)
                seconds = start.elapsed_time(end) / 1000
            else:
                t0, c0 = time.perf_counter(), time.process_time()
                fn()
                seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            answer = {"seconds": seconds} | ({} if cuda else {"cpu_seconds": cpu})
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


# ------------------------------------------------------------------------------------------------
# The parent: start the children, interleave, summarise


def cpu_bf16() -> dict[str, bool]:
    """Which reduced-precision instructions the CPU advertises (Linux /proc/cpuinfo flags)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    return {
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "amx_bf16": "amx_bf16" in flags,
    }


def precision_refusal(name: str, device: Any, machine: dict[str, Any]) -> str | None:
    """Why ``name`` cannot run here, or None: a ``:bf16`` variant on a CPU that does not compute
    bf16 in hardware (no AVX512_BF16 or AMX-BF16). There oneDNN builds no bf16 LSTM at all
    ("could not create a primitive descriptor"), and what does run in bf16 is emulated and slower
    than fp32, so the variant would time nothing worth comparing."""
    if parse_system(name)[2] != "bf16" or device.type != "cpu":
        return None
    if machine.get("avx512_bf16") or machine.get("amx_bf16"):
        return None
    return (
        f"{name} needs native bf16 and this CPU ({machine.get('cpu', '?')}) has neither "
        "AVX512_BF16 nor AMX-BF16: oneDNN has no bf16 LSTM here and bf16 products are emulated; "
        "run the bf16 variant on a CPU with one of them (e.g. AMD Zen 4, Intel Sapphire Rapids) "
        "or with --device cuda"
    )


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


class Child:
    """A running system process and its pipe."""

    def __init__(self, name: str, cfg: dict[str, Any], cpus: list[int]) -> None:
        env = {
            **os.environ,
            "OMP_NUM_THREADS": str(cfg["threads"]),
            "MKL_NUM_THREADS": str(cfg["threads"]),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", absolute(name)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(ROOT),
            preexec_fn=(lambda: os.sched_setaffinity(0, set(cpus))) if cpus else None,
        )
        self.ask(cfg)

    def ask(self, message: dict[str, Any]) -> None:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)
        return {"ready": False, "reason": f"the process exited (code {self.proc.wait()})"}

    def run(self, op: dict[str, Any]) -> dict[str, Any]:
        self.ask(op)
        return self.answer()

    def close(self) -> None:
        try:
            self.ask({"op": "quit"})
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def operations(cfg: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    ops = [(f"train_L{L}", {"op": "train", "L": L}) for L in cfg["lengths"]]
    return ops + [("greedy", {"op": "greedy"}), ("beam", {"op": "beam"})]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start every system, time the operations interleaved; returns the JSON result."""
    import torch
    from _machine import machine_info

    from sweeps.timing.devices import highest_cpus, resolve_device

    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        raise refusal(f"--device: {exc}") from None
    sizes = QUICK if args.quick else FULL
    cfg = {
        **sizes,
        "rounds": args.rounds or sizes["rounds"],
        "warmup": sizes["warmup"] if args.warmup is None else args.warmup,
        "device": str(device),
        "threads": args.threads,
        "seed": args.seed,
    }
    if args.lengths:
        cfg["lengths"] = args.lengths
    cpus = highest_cpus(args.threads) if device.type == "cpu" else []
    torch.set_num_threads(args.threads)
    machine = {**machine_info(device), "torch_threads": args.threads, **cpu_bf16()}
    if cpus:
        machine["pinned_cpus"] = cpus
    log = lambda text: print(text, file=sys.stderr, flush=True)
    log(
        f"machine: {machine['cpu']} | {machine['cores']} cores | torch {machine['torch']} | "
        f"device {machine['device_name']} | {args.threads} thread(s)"
        + (f" pinned to CPU {','.join(map(str, cpus))}" if cpus else "")
        + f" | avx512_bf16 {machine.get('avx512_bf16')} amx_bf16 {machine.get('amx_bf16')}"
    )
    load_start = loadavg()
    log(f"loadavg at start: {load_start}")
    children: dict[str, Child] = {}
    unavailable: dict[str, str] = {}
    results: dict[str, dict[str, Any]] = {}
    try:
        for name in args.systems:
            reason = precision_refusal(name, device, machine)
            if reason:
                unavailable[name] = reason
                results[name] = {"available": False, "reason": reason}
                log(f"{name}: NOT RUN ({reason})")
                continue
            child = Child(name, cfg, cpus)
            hello = child.answer()
            if not hello.get("ready"):
                reason = hello.get("reason", "unknown")
                unavailable[name] = reason
                results[name] = {"available": False, "reason": reason}
                log(
                    f"{name}: NOT AVAILABLE ({reason}); install the peers with "
                    "`pip install --no-deps -r requirements/peers.txt`"
                )
                child.close()
                continue
            children[name] = child
            results[name] = {"available": True, "params": hello["params"]}
            if "source" in hello:
                results[name]["source"] = hello["source"]
            log(
                f"{name}: {hello['params']:,} parameters"
                + (f" (model code from {hello['source']})" if "source" in hello else "")
            )
        flops = {
            name: {L: child.run({"op": "flops", "L": L}) for L in cfg["lengths"]}
            for name, child in children.items()
        }
        times: dict[str, dict[str, list[float]]] = {name: {} for name in children}
        cpu_times: dict[str, dict[str, list[float]]] = {name: {} for name in children}
        errors: dict[str, dict[str, str]] = {name: {} for name in children}
        ops = operations(cfg)
        for round_ in range(cfg["warmup"] + cfg["rounds"]):
            timed = round_ >= cfg["warmup"]
            for key, op in ops:
                for name, child in children.items():
                    if key in errors[name]:
                        continue
                    reply = child.run(op)
                    if "error" in reply:
                        errors[name][key] = reply["error"]
                        log(f"{name} {key}: ERROR {reply['error']}")
                    elif timed:
                        times[name].setdefault(key, []).append(reply["seconds"])
                        if "cpu_seconds" in reply:
                            cpu_times[name].setdefault(key, []).append(reply["cpu_seconds"])
            log(
                f"round {round_ + 1}/{cfg['warmup'] + cfg['rounds']}"
                + ("" if timed else " (warm-up)")
                + f" done, loadavg {loadavg()}"
            )
        if children:  # the machine's product rate, on the pinned core(s), after the rounds
            shapes = gemm_shapes(cfg)
            rate = next(iter(children.values())).run(
                {"op": "gemm", "shapes": shapes, "seconds": 0.05 if args.quick else 0.3}
            )
            if "error" in rate:
                log(f"matrix-product rate: ERROR {rate['error']}")
            else:
                machine["gemm_gflops"] = round(rate["best"] / 1e9, 2)
                machine["gemm_gflops_per_shape"] = rate["per_shape"]
    finally:
        for child in children.values():
            child.close()
    gemm = machine.get("gemm_gflops")
    for name in children:
        r = results[name]
        r["train"] = {}
        for L in cfg["lengths"]:
            t, c = times[name].get(f"train_L{L}"), cpu_times[name].get(f"train_L{L}")
            if t:
                med = statistics.median(t)
                r["train"][str(L)] = {
                    "s_per_step": round(med, 5),
                    "tokens_per_s": round(cfg["batch"] * (L + 1) / med, 1),
                    "times": [round(x, 5) for x in t],
                }
                counted = flops[name].get(L, {})
                if "total" in counted:
                    gflop = counted["total"] / 1e9
                    r["train"][str(L)] |= {
                        "gflop_per_step": round(gflop, 3),
                        "gflop_lstm_added": round(counted["lstm_added"] / 1e9, 3),
                        "gflops": round(gflop / med, 2),
                    }
                    if gemm and parse_system(name)[2] == "32":  # an fp32 rate: fp32 floors
                        r["train"][str(L)]["floor_s_per_step"] = round(gflop / gemm, 5)
            if c:
                r["train"][str(L)]["cpu_s_per_step"] = round(statistics.median(c), 5)
        for mode in ("greedy", "beam"):
            t, c = times[name].get(mode), cpu_times[name].get(mode)
            if t:
                r[f"{mode}_s"] = round(statistics.median(t), 5)
                r[f"{mode}_times"] = [round(x, 5) for x in t]
            if c:
                r[f"{mode}_cpu_s"] = round(statistics.median(c), 5)
        if errors[name]:
            r["errors"] = errors[name]
    ratios = ratio_table(results, cfg["lengths"])
    ratios_cpu = ratio_table(results, cfg["lengths"], cpu=True) if device.type == "cpu" else {}
    result = {
        "benchmark": "peers",
        "machine": machine,
        "settings": {
            k: cfg[k]
            for k in (
                "lengths",
                "batch",
                "decode_length",
                "greedy_batch",
                "beam_batch",
                "beam",
                "embedding_dim",
                "hidden_size",
                "rounds",
                "warmup",
                "threads",
                "seed",
            )
        }
        | {"quick": bool(args.quick), "decode_steps": cfg["decode_length"] + 1},
        "systems": results,
        "ratios": ratios,
        "ratios_cpu_time": ratios_cpu,
        "ceilings": ceilings(results, cfg["lengths"]),
        "unavailable": unavailable,
        "differences": {
            name: DIFFERENCES[parse_system(name)[0]]
            for name in args.systems
            if parse_system(name)[0] != PROJECT
        },
        "loadavg": {"start": load_start, "end": loadavg()},
    }
    log(summary(result))
    return result


def gemm_shapes(cfg: dict[str, Any]) -> list[list[int]]:
    """The (M, K, N) products a training step of these sizes is made of, near enough: a batch's
    rows or all its tokens' rows (M), times a gate matrix's input width (K), 4H gates (N)."""
    B, E, H = cfg["batch"], cfg["embedding_dim"], cfg["hidden_size"]
    L = 40 if 40 in cfg["lengths"] else max(cfg["lengths"])
    return [[m, k, 4 * H] for m in (B, B * (L + 1)) for k in (H, E + H, E + 2 * H)]


def ceilings(results: dict[str, dict[str, Any]], lengths: Sequence[int]) -> dict[str, Any]:
    """Per peer and length, the highest ratio peer / project this precision allows here: the
    peer's measured seconds over the project's floor (its counted FLOPs at the machine's best
    matrix-product rate, element-wise work taken as free)."""
    project = results.get(PROJECT, {})
    out: dict[str, Any] = {}
    for name, r in results.items():
        if name == PROJECT or parse_system(name)[0] == PROJECT or not r.get("available"):
            continue
        cells = {}
        for L in lengths:
            floor = project.get("train", {}).get(str(L), {}).get("floor_s_per_step")
            seconds = r.get("train", {}).get(str(L), {}).get("s_per_step")
            if floor and seconds:
                cells[f"train_L{L}"] = round(seconds / floor, 3)
        if cells:
            out[f"{name} / project floor"] = cells
    return out


def _seconds(r: dict[str, Any], key: str, cpu: bool = False) -> float | None:
    if not r.get("available"):
        return None
    if key.startswith("train_L"):
        cell = r.get("train", {}).get(key[len("train_L") :])
        return cell.get("cpu_s_per_step" if cpu else "s_per_step") if cell else None
    return r.get(f"{key}_cpu_s" if cpu else f"{key}_s")


def ratio_table(
    results: dict[str, dict[str, Any]], lengths: Sequence[int], cpu: bool = False
) -> dict[str, Any]:
    """Seconds of every other system / seconds of the project (> 1: the project is faster), under
    the other system's name; and each peer against each project variant (``project:bf16``,
    ``project@DIR``) under ``peer/variant``. ``cpu``: from the processes' CPU time instead of the
    wall clock (on a shared machine, what other processes take from the core is not counted)."""
    keys = [f"train_L{L}" for L in lengths] + ["greedy", "beam"]
    available = [n for n in results if results[n].get("available")]
    variants = [n for n in available if parse_system(n)[0] == PROJECT and n != PROJECT]
    peers = [n for n in available if parse_system(n)[0] != PROJECT]

    def cells(num: str, den: str) -> dict[str, float]:
        out = {}
        for key in keys:
            a, b = _seconds(results[num], key, cpu), _seconds(results[den], key, cpu)
            if a and b:
                out[key] = round(a / b, 3)
        return out

    table: dict[str, Any] = {}
    if PROJECT in available:
        for other in peers + variants:
            table[other] = cells(other, PROJECT)
    for variant in variants:
        for peer in peers:
            table[f"{peer}/{variant}"] = cells(peer, variant)
    return table


def summary(result: dict[str, Any]) -> str:
    """The medians and ratios as text (stderr)."""
    lengths = result["settings"]["lengths"]
    s = result["settings"]
    head = (
        ["system", "params"]
        + [f"L={L} s/step" for L in lengths]
        + [f"L={L} tok/s" for L in lengths]
        + [f"greedy {s['greedy_batch']} s", f"beam {s['beam']} x {s['beam_batch']} s"]
    )
    rows = [head]
    for name, r in result["systems"].items():
        if not r.get("available"):
            rows.append([name, "not available: " + r["reason"][:60]])
            continue
        row = [name, f"{r['params'] / 1e6:.2f} M"]
        row += [
            f"{r['train'].get(str(L), {}).get('s_per_step', float('nan')):.4f}" for L in lengths
        ]
        row += [
            f"{r['train'].get(str(L), {}).get('tokens_per_s', float('nan')):,.0f}" for L in lengths
        ]
        row += [f"{r.get('greedy_s', float('nan')):.4f}", f"{r.get('beam_s', float('nan')):.4f}"]
        rows.append(row)
    lines = ["", "medians over the timed rounds:"]
    widths = [max(len(str(row[i])) for row in rows if i < len(row)) for i in range(len(head))]
    for row in rows:
        lines.append("  ".join(str(c).rjust(widths[i]) for i, c in enumerate(row)))
    for key, what in (("ratios", "wall clock"), ("ratios_cpu_time", "CPU time")):
        if result[key]:
            lines += [
                "",
                f"other system's / project's seconds, {what} (> 1: the project is faster):",
            ]
            for label, cells in result[key].items():
                lines.append(f"  {label}: " + ", ".join(f"{k} {v:.3f}" for k, v in cells.items()))
    gemm = result["machine"].get("gemm_gflops")
    lines += [
        "",
        "arithmetic of a training step (matrix products; element-wise work not counted)"
        + (f", against this core's best fp32 product rate of {gemm:.1f} GFLOP/s:" if gemm else ":"),
    ]
    for name, r in result["systems"].items():
        cells = [
            f"L={L} {c['gflop_per_step']:.3g} GFLOP at {c['gflops']:.3g} GFLOP/s"
            + (f" (floor {c['floor_s_per_step']:.3f} s)" if "floor_s_per_step" in c else "")
            for L, c in r.get("train", {}).items()
            if "gflop_per_step" in c
        ]
        if cells:
            lines.append(f"  {name}: " + "; ".join(cells))
    for label, cells in result["ceilings"].items():
        lines.append(
            f"  highest ratio at this precision, {label}: "
            + ", ".join(f"{k} {v:.2f}" for k, v in cells.items())
        )
    for name, diffs in result["differences"].items():
        lines += ["", f"architectural differences, {name} vs the project:"]
        lines += [f"  - {d}" for d in diffs]
    if result["unavailable"]:
        lines += [
            "",
            "could not import / build: "
            + "; ".join(f"{k} ({v})" for k, v in result["unavailable"].items()),
        ]
    lines.append(f"loadavg start {result['loadavg']['start']}, end {result['loadavg']['end']}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--systems",
        nargs="+",
        default=[PROJECT, *PEERS],
        help="project, project:bf16 (bf16 autocast), project:graphed (its step replayed from CUDA "
        "graphs, as trainer.cuda_graphs trains), project@DIR (the project from another "
        "checkout, e.g. before a change), joeynmt, opennmt (default: project joeynmt opennmt)",
    )
    p.add_argument("--quick", action="store_true", help="tiny model, 1 timed round: plumbing only")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument(
        "--lengths",
        nargs="+",
        type=positive_int,
        help="training lengths L (default 10 40 100; 4 8 with --quick)",
    )
    p.add_argument("--rounds", type=positive_int, help="timed rounds (default 5; 1 with --quick)")
    p.add_argument("--warmup", type=nonnegative_int, help="untimed rounds first (default 1)")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads per system")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in args.systems:
        base, root, _ = parse_system(name)
        if base not in SYSTEMS or (root and base != PROJECT):
            p.error(
                f"argument --systems: unknown system {name!r}; use project, project:bf16, "
                "project:graphed, project@DIR (the project imported from another checkout; "
                "project@DIR:bf16 and project@DIR:graphed too), joeynmt or opennmt"
            )
        problem = root and checkout_problem(Path(root))
        if problem:
            p.error(f"argument --systems: {name!r}: {problem}")
    return args


#: files every checkout of the project has that the ``project`` system imports
CHECKOUT_FILES = ("lightning_modules/seq2seq.py", "datamodules/vocab.py")


def checkout_problem(root: Path) -> str | None:
    """Why ``root`` (``project@DIR``) is not a checkout of this project to import the model from,
    or None."""
    if not root.is_dir():
        return f"{root} is not a folder" + ("" if root.exists() else " (no such path)")
    missing = [f for f in CHECKOUT_FILES if not (root / f).is_file()]
    if missing:
        return f"{root} has no {' or '.join(missing)}: not a checkout of this project"
    return None


def absolute(name: str) -> str:
    """``project@DIR[:variant]`` with DIR made absolute (the child processes run in the
    repository's root, not in the folder the command was given in)."""
    base, root, precision = parse_system(name)
    if not root:
        return name
    return f"{base}@{Path(root).resolve()}" + ("" if precision == "32" else f":{precision}")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.child:
        child_main(args.child)
        return {}
    result = run(args)
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
