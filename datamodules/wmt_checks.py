"""Checks of a WMT17DataModule's arguments and files, and the messages that say how to fix them.

No torch: the pair's spelling, whether the WMT'17 release has the pair (and so whether ``fetch``
/ ``download=True`` can get its files), what the files under ``data_dir`` must look like (text,
not compressed; line-aligned), and why a split has no pair left after filtering.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Sequence

from .bpe import count_lines, not_utf8
from .wmt17_fetch import PAIR_DEFAULTS

#: leading bytes of compressed files -> (the format, the command that unpacks it, its suffix)
COMPRESSED: dict[bytes, tuple[str, str, str]] = {
    b"\x1f\x8b": ("gzip", "gunzip", ".gz"),
    b"BZh": ("bzip2", "bunzip2", ".bz2"),
    b"\xfd7zXZ\x00": ("xz", "unxz", ".xz"),
    b"\x28\xb5\x2f\xfd": ("zstd", "unzstd", ".zst"),
}
#: how much of each file :func:`not_text` reads
HEAD_BYTES = 1 << 16
#: a split's name in messages
SPLIT_LABELS = {"train": "training", "valid": "validation", "test": "test"}


def check_pair(pair: str) -> tuple[str, str]:
    """(source, target) of ``pair``; a ValueError in one line when it is not ``"xx-yy"``, lower case.

    Lower case is required rather than applied: the languages are the files' suffixes
    (``train.en``), and a sweep uses ``task.pair`` itself too (folder names, report columns).
    """
    langs = pair.split("-") if isinstance(pair, str) else []
    if len(langs) != 2 or not all(langs) or langs[0] == langs[1]:
        raise ValueError(f"pair must look like 'en-de' (source-target), got {pair!r}")
    if pair != pair.lower():
        raise ValueError(
            f"pair must be lower case, as the files' language suffixes are: pair={pair.lower()!r}, "
            f"not {pair!r}"
        )
    return langs[0], langs[1]


def settings_problem(values: dict, searched: Sequence[str] = ()) -> tuple[str, str] | None:
    """(the setting, what is wrong and how to fix it) of a WMT17DataModule's ``values`` whose
    combination no batch or no file could come from, or None; a setting in ``searched`` (a sweep's
    searched ones) is taken as given."""
    if "batch_tokens" in values and values["batch_tokens"] is None:
        if values.get("batch_size") is None and "batch_size" not in searched:
            return (
                "batch_tokens",
                "is null and batch_size is not given, so a batch has no size: give batch_size "
                "(sentences a batch) or batch_tokens (tokens a batch; 4096 when left out)",
            )
    for key in ("train_prefix", "valid_prefix"):
        if values.get(key) == "" and key not in searched:
            return (
                key,
                f"is empty, so no file is named: give the files' prefix ({key.split('_')[0]} "
                f"for {key.split('_')[0]}.en), or leave it out for the release's",
            )
    return None


def in_release(src_lang: str, tgt_lang: str) -> bool:
    """Whether the WMT'17 preprocessed release has the pair (English with cs, de, fi or tr)."""
    other = tgt_lang if src_lang == "en" else src_lang
    return "en" in (src_lang, tgt_lang) and other in PAIR_DEFAULTS


def release_pairs() -> str:
    """The pairs the release has, for messages: ``"en-cs, en-de, en-fi, en-tr"``."""
    return ", ".join(f"en-{x}" for x in sorted(PAIR_DEFAULTS))


def not_in_release(pair: str) -> str:
    """Why nothing fetches ``pair``'s files, in one sentence."""
    return (
        f"the WMT'17 release has no {pair} (only {release_pairs()}, either direction), so neither "
        "`python -m datamodules.wmt17 fetch` nor download=True can get its files"
    )


def data_hint(pair: str, src_lang: str, tgt_lang: str, data_dir: str) -> str:
    """How to get the files of ``pair``: the fetch command, or (a pair the release does not have)
    placing them by hand."""
    if in_release(src_lang, tgt_lang):
        return (
            f"Get the paper's data with `python -m datamodules.wmt17 fetch --pair {pair} --to "
            f"{data_dir}` or download=True; offline, see `python -m datamodules.wmt17 fetch --help`"
        )
    return f"Place the files above in {data_dir} yourself: {not_in_release(pair)}"


def layout(pair: str, src_lang: str, tgt_lang: str, prefixes: dict[str, str], data_dir: str) -> str:
    """The expected files under ``data_dir``, one row per split (``prefixes``: split -> file
    prefix; an empty one: no such split), and how to get them."""
    a, b = sorted((src_lang, tgt_lang))
    rows = [f"  {p}.{a} / {p}.{b}  ({split})" for split, p in prefixes.items() if p]
    return (
        "expected layout under data_dir: one sentence per line, UTF-8, the two files of a "
        "split line-aligned:\n"
        + "\n".join(rows)
        + "\n(override names with train_prefix/valid_prefix/test_prefix). "
        + data_hint(pair, src_lang, tgt_lang, data_dir)
    )


def check_files(
    pair: str, src_lang: str, tgt_lang: str, prefixes: dict[str, str], data_dir: str
) -> None:
    """Each split's two files (``prefixes``: split -> file prefix; an empty one: no such split)
    there, not empty and text; else a FileNotFoundError or ValueError naming the file and the fix."""
    for split, prefix in ((s, p) for s, p in prefixes.items() if p):
        for lang in (src_lang, tgt_lang):
            p = os.path.join(data_dir, f"{prefix}.{lang}")
            where = f"WMT17DataModule(pair={pair!r}):"
            if not os.path.isfile(p):
                raise FileNotFoundError(
                    f"{where} missing {split} file {p}\n"
                    f"{layout(pair, src_lang, tgt_lang, prefixes, data_dir)}"
                )
            if os.path.getsize(p) == 0:  # sentencepiece would fail on it with a RuntimeError
                how = (
                    f", or run `python -m datamodules.wmt17 fetch --pair {pair} --to {data_dir}` "
                    "(or download=True), which fetches the release again when a file is empty"
                    if in_release(src_lang, tgt_lang)
                    else ""
                )
                raise ValueError(
                    f"{where} the {split} file {p} is empty (0 bytes; an interrupted copy or "
                    f"download?). Copy the complete file there{how}\n"
                    f"{layout(pair, src_lang, tgt_lang, prefixes, data_dir)}"
                )
            problem = not_text(p)  # a gzipped file would read as a line-count mismatch
            if problem:
                raise ValueError(f"{where} {split} file {problem}")


def not_text(path: str) -> str | None:
    """Why ``path`` is not a plain text file, judged by its first bytes (None: it looks like text):
    compressed (gzip, bzip2, xz, zstd), or NUL bytes (UTF-16, or a binary file)."""
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
    for magic, (kind, tool, suffix) in COMPRESSED.items():
        if head.startswith(magic):
            return (
                f"{path} is {kind}-compressed: {tool} it "
                f"(`mv {path} {path}{suffix} && {tool} {path}{suffix}`)"
            )
    if b"\x00" in head:
        return (
            f"{path} is not UTF-8 text: it has NUL bytes in its first {HEAD_BYTES // 1024} KiB "
            "(UTF-16, or a binary file); write it as UTF-8, one sentence per line"
        )
    try:  # (a character cut by the end of the head is not an error: final=False)
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return not_utf8(path)  # (the rest of the file is checked as it is read: iter_lines)
    return None


def check_line_counts(split: str, src_path: str, tgt_path: str) -> None:
    """A ValueError naming both files and counts when the two sides differ in lines."""
    na, nb = count_lines(src_path), count_lines(tgt_path)
    if na != nb:
        raise ValueError(
            f"{split}: {src_path} has {na} lines but {tgt_path} has {nb} lines; the two sides "
            "of a parallel corpus must be line-aligned"
        )


def check_kept(
    split: str, paths: Sequence[str], stats: dict[str, int], arg: str, limit: int | None
) -> None:
    """A ValueError when filtering left ``split`` no pair: names the files and why (empty sides,
    or pairs longer than ``arg=limit``) and what to change."""
    if stats["kept"]:
        return
    label, files = SPLIT_LABELS.get(split, split), " and ".join(paths)
    if not stats["too_long"]:
        raise ValueError(
            f"no {label} pair is left in {files}: each of its {stats['total']} pairs has an empty "
            f"side (a blank or whitespace-only line); put the {label} sentences there, one per "
            "line, line-aligned"
        )
    raise ValueError(
        f"no {label} pair survived the length filter in {files}: of {stats['total']} pairs, "
        f"{stats['empty']} have an empty side and {stats['too_long']} have more than "
        f"{arg}={limit} BPE tokens on a side; raise {arg}"
    )


def missing_line(
    pair: str,
    src_lang: str,
    tgt_lang: str,
    data_dir: str,
    wanted: Sequence[str],
    lacking: Sequence[str],
) -> str:
    """:meth:`~datamodules.wmt17.WMT17DataModule.missing_data`'s line for files ``lacking`` of
    ``wanted``, with the way to get them: fetch, or place them by hand."""
    names = [os.path.basename(p) for p in lacking]
    head = (
        f"data_dir {data_dir} (task.data_dir in a sweep file) lacks {len(lacking)} of the "
        f"{len(wanted)} {pair} files ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}), "
        "missing or empty"
    )
    if not in_release(src_lang, tgt_lang):
        return (
            f"{head}: prepare_data() (a sweep's data stage) would stop, and {not_in_release(pair)}. "
            f"Place {', '.join(os.path.basename(p) for p in wanted)} in {data_dir}, or point "
            "data_dir (task.data_dir) at the folder that holds them"
        )
    return (
        f"{head}, and download is off: prepare_data() (a sweep's data stage) would stop. Fetch "
        f"them with `python -m datamodules.wmt17 fetch --pair {pair} --to {data_dir}`, or set "
        "download=True (task.download: true in a sweep file)"
    )


def unfetched_line(
    pair: str, data_dir: str, unfetched: Sequence[str], prefixes: dict[str, str]
) -> str:
    """:meth:`~datamodules.wmt17.WMT17DataModule.missing_data`'s line for files ``unfetched``
    that ``download`` cannot bring: their prefix is the caller's, and the release's fetch writes
    the pair's default names only."""
    names = [os.path.basename(p) for p in unfetched]
    given = sorted(
        {f"{split}_prefix={prefixes[split]!r}" for split in prefixes for p in names
         if p.rsplit(".", 1)[0] == prefixes[split]}
    )  # fmt: skip
    return (
        f"data_dir {data_dir} (task.data_dir in a sweep file) lacks "
        f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''}, and download cannot fetch "
        f"them: it writes the release's {pair} files under their default names only, and "
        f"{', '.join(given)} {'names' if len(given) == 1 else 'name'} others. Place those files in "
        f"{data_dir}, or leave the prefix unset (task.<split>_prefix in a sweep file) to read the "
        "release's"
    )


def no_test_split(pair: str, src_lang: str, tgt_lang: str, default: str) -> str:
    """Why there is no test split (``test_prefix`` is empty) and how to have one (``default``: the
    pair's test prefix)."""
    return (
        f"WMT17DataModule(pair={pair!r}) has no test split: test_prefix is empty. To test, create "
        "it with test_prefix set to the name of the test files in data_dir without the language "
        f"suffix (test_prefix={default!r} for {default}.{src_lang} and {default}.{tgt_lang}), or "
        f"leave test_prefix unset for the pair's default, {default!r}"
    )
