"""Text helpers for Moses-tokenized WMT data: unescaping, a small detokenizer, and both BLEUs.

The detokenizer follows the main rules of Moses' ``detokenizer.perl`` (attach closing punctuation
to the left, opening brackets and currency to the right, English clitics such as ``'s`` to the
left, alternate straight quotes open/close, undo ``@-@`` aggressive-hyphen splits). It is not a
byte-exact port; ``detokenizer="sacremoses"`` in the datamodule uses the real port when installed.
"""
from __future__ import annotations

import re
from typing import Callable, Optional, Sequence

# Moses tokenizer.perl escapes; one regex pass, so "&amp;quot;" correctly becomes "&quot;"
_ESCAPES = {
    "&amp;": "&", "&#124;": "|", "&bar;": "|", "&lt;": "<", "&gt;": ">", "&bra;": "[",
    "&ket;": "]", "&quot;": '"', "&apos;": "'", "&#91;": "[", "&#93;": "]",
}
_ESCAPE_RE = re.compile("|".join(re.escape(k) for k in _ESCAPES))

_OPENERS = re.compile(r"^[(\[{¿¡$£€¥₹₽₺]+$")
_CLOSERS = re.compile(r"^[,.?!:;%)\]}…]+$")
_JOINERS = {"@-@": "-", "@/@": "/", "@,@": ",", "@.@": ".", "@:@": ":"}
_STRAIGHT_QUOTES = {'"', "'", "`", "``", "''", "«", "»"}
_ALPHANUM_END = re.compile(r"\w$")
_CLITIC = re.compile(r"^'\w")  # 's 're 'll 't (Moses splits don't -> don 't)


def unescape(text: str) -> str:
    """Undo Moses XML escapes (``&apos;`` ``&quot;`` ``&amp;`` ``&lt;`` ``&gt;`` ``&#124;`` ...)."""
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], text)


def moses_detokenize(text: str, lang: str = "en") -> str:
    """Join a Moses-tokenized sentence back into plain text.

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


def make_detokenizer(kind: str = "builtin", lang: str = "en") -> Callable[[str], str]:
    """``str -> str`` detokenizer: ``builtin`` (:func:`moses_detokenize`), ``sacremoses``, ``none``."""
    if kind == "builtin":
        return lambda text: moses_detokenize(text, lang)
    if kind == "none":
        return lambda text: text
    if kind == "sacremoses":
        try:
            from sacremoses import MosesDetokenizer
        except ImportError as err:
            raise ImportError("detokenizer='sacremoses' needs `pip install sacremoses`; "
                              "or use detokenizer='builtin'") from err
        md = MosesDetokenizer(lang=lang)
        return lambda text: md.detokenize(text.split())
    raise ValueError(f"unknown detokenizer {kind!r}; use 'builtin', 'sacremoses' or 'none'")


def bleu_scores(
    hyps: Sequence[str],
    refs: Sequence[str],
    detokenize: Optional[Callable[[str], str]] = None,
) -> dict:
    """Corpus BLEU two ways, from tokenized hypotheses and tokenized references.

    ``bleu``: sacrebleu with ``tokenize="none"`` on the tokenized text (what ``multi-bleu.perl``
    reports on Moses-tokenized data). ``sacrebleu``: detokenize both sides, then sacrebleu's
    default ``13a`` tokenization; ``signature`` is its reproducibility signature. Detokenized
    references stand in for the raw reference files, so report the result as an approximation.

    Returns:
        dict(bleu=float, sacrebleu=float, signature=str, bleu_signature=str)
    """
    from sacrebleu.metrics import BLEU

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    detok = detokenize or moses_detokenize
    tok_metric = BLEU(tokenize="none")
    tok = tok_metric.corpus_score(list(hyps), [list(refs)])
    sb_metric = BLEU()
    sb = sb_metric.corpus_score([detok(h) for h in hyps], [[detok(r) for r in refs]])
    return dict(bleu=tok.score, sacrebleu=sb.score, signature=str(sb_metric.get_signature()),
                bleu_signature=str(tok_metric.get_signature()))
