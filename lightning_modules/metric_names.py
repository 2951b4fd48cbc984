"""The metric names ``Seq2SeqModule`` logs, defined once. Plain data, no torch: the sweep spec
checks a study's ``metric`` against them and the results table takes its columns from them."""

from __future__ import annotations

TRAIN_LOSS = "train/loss"
#: the §3.1 distillation term before its weight (logged only by a student with distill_weight > 0)
TRAIN_DISTILL = "train/distill"
VAL_LOSS = "val/loss"
VAL_TOKEN_ACC = "val/token_acc"
VAL_BLEU = "val/bleu"
VAL_SACREBLEU = "val/sacrebleu"
VAL_DECODE_SECONDS = "val/decode_seconds"
TEST_LOSS = "test/loss"
TEST_TOKEN_ACC = "test/token_acc"
TEST_BLEU = "test/bleu"
TEST_SACREBLEU = "test/sacrebleu"
TEST_DECODE_SECONDS = "test/decode_seconds"
#: not logged by the module: the sweep's decode-timing stage measures it alone after training
#: (and a multi-objective study's decode probe before); a results.csv column and an objective
DECODE_SECONDS = "decode_seconds"

METRICS: dict[str, dict[str, str]] = {
    "train": {"loss": TRAIN_LOSS},
    "val": {
        "loss": VAL_LOSS,
        "token_acc": VAL_TOKEN_ACC,
        "bleu": VAL_BLEU,
        "sacrebleu": VAL_SACREBLEU,
        "decode_seconds": VAL_DECODE_SECONDS,
    },
    "test": {
        "loss": TEST_LOSS,
        "token_acc": TEST_TOKEN_ACC,
        "bleu": TEST_BLEU,
        "sacrebleu": TEST_SACREBLEU,
        "decode_seconds": TEST_DECODE_SECONDS,
    },
}


#: what a training run logs (train and val stages): the metrics a study may select or stop on
FIT_METRICS: tuple[str, ...] = (*METRICS["train"].values(), *METRICS["val"].values())
