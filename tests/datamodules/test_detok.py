"""WMT detokenization for val/sacrebleu: the standard Moses post-processing by default.

    .venv/bin/python -m pytest tests/datamodules/test_detok.py

The sentences marked "sample" are real lines (or a line's end) of the English-German sample corpus
(../shared/data/wmt-ende-sample/, train.de and train.en; 1-based line numbers in the ids), chosen
where the hand-written approximation (detokenizer="builtin") and Moses' detokenizer disagree; the
"ellipsis" one is a German sentence ending in an ellipsis. The expected strings are sacremoses
0.2's output (byte-compatible with Moses' detokenizer.perl).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tomllib

from datamodules.wmt17 import WMT17DataModule
from datamodules.wmt_text import join_aggressive_marks, moses_detokenize

#: (pair, tokenized target sentence, Moses detokenization)
DIFFERS = {
    "sample-de-1392-backslash": (
        "en-de",
        r"Geben Sie das Vereichnis c: ftpboot \ ploplinux mit dem Namen ploplinux in Ihrem Netzwerk frei .",
        r"Geben Sie das Vereichnis c: ftpboot\ ploplinux mit dem Namen ploplinux in Ihrem Netzwerk frei.",
    ),
    "sample-de-3435-backslash-quotes": (
        "en-de",
        r"Dazu sollten Sie die Software auf einer anderen Partition der Festplatte installieren "
        r"(z.B. &quot; D: \ &quot; statt &quot; C: \ &quot;).",
        r"Dazu sollten Sie die Software auf einer anderen Partition der Festplatte installieren "
        r'(z.B. "D:\" statt "C:\ ").',
    ),
    "sample-de-3635-currency-sign": (
        "en-de",
        "Die lunare Farbe war ein Symbol des Treubruches , der IllusoritГ ¤ t immer .",
        "Die lunare Farbe war ein Symbol des Treubruches, der IllusoritГ ¤t immer.",
    ),
    "ellipsis-de": ("en-de", "Ich bin hier …", "Ich bin hier …"),
    "sample-en-222-possessive": (
        "de-en",
        "in particular between Member States &apos; gas and energy supply networks , has been noted .",
        "in particular between Member States' gas and energy supply networks, has been noted.",
    ),
    "sample-en-2435-quotes": (
        "de-en",
        "Fill in your criteria and press &apos; Search &apos; .",
        "Fill in your criteria and press' Search '.",
    ),
    "sample-en-6363-split-clitics": (
        "de-en",
        "- (DA) The Danish Social Democrats have today voted against Mr Dimitrakopoulos &apos; s "
        "and Mr Leinen &apos; s report .",
        "- (DA) The Danish Social Democrats have today voted against Mr Dimitrakopoulos' s "
        "and Mr Leinen 's report.",
    ),
    "sample-en-9405-cent-sign": (
        "de-en",
        'The " COIN VALUE " may also be changed from as low as ¢ 1 to a maximum of $ 1 .',
        'The "COIN VALUE" may also be changed from as low as ¢1 to a maximum of $1.',
    ),
}


def _dm(tmp_path: Path, pair: str, **kwargs) -> WMT17DataModule:
    return WMT17DataModule(pair=pair, data_dir=str(tmp_path), **kwargs)


@pytest.mark.parametrize("pair, tokenized, moses", DIFFERS.values(), ids=DIFFERS.keys())
def test_default_detokenizer_is_moses_where_the_approximation_differs(
    tmp_path, pair, tokenized, moses
):
    tgt = pair.split("-")[1]
    assert moses_detokenize(tokenized, tgt) != moses  # the example tells the two apart
    assert _dm(tmp_path, pair).detokenize(tokenized) == moses
    assert _dm(tmp_path, pair, detokenizer="builtin").detokenize(tokenized) == moses_detokenize(
        tokenized, tgt
    )  # the approximation stays available on request


def test_aggressive_marks_are_joined_before_moses(tmp_path):
    # sample valid.de line 20, split as the WMT'17 preprocessed release splits hyphens
    tokenized = (
        "So gesehen ist es eher befremdend , dass sich die Moslem @-@ Kämpfer überhaupt "
        "von den ungläubigen Hunden helfen ließen ."
    )
    assert _dm(tmp_path, "en-de").detokenize(tokenized) == (
        "So gesehen ist es eher befremdend, dass sich die Moslem-Kämpfer überhaupt von den "
        "ungläubigen Hunden helfen ließen."
    )
    # sacremoses joins only @-@; the number marks are joined first
    assert (
        _dm(tmp_path, "de-en").detokenize("1 @,@ 000 @.@ 5 euros , state @-@ of @-@ the @-@ art")
        == "1,000.5 euros, state-of-the-art"
    )
    assert join_aggressive_marks("a @/@ b @:@ c  @-@ d") == "a/b:c-d"


def test_target_language_reaches_the_detokenizer(tmp_path):
    # English rules attach the clitic and the possessive quote; German rules do not
    tokenized = "Parliament &apos;s role , as the Member States &apos; view ."
    assert (
        _dm(tmp_path, "de-en").detokenize(tokenized)
        == "Parliament's role, as the Member States' view."
    )
    assert (
        _dm(tmp_path, "en-de").detokenize(tokenized)
        == "Parliament 's role, as the Member States 'view."
    )


def test_without_sacremoses_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sacremoses", None)  # makes `import sacremoses` fail
    with pytest.raises(ImportError, match=r"pip install -e \.\[data\]"):
        _dm(tmp_path, "en-de")
    assert _dm(tmp_path, "en-de", detokenizer="builtin").detokenize("a , b") == "a, b"
    assert (
        _dm(tmp_path, "de-en", source="hf").detokenize("a , b") == "a , b"
    )  # raw text: not needed


def test_the_named_extras_install_sacremoses():
    extras = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())[
        "project"
    ]["optional-dependencies"]
    for extra in ("data", "sweep"):
        assert any(dep.startswith("sacremoses") for dep in extras[extra]), extra
