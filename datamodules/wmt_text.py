"""Text helpers for Moses-tokenized WMT data: unescaping, detokenizers, and both BLEUs.

The default detokenizer is the standard one: join the aggressive-hyphen marks (`` @-@ `` ``@,@``
``@.@``), then run Moses' ``detokenizer.perl`` through its Python port, ``sacremoses`` (the
``data`` and ``sweep`` extras), and score with sacreBLEU's defaults. ``val/sacrebleu`` so
approximates a published score's protocol closely but is not it: its references are the data
files' tokenized text detokenized (for the WMT'17 preprocessed release, tokenized and truecased
lines: ``die Regierung`` where WMT's raw reference has ``Die Regierung``), not WMT's raw
references (docs/running.md). :func:`moses_detokenize` is a small hand-written approximation of the
same rules, kept as the opt-in ``"builtin"`` for installs without sacremoses; its scores are
further off (it writes ``hier…`` for Moses' ``hier …``, ``States 'gas`` for ``States' gas``,
``¢ 1`` for ``¢1``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence

from .extras import import_extra

# Moses tokenizer.perl escapes; one regex pass, so "&amp;quot;" correctly becomes "&quot;"
_ESCAPES = {
    "&amp;": "&",
    "&#124;": "|",
    "&bar;": "|",
    "&lt;": "<",
    "&gt;": ">",
    "&bra;": "[",
    "&ket;": "]",
    "&quot;": '"',
    "&apos;": "'",
    "&#91;": "[",
    "&#93;": "]",
}
_ESCAPE_RE = re.compile("|".join(re.escape(k) for k in _ESCAPES))

_OPENERS = re.compile(r"^[(\[{¿¡$£€¥₹₽₺]+$")
_CLOSERS = re.compile(r"^[,.?!:;%)\]}…]+$")
_JOINERS = {"@-@": "-", "@/@": "/", "@,@": ",", "@.@": ".", "@:@": ":"}
_STRAIGHT_QUOTES = {'"', "'", "`", "``", "''", "«", "»"}
_ALPHANUM_END = re.compile(r"\w$")
_CLITIC = re.compile(r"^'\w")  # 's 're 'll 't (Moses splits don't -> don 't)
_AGGRESSIVE_MARK = re.compile(r" @([-,./:])@ ")  # " @-@ " -> "-"; sacremoses joins only @-@


def unescape(text: str) -> str:
    """Undo Moses XML escapes (``&apos;`` ``&quot;`` ``&amp;`` ``&lt;`` ``&gt;`` ``&#124;`` ...)."""
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], text)


def join_aggressive_marks(text: str) -> str:
    """Undo aggressive splits: ``state @-@ of`` -> ``state-of``, ``1 @,@ 000`` -> ``1,000``."""
    return _AGGRESSIVE_MARK.sub(r"\1", f" {' '.join(text.split())} ").strip()


def moses_detokenize(text: str, lang: str = "en") -> str:
    """Approximate Moses detokenization (the opt-in ``"builtin"``; not byte-compatible).

    Args:
        text: space-separated tokens, possibly with Moses escapes.
        lang: target language code; ``en`` enables clitic joining, ``de`` reads ``“ ‘`` as
            closing quotes (German „...“), other languages read them as opening.
    Returns:
        the detokenized sentence.
    """
    tokens = unescape(text).split()
    out: list[str] = []
    glue = False  # True: the next token attaches to the previous one without a space
    quotes: dict[str, int] = {}
    always_open = {"„", "‚"} | (set() if lang == "de" else {"“", "‘"})
    always_close = {"”", "’"} | ({"“", "‘"} if lang == "de" else set())
    for i, tok in enumerate(tokens):
        if tok in _JOINERS:
            out.append(_JOINERS[tok])
            glue = True
            continue
        if _OPENERS.match(tok) or tok in always_open:
            attach_left, glue_next = False, True
        elif _CLOSERS.match(tok) or tok in always_close:
            attach_left, glue_next = True, False
        elif lang == "en" and i > 0 and _CLITIC.match(tok) and _ALPHANUM_END.search(tokens[i - 1]):
            attach_left, glue_next = True, False
        elif tok in _STRAIGHT_QUOTES:
            kind = '"' if tok in ('"', "``", "''") else tok
            opening = quotes.get(kind, 0) % 2 == 0
            quotes[kind] = quotes.get(kind, 0) + 1
            attach_left, glue_next = (False, True) if opening else (True, False)
        else:
            attach_left, glue_next = False, False
        if out and not glue and not attach_left:
            out.append(" ")
        out.append(tok)
        glue = glue_next
    return "".join(out)


def _unchanged(text: str) -> str:
    return text


class MosesPostprocess:
    """The standard Moses post-processing, as a picklable ``str -> str`` callable:
    :func:`join_aggressive_marks`, then ``sacremoses.MosesDetokenizer(lang)``.

    Pickles as its ``lang`` alone and is rebuilt on loading (in a process ``ddp_spawn`` starts),
    so a process without sacremoses gets the same clear ImportError.
    """

    def __init__(self, lang: str = "en") -> None:
        self.lang = lang
        self._md = import_extra(
            "sacremoses",
            "WMT detokenization for val/sacrebleu uses the Moses detokenizer from sacremoses",
            "detokenizer='builtin' runs without it, but its sacreBLEU is further from a "
            "published score's protocol",
        ).MosesDetokenizer(lang=lang)

    def __call__(self, text: str) -> str:
        return self._md.detokenize(join_aggressive_marks(text).split())

    def __reduce__(self) -> tuple:
        return MosesPostprocess, (self.lang,)

    def __repr__(self) -> str:
        return f"MosesPostprocess(lang={self.lang!r})"


def make_detokenizer(kind: str = "sacremoses", lang: str = "en") -> Callable[[str], str]:
    """``str -> str`` detokenizer for the target language ``lang`` (de, cs, fi, tr, en).

    ``sacremoses`` (the standard Moses post-processing, :class:`MosesPostprocess`), ``builtin``
    (:func:`moses_detokenize`, approximate) or ``none``. ``sacremoses`` raises ImportError at once,
    naming the extra, when it is not installed. Each one pickles (``ddp_spawn`` sends the
    datamodule holding it to the new processes).
    """
    if kind == "builtin":
        return functools.partial(moses_detokenize, lang=lang)
    if kind == "none":
        return _unchanged
    if kind == "sacremoses":
        return MosesPostprocess(lang)
    raise ValueError(f"unknown detokenizer {kind!r}; use 'sacremoses', 'builtin' or 'none'")


def bleu_scores(
    hyps: Sequence[str],
    refs: Sequence[str],
    detokenize: Callable[[str], str] | None = None,
    lang: str = "en",
    tokenized: bool = True,
) -> dict:
    """Corpus BLEU two ways, from tokenized hypotheses and tokenized references.

    ``bleu``: sacrebleu with ``tokenize="none"`` on the tokenized text (what ``multi-bleu.perl``
    reports on Moses-tokenized data); on text that is not tokenized (``tokenized`` False: words
    would keep their punctuation) sacrebleu's ``13a`` tokenization, so it equals ``sacrebleu``
    there. ``sacrebleu``: detokenize both sides, then sacrebleu's
    default ``13a`` tokenization; ``signature`` is its reproducibility signature. Detokenized
    references stand in for the raw reference files, so report the result as an approximation.
    ``detokenize`` defaults to ``make_detokenizer("sacremoses", lang)``.

    Returns:
        dict(bleu=float, sacrebleu=float, signature=str, bleu_signature=str)
    """
    from sacrebleu.metrics import BLEU

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    detok = detokenize or make_detokenizer("sacremoses", lang)
    tok_metric = BLEU(tokenize="none" if tokenized else "13a")
    tok = tok_metric.corpus_score(list(hyps), [list(refs)])
    sb_metric = BLEU()
    sb = sb_metric.corpus_score([detok(h) for h in hyps], [[detok(r) for r in refs]])
    return dict(
        bleu=tok.score,
        sacrebleu=sb.score,
        signature=str(sb_metric.get_signature()),
        bleu_signature=str(tok_metric.get_signature()),
    )
