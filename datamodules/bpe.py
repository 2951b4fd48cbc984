"""Shared BPE model and binary token caches for large parallel corpora (no torch needed).

Everything here is safe to call from several processes at once (Ray/Optuna trials, DDP ranks):
work happens under an exclusive ``fcntl.flock`` on a lock file next to the artefact, results are
written to a temporary name and published with ``os.replace``, so a reader either finds nothing
(and waits for the lock) or a complete file, never a half-written one.

A cache entry found damaged (a token file whose size is not what its ``meta.json`` says, a model
sentencepiece cannot read: a partial copy of the cache, a full disk, a stray edit) is rebuilt under
the same lock with a logged warning, as if it had not been there; the token caches made with a
rebuilt model are rebuilt too.

Cache layout under ``cache_dir``::

    bpe-<key>.model / bpe-<key>.vocab        sentencepiece model shared by both languages
    tok-<key>/tokens.bin                     all token ids of one text file, uint16 or int32
    tok-<key>/offsets.bin                    int64 (n_lines + 1,), line i is tokens[off[i]:off[i+1]]
    tok-<key>/meta.json                      n_lines, n_tokens, dtype, source file, model key
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import io
import itertools
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence

import numpy as np

from .extras import import_extra
from .vocab import BOS_ID, EOS_ID, PAD_ID, PIECES, UNK_ID

try:  # POSIX only; elsewhere the caches still work, just without the cross-process guard
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when the on-disk layout or the encoding options change
#: the threads sentencepiece's unigram trainer runs on, whatever the machine: its pieces depend on
#: how many threads split the work (16 and 1 give 56 of 2,000 pieces apart on the 10k-pair sample),
#: not on the cores, and the cache key (a checkpoint's vocabulary id) cannot tell them apart. The
#: BPE trainer's pieces do not depend on it, so it uses the threads asked for.
UNIGRAM_THREADS = 16


# --------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------
def file_fingerprint(path: str, chunk: int = 1 << 24) -> str:
    """The caches' key of a file's content: sha256 of its size and every byte.

    The key does not depend on the path or mtime, so copying the data keeps the cache; any edit
    changes it (a key of sampled blocks would miss a same-size edit between them, and serve the
    old BPE model and token ids). A file is read once per process while its size, mtime and inode
    stay (sha256 hashes about 2 GB a second on a Zen 5 core; a launch and each of its trials
    key the same files).
    """
    stat = os.stat(path)
    stamp = (os.path.abspath(path), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
    if stamp not in _FINGERPRINTS:
        h = hashlib.sha256(f"size={stat.st_size};".encode())
        with open(path, "rb") as fh:
            while block := fh.read(chunk):
                h.update(block)
        _FINGERPRINTS[stamp] = h.hexdigest()[:20]
    return _FINGERPRINTS[stamp]


#: the fingerprints this process has computed, by (path, size, mtime, ctime, inode)
_FINGERPRINTS: dict[tuple[str, int, int, int, int], str] = {}


def count_lines(path: str, chunk: int = 1 << 24) -> int:
    """Number of lines as :func:`iter_lines` yields them (a last line without ``\\n`` counts)."""
    n, last = 0, b"\n"
    with open(path, "rb") as fh:
        while True:
            buf = fh.read(chunk)
            if not buf:
                break
            n += buf.count(b"\n")
            last = buf[-1:]
    return n + (last != b"\n")


def iter_lines(path: str) -> Iterator[str]:
    """Stream the lines of a UTF-8 file without the line ending.

    Splits on ``\\n`` only (so a stray ``\\r`` or U+2028 inside a sentence cannot shift the
    alignment of a parallel corpus); strips one trailing ``\\r``. Bytes that are not UTF-8 raise a
    ValueError naming the file, the line and the conversion (the start of a corpus file is checked
    before anything is trained: :func:`datamodules.wmt_checks.not_text`; this finds the rest).
    """
    with open(path, encoding="utf-8", newline="\n") as fh:
        try:
            for line in fh:
                if line.endswith("\n"):
                    line = line[:-1]
                if line.endswith("\r"):
                    line = line[:-1]
                yield line
        except UnicodeDecodeError:
            raise ValueError(not_utf8(path)) from None


def not_utf8(path: str) -> str:
    """The line of the first bytes of ``path`` that are not UTF-8, said with the conversion (the
    file is read again, line by line: only where reading it as UTF-8 failed)."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                where = f"byte 0x{raw[exc.start]:02x} on line {n}"
                break
        else:
            where = "a character cut at its end"
    return (
        f"{path} is not UTF-8 text: {where} is not UTF-8 (Latin-1 or Windows-1252?), and would "
        f"be read as U+FFFD; convert it, e.g. `iconv -f latin1 -t utf-8 {path} > {path}.utf8 "
        f"&& mv {path}.utf8 {path}`"
    )


def read_lines(path: str) -> list[str]:
    """All lines of a (small) file, as :func:`iter_lines` yields them."""
    return list(iter_lines(path))


def discard(path: str, cache_dir: str) -> None:
    """Remove a cache file or folder: renamed away first (one atomic step, so a reader finds the
    old entry or none, never part of one), then deleted."""
    aside = tempfile.mkdtemp(prefix=".discard-", dir=cache_dir)
    try:
        os.replace(path, os.path.join(aside, "old"))
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def _check_rebuildable(entry: str, path: str, problem: str | None, cache_dir: str) -> bool:
    """Whether the cache entry at ``path`` (``entry``: its name in messages) is complete
    (``problem`` None); when it is damaged, a ValueError in one line if this process cannot
    rebuild it (``cache_dir`` not writable)."""
    if problem is not None and not os.access(cache_dir, os.W_OK | os.X_OK):
        raise ValueError(
            f"{entry} is damaged ({problem}) and cache_dir {cache_dir} is not writable, so it "
            f"cannot be rebuilt here: delete {path} from an account that can write there, or set "
            "cache_dir to a writable folder"
        )
    return problem is None


@contextlib.contextmanager
def file_lock(path: str) -> Iterator[None]:
    """Exclusive inter-process lock held on ``path`` (created if needed) for the ``with`` body."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a+") as fh:
        if fcntl is not None:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------
# BPE model
# --------------------------------------------------------------------------------------------
def bpe_cache_key(
    train_files: Sequence[str],
    vocab_size: int,
    model_type: str = "bpe",
    character_coverage: float = 0.9995,
    sample_sentences: int = 2_000_000,
) -> str:
    """Key of the shared model: content of the training files (order-free), size and options."""
    prints = sorted(file_fingerprint(p) for p in train_files)  # en-de and de-en share one model
    spec = dict(
        fmt=CACHE_FORMAT,
        files=prints,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        sample_sentences=sample_sentences,
        ids=[PAD_ID, BOS_ID, EOS_ID, UNK_ID],
        normalization="identity",
        byte_fallback=True,
    )
    if any(crlf_lines(p) for p in train_files):  # trained without the \r (ensure_bpe_model)
        spec["line_ends"] = "crlf stripped"
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def ensure_bpe_model(
    train_files: Sequence[str],
    cache_dir: str,
    vocab_size: int,
    model_type: str = "bpe",
    character_coverage: float = 0.9995,
    sample_sentences: int = 2_000_000,
    num_threads: int | None = None,
    seed: int = 0,
) -> tuple[str, bool]:
    """Train (once) a shared sentencepiece model on ``train_files`` or reuse the cached one.

    Ids are pad=0, bos=1, eos=2, unk=3; the normaliser is the identity, extra whitespace is kept and
    byte fallback is on, so ``decode(encode(line)) == line`` for any UTF-8 line. At most
    ``sample_sentences`` lines (sampled by sentencepiece) are used for training, so a 52M-pair
    corpus does not have to fit in memory. ``hard_vocab_limit`` is off: a small corpus yields a
    smaller vocabulary instead of an error; read the real size from the model. ``num_threads``: the
    BPE trainer's (default: the CPUs, at most 16); the unigram trainer's are
    :data:`UNIGRAM_THREADS`. The trainer reads the lines as encoding does (:func:`iter_lines`:
    without a line's ``\r``).

    Returns:
        (path of the ``.model`` file, True if it was found in the cache, False if trained now)
    """
    key = bpe_cache_key(train_files, vocab_size, model_type, character_coverage, sample_sentences)
    final = os.path.join(cache_dir, f"bpe-{key}.model")
    entry = f"the cached BPE model {final}"
    if os.path.exists(final) and _check_rebuildable(entry, final, _model_problem(final), cache_dir):
        return final, True
    with file_lock(os.path.join(cache_dir, f"bpe-{key}.lock")):
        if os.path.exists(final):
            problem = _model_problem(final)
            if problem is None:  # another process trained it while we waited
                return final, True
            log.warning("%s is damaged (%s): training it again", entry, problem)
            discard(final, cache_dir)
            # the token caches made with it: a model trained again may give other ids
            _discard_token_caches(cache_dir, os.path.basename(final))
        spm = import_sentencepiece()
        tmpdir = tempfile.mkdtemp(prefix=f".bpe-{key}-", dir=cache_dir)
        try:
            prefix = os.path.join(tmpdir, "m")
            threads = (
                UNIGRAM_THREADS
                if model_type == "unigram"
                else num_threads or min(os.cpu_count() or 1, 16)
            )
            # sentencepiece splits input= on commas, and its reader keeps a line's \r, which
            # encoding strips (CRLF files gave the model pieces no encoded line holds)
            if any("," in p or crlf_lines(p) for p in train_files):
                inputs = {"sentence_iterator": _chain_lines(train_files)}
            else:
                inputs = {"input": ",".join(train_files)}
            t0 = time.perf_counter()
            spm.set_random_generator_seed(seed)
            _train_sentencepiece(
                spm,
                vocab_size,
                **inputs,
                model_prefix=prefix,
                model_type=model_type,
                character_coverage=character_coverage,
                byte_fallback=True,
                normalization_rule_name="identity",
                remove_extra_whitespaces=False,
                add_dummy_prefix=True,
                hard_vocab_limit=False,
                pad_id=PAD_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                unk_id=UNK_ID,
                pad_piece=PIECES[PAD_ID],
                bos_piece=PIECES[BOS_ID],
                eos_piece=PIECES[EOS_ID],
                unk_piece=PIECES[UNK_ID],
                input_sentence_size=sample_sentences,
                shuffle_input_sentence=True,
                num_threads=threads,
                minloglevel=2,
            )
            # the .vocab first: whoever sees the .model may rely on both being there
            os.replace(prefix + ".vocab", final[: -len(".model")] + ".vocab")
            os.replace(prefix + ".model", final)
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
        log.info(
            "trained %s BPE (vocab %d) on %s in %.1fs -> %s",
            model_type,
            vocab_size,
            ", ".join(train_files),
            time.perf_counter() - t0,
            final,
        )
    return final, False


def _train_sentencepiece(spm, vocab_size: int, **options) -> None:
    """``SentencePieceTrainer.train``; a vocabulary too small for the corpus becomes a ValueError."""
    try:
        spm.SentencePieceTrainer.train(vocab_size=vocab_size, **options)
    except RuntimeError as err:
        needed = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(err))
        if needed is None:
            raise
        raise ValueError(
            f"vocab_size={vocab_size} is too small for this corpus: its characters and "
            f"the special/byte pieces need at least {needed.group(1)}; raise vocab_size"
        ) from None


def _model_problem(model_path: str) -> str | None:
    """Why sentencepiece cannot load ``model_path`` (None: it loads)."""
    try:
        load_sentencepiece(model_path)
    except (RuntimeError, OSError) as err:  # "could not parse ModelProto", a short read
        return f"sentencepiece cannot read it: {err}"
    return None


def _discard_token_caches(cache_dir: str, model_name: str) -> None:
    """Remove the token caches encoded with the model file ``model_name`` (``bpe-<key>.model``),
    each under its own lock: a model trained again may not give the same ids."""
    for meta_path in sorted(glob.glob(os.path.join(cache_dir, "tok-*", "meta.json"))):
        directory = os.path.dirname(meta_path)
        try:
            with open(meta_path) as fh:
                model = json.load(fh).get("model", "")
        except (OSError, ValueError, AttributeError):
            continue  # unreadable: ensure_encoded finds it damaged and rebuilds it
        if os.path.basename(str(model)) == model_name:
            with file_lock(directory + ".lock"):
                if os.path.exists(directory):
                    discard(directory, cache_dir)


def crlf_lines(path: str, head: int = 1 << 16) -> bool:
    """Whether the file's lines end in ``\\r\\n`` (Windows line endings), judged by its first bytes."""
    with open(path, "rb") as fh:
        return b"\r\n" in fh.read(head)


def _chain_lines(paths: Sequence[str]) -> Iterator[str]:
    for p in paths:
        yield from iter_lines(p)


def import_sentencepiece():
    """The ``sentencepiece`` module; when it is not installed, an ImportError naming the extra."""
    return import_extra(
        "sentencepiece",
        "WMT17DataModule's shared BPE vocabulary (training it, encoding and decoding text) uses "
        "sentencepiece",
    )


def load_sentencepiece(model_path: str):
    """A ``SentencePieceProcessor`` for ``model_path``."""
    return import_sentencepiece().SentencePieceProcessor(model_file=model_path)


# --------------------------------------------------------------------------------------------
# binary token caches
# --------------------------------------------------------------------------------------------
class TokenizedCorpus:
    """Read-only view of one encoded text file: ``corpus[i]`` is line i's ids, no EOS.

    The arrays are numpy memmaps opened lazily, and dropped when pickled, so DataLoader workers
    reopen them instead of copying the corpus.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        with open(os.path.join(directory, "meta.json")) as fh:
            self.meta: dict = json.load(fh)
        self.n_lines: int = int(self.meta["n_lines"])
        self.n_tokens: int = int(self.meta["n_tokens"])
        self.dtype = np.dtype(self.meta["dtype"])
        self._tokens: np.ndarray | None = None
        self._offsets: np.ndarray | None = None

    def _open(self) -> None:
        self._offsets = np.memmap(
            os.path.join(self.directory, "offsets.bin"),
            dtype=np.int64,
            mode="r",
            shape=(self.n_lines + 1,),
        )
        if self.n_tokens:
            self._tokens = np.memmap(
                os.path.join(self.directory, "tokens.bin"),
                dtype=self.dtype,
                mode="r",
                shape=(self.n_tokens,),
            )
        else:  # np.memmap refuses empty files
            self._tokens = np.zeros(0, dtype=self.dtype)

    @property
    def offsets(self) -> np.ndarray:
        """int64 (n_lines + 1,)."""
        if self._offsets is None:
            self._open()
        return self._offsets  # type: ignore[return-value]

    @property
    def tokens(self) -> np.ndarray:
        """(n_tokens,) uint16 or int32."""
        if self._tokens is None:
            self._open()
        return self._tokens  # type: ignore[return-value]

    def lengths(self) -> np.ndarray:
        """int64 (n_lines,): tokens per line, EOS not counted."""
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return self.n_lines

    def __getitem__(self, i: int) -> np.ndarray:
        off = self.offsets
        return self.tokens[off[i] : off[i + 1]]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_tokens"] = state["_offsets"] = None
        return state


def token_cache_problem(directory: str) -> str | None:
    """Why the token cache in ``directory`` is damaged (None: complete): ``meta.json`` unreadable,
    a file missing, a size other than ``meta.json``'s counts give, or offsets that do not run from
    0 to ``n_tokens``. Reads the two file sizes and two offsets, not the data."""
    try:
        with open(os.path.join(directory, "meta.json")) as fh:
            meta = json.load(fh)
        n_lines, n_tokens = int(meta["n_lines"]), int(meta["n_tokens"])
        itemsize = np.dtype(meta["dtype"]).itemsize
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"meta.json is unreadable: {err}"
    sizes = {"offsets.bin": (n_lines + 1) * 8, "tokens.bin": n_tokens * itemsize}
    for name, want in sizes.items():
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            return f"{name} is missing"
        if os.path.getsize(path) != want:
            return (
                f"{name} has {os.path.getsize(path)} bytes, where meta.json's {n_lines} lines and "
                f"{n_tokens} tokens make {want}"
            )
    with open(os.path.join(directory, "offsets.bin"), "rb") as fh:
        first = int(np.frombuffer(fh.read(8), dtype=np.int64)[0])
        fh.seek(-8, os.SEEK_END)
        last = int(np.frombuffer(fh.read(8), dtype=np.int64)[0])
    if (first, last) != (0, n_tokens):
        return f"offsets.bin runs from {first} to {last}, not from 0 to n_tokens={n_tokens}"
    return None


def token_cache_dir(cache_dir: str, model_key: str, text_path: str) -> str:
    """Directory of the cache of ``text_path`` encoded with the model whose key is ``model_key``."""
    spec = f"{CACHE_FORMAT};{model_key};{file_fingerprint(text_path)}"
    return os.path.join(cache_dir, "tok-" + hashlib.sha256(spec.encode()).hexdigest()[:16])


def ensure_encoded(
    text_path: str,
    model_path: str,
    cache_dir: str,
    chunk_lines: int = 50_000,
    num_threads: int | None = None,
) -> tuple[TokenizedCorpus, bool]:
    """Encode ``text_path`` with the model into the binary cache once; reuse it afterwards.

    The text is streamed in chunks of ``chunk_lines`` lines (memory stays flat for any corpus
    size); token ids go to ``tokens.bin`` (uint16 when the vocabulary allows), line boundaries to
    ``offsets.bin``. Whitespace-only lines are stored as empty (zero tokens) so length filtering
    counts them as empty; every other line decodes back exactly.

    Returns:
        (the corpus, True if it was a cache hit)
    """
    model_key = os.path.basename(model_path)[len("bpe-") : -len(".model")]
    final = token_cache_dir(cache_dir, model_key, text_path)
    entry = f"the token cache {final} of {text_path}"
    meta_path = os.path.join(final, "meta.json")
    if os.path.exists(meta_path) and _check_rebuildable(
        entry, final, token_cache_problem(final), cache_dir
    ):
        return TokenizedCorpus(final), True
    with file_lock(final + ".lock"):
        if os.path.exists(meta_path):
            problem = token_cache_problem(final)
            if problem is None:  # another process encoded it while we waited
                return TokenizedCorpus(final), True
            log.warning("%s is damaged (%s): encoding it again", entry, problem)
        sp = load_sentencepiece(model_path)
        dtype = np.uint16 if sp.get_piece_size() <= np.iinfo(np.uint16).max + 1 else np.int32
        threads = num_threads or min(os.cpu_count() or 1, 16)
        tmp = tempfile.mkdtemp(prefix=".tok-", dir=cache_dir)
        try:
            t0 = time.perf_counter()
            n_lines, n_tokens = _encode_stream(sp, text_path, tmp, dtype, chunk_lines, threads)
            meta = dict(
                n_lines=n_lines,
                n_tokens=n_tokens,
                dtype=np.dtype(dtype).name,
                source=os.path.abspath(text_path),
                model=os.path.abspath(model_path),
                format=CACHE_FORMAT,
            )
            with open(os.path.join(tmp, "meta.json"), "w") as fh:
                json.dump(meta, fh, indent=1)
            if os.path.exists(final):  # damaged, or a crashed writer's leftover without meta.json
                discard(final, cache_dir)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        secs = time.perf_counter() - t0
        log.info(
            "encoded %s: %d lines, %d tokens in %.1fs (%.0f lines/s) -> %s",
            text_path,
            n_lines,
            n_tokens,
            secs,
            n_lines / max(secs, 1e-9),
            final,
        )
    return TokenizedCorpus(final), False


def _encode_stream(
    sp, text_path: str, out_dir: str, dtype, chunk_lines: int, threads: int
) -> tuple[int, int]:
    n_lines = n_tokens = 0
    with (
        open(os.path.join(out_dir, "tokens.bin"), "wb") as tok_fh,
        open(os.path.join(out_dir, "offsets.bin"), "wb") as off_fh,
    ):
        off_fh.write(np.zeros(1, dtype=np.int64).tobytes())
        chunk: list[str] = []
        for line in iter_lines(text_path):
            chunk.append(line)
            if len(chunk) == chunk_lines:
                n_tokens = _write_chunk(sp, chunk, tok_fh, off_fh, dtype, n_tokens, threads)
                n_lines += len(chunk)
                chunk = []
        if chunk:
            n_tokens = _write_chunk(sp, chunk, tok_fh, off_fh, dtype, n_tokens, threads)
            n_lines += len(chunk)
    return n_lines, n_tokens


def _write_chunk(
    sp,
    lines: list[str],
    tok_fh: io.BufferedWriter,
    off_fh: io.BufferedWriter,
    dtype,
    start: int,
    threads: int,
) -> int:
    lines = [line if line and not line.isspace() else "" for line in lines]  # blank = empty
    ids = sp.encode(lines, out_type=int, num_threads=threads)
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))  # (chunk,)
    total = int(lengths.sum())
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=total)  # (total,)
    tok_fh.write(flat.tobytes())
    off_fh.write((start + np.cumsum(lengths)).tobytes())
    return start + total
