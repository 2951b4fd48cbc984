"""Attention-variant seq2seq models as Lightning modules. Needs only torch and lightning."""
from .attention import ATTENTION_REGISTRY, build_attention
from .module import Seq2SeqModule
from .seq2seq import PRESETS, Seq2Seq

__all__ = ["ATTENTION_REGISTRY", "build_attention", "PRESETS", "Seq2Seq", "Seq2SeqModule"]
