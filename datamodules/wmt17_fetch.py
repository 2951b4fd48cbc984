"""Fetch the WMT'17 preprocessed release of one language pair, laid out for ``WMT17DataModule``.

    python -m datamodules.wmt17 fetch --pair en-de --to /data/wmt17/en-de
    python -m datamodules.wmt17 fetch --pair en-tr --to DIR --base-url http://mirror.example/preprocessed

The release the paper used (Britz et al. 2017, §4: "the newly available pre-processed datasets for
the WMT'17 task") lives at ``<base-url>/<xx>-en/`` (``xx`` = cs, de, fi, tr; one folder per pair,
either direction) and holds, per pair:

    corpus.tc.<xx>.gz  corpus.tc.en.gz   training corpus, Moses-tokenized and truecased, line-aligned
    dev.tgz                              flat archive of the dev/test sets: news<set><year>.tc.<lang>
                                         (tokenized + truecased) plus the original ``.sgm`` files

(seen in public download scripts for de-en and cs-en, and in the release's own preparation script
for tr-en, whose ``dev.tgz`` is ``tar zcvf dev.tgz news*`` over ``newsdev2016``/``newstest2016``;
the fi-en names follow the same script and were not seen directly). What lands in ``--to``:

    train.<xx>  train.en                 gunzipped corpus.tc.*.gz
    <set>.<xx>  <set>.en                 every ``<set>.tc.<lang>`` of dev.tgz, ``.tc`` dropped
                                         (newstest2015/newstest2016; newsdev2016 for en-tr)
    wmt17-fetch.json                     what was fetched: URL, size and sha256 of each archive

How it behaves:

* downloads go to ``<to>/.download/<name>.part``, written as the bytes arrive, so a reset or a
  ctrl-c loses nothing received; the next try (or the same command run again) resumes with an HTTP
  Range request from the exact byte count; a finished download is renamed to
  ``<to>/.download/<name>``; its size is checked against the server's Content-Length, its sha256
  against ``--sha256sums`` when given (the release publishes no checksum file that we found; the
  figures we computed are recorded in ``wmt17-fetch.json`` so a site can pin them);
* a server error (HTTP 5xx, 408, 429), a refused, reset or timed-out connection and a transfer
  that breaks off are retried with exponential backoff: ``--retries`` retries after a first try,
  in a row that receive nothing (default 5: six tries), waiting ``--retry-delay`` seconds
  (default 1) doubled each time (1, 2, 4, 8, 16 s); a try that received bytes starts the count again. A 404 is not retried: the address
  is wrong (check ``--base-url`` and the pair);
* ctrl-c prints one line and exits with status 130; the partial file keeps what arrived: run the
  same command again to resume;
* archives are checked end to end (gzip CRC and length, tar structure) while they are unpacked to
  hidden temporary names, and only renamed to their final names when complete: a failure at any
  point (no network, HTTP error, truncated or corrupt archive, full disk) leaves no half-written
  file under a final name and prints one line saying what to do;
* after unpacking, the archives this command downloaded are deleted (``--keep-archives`` keeps
  them); archives placed in ``<to>/.download/`` by hand are always kept, and never deleted when
  corrupt or mismatched either (the message says to replace them);
* a file lock in ``<to>`` (``.fetch.lock``) makes concurrent calls on one shared filesystem
  download once: the others print a line naming the lock and the process holding it, wait, and
  find the files there;
* when every file ``WMT17DataModule`` reads is already present (and not empty), nothing is
  downloaded; ``--sha256sums`` is then checked against the archives still in ``<to>/.download/``,
  else against the sha256 recorded in ``wmt17-fetch.json`` when the files were fetched; when it
  can check neither (files placed by hand) the command fails and says so.

Air-gapped cluster: on a machine with internet, download the three files of the pair (e.g.
``wget <base-url>/de-en/{corpus.tc.de.gz,corpus.tc.en.gz,dev.tgz}``), copy them into
``<to>/.download/`` on the cluster and run the same fetch command there: files already present are
verified and unpacked, never downloaded (and kept). Or place the pair's six files by hand in
``<to>`` under the names listed per pair under "Files per pair" (at the end of ``--help``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import gzip
import hashlib
import http.client
import json
import logging
import os
import re
import shutil
import socket
import ssl
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, as in datamodules.bpe
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

#: the release the paper used; ``<RELEASE_URL>/<xx>-en/`` per pair
RELEASE_URL = "http://data.statmt.org/wmt17/translation-task/preprocessed"

#: Default file prefixes per non-English language of the pair (the paper's four pairs): what
#: ``WMT17DataModule`` reads, and what :func:`fetch` writes.
PAIR_DEFAULTS: dict[str, dict[str, str]] = {
    "cs": dict(train="train", valid="newstest2015", test="newstest2016"),
    "de": dict(train="train", valid="newstest2015", test="newstest2016"),
    "fi": dict(train="train", valid="newstest2015", test="newstest2016"),
    # en-tr entered WMT in 2016: no newstest2015; WMT'16/'17 used newsdev2016 for development
    "tr": dict(train="train", valid="newsdev2016", test="newstest2016"),
}

#: sha256 of the release files, where published (none found: pass ``checksums`` / --sha256sums)
PUBLISHED_SHA256: dict[str, str] = {}

MANIFEST = "wmt17-fetch.json"
DOWNLOAD_DIR = ".download"
LOCK = ".fetch.lock"
#: in ``.download/``: the archives this command downloaded (the others were placed by hand)
DOWNLOADED = ".downloaded.json"
CHUNK = 1 << 20
#: longest wait between two tries, however many there were
MAX_RETRY_DELAY = 60.0
#: HTTP statuses worth trying again: server errors, request timeout, too many requests
_RETRY_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))
_DEV_MEMBER = re.compile(r"^(news[a-z]+\d{4})\.tc\.([a-z]{2})$")
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class FetchError(FileNotFoundError):
    """The data could not be fetched; the message is one line that says what to do."""


class FetchStopped(KeyboardInterrupt):
    """Ctrl-C during a download; the message is one line saying what was kept and how to resume."""


@dataclasses.dataclass
class FetchReport:
    """What one :func:`fetch` call did."""

    pair: str
    directory: str
    #: "present" (nothing to do), "fetched" (this call laid the files out)
    outcome: str
    #: bytes received over the network by this call, per release file
    received: dict[str, int] = dataclasses.field(default_factory=dict)
    #: the files laid out for the datamodule (absolute paths)
    files: list[str] = dataclasses.field(default_factory=list)
    #: release files whose sha256 matched ``checksums``, and what was hashed: "download",
    #: "archive" (in ``.download/``) or MANIFEST (recorded when the files were fetched)
    verified: dict[str, str] = dataclasses.field(default_factory=dict)
    #: archives in ``.download/`` kept after unpacking because they were placed there by hand
    kept: list[str] = dataclasses.field(default_factory=list)


def other_language(pair: str) -> str:
    """The non-English side of ``pair`` (``"en-de"`` or ``"de-en"`` -> ``"de"``); checks the pair."""
    langs = pair.split("-")
    if len(langs) != 2 or "en" not in langs or langs[0] == langs[1]:
        raise FetchError(
            f"pair must be English with one of {', '.join(sorted(PAIR_DEFAULTS))}, "
            f"e.g. 'en-de' or 'de-en'; got {pair!r}"
        )
    other = langs[1] if langs[0] == "en" else langs[0]
    if other not in PAIR_DEFAULTS:
        raise FetchError(
            f"the WMT'17 release has no pair {pair!r} in this study; valid: "
            f"{', '.join(f'en-{x}' for x in sorted(PAIR_DEFAULTS))} (either direction)"
        )
    return other


def release_files(other: str) -> tuple[str, str, str]:
    """Names of the release files of the ``<other>-en`` folder: two corpora and ``dev.tgz``."""
    return f"corpus.tc.{other}.gz", "corpus.tc.en.gz", "dev.tgz"


def layout_files(other: str, directory: str) -> list[str]:
    """The files ``WMT17DataModule`` reads with its default prefixes, under ``directory``."""
    prefixes = PAIR_DEFAULTS[other]
    return [
        os.path.join(directory, f"{prefixes[split]}.{lang}")
        for split in ("train", "valid", "test")
        for lang in (other, "en")
    ]


def hand_placement_hint(pair: str, directory: str, base_url: str = RELEASE_URL) -> str:
    """How to place the files by hand, in one sentence."""
    other = other_language(pair)
    names = ",".join(release_files(other))
    return (
        f"offline, fetch {base_url.rstrip('/')}/{other}-en/{{{names}}} elsewhere, copy them "
        f"into {os.path.join(directory, DOWNLOAD_DIR)}/ and rerun (see `python -m "
        "datamodules.wmt17 fetch --help`)"
    )


def _in_place(paths: Sequence[str]) -> bool:
    """Every file exists and is not empty (an empty one is what an interrupted copy leaves)."""
    return all(os.path.isfile(p) and os.path.getsize(p) > 0 for p in paths)


def fetch(
    pair: str,
    directory: str,
    base_url: str = RELEASE_URL,
    checksums: dict[str, str] | None = None,
    progress: bool | None = None,
    keep_archives: bool = False,
    timeout: float = 60.0,
    retries: int = 5,
    retry_delay: float = 1.0,
) -> FetchReport:
    """Download, verify and unpack the release of ``pair`` into ``directory`` (once, under a lock).

    Args:
        pair: ``"en-de"``, ``"de-en"``, ... (one release folder serves both directions).
        directory: where the files go (created); a shared filesystem path for a cluster.
        base_url: the release root (a mirror, or a local test server).
        checksums: expected sha256 per release file name (added to :data:`PUBLISHED_SHA256`);
            when the files are already in place, checked against the archives in ``.download/``
            or the manifest (a :class:`FetchError` when neither is there).
        progress: show a progress bar (default: when stderr is a terminal).
        keep_archives: keep the archives this call downloaded in ``.download/`` (default: deleted
            when all is in place; archives placed there by hand are always kept).
        timeout: seconds without data before a connection counts as dead.
        retries: tries in a row that receive nothing, after the first, before giving up on a file
            (HTTP 5xx/408/429, connection errors, a transfer that breaks off; 0: fail at once).
        retry_delay: seconds before the first retry, doubled for each further one (at most
            :data:`MAX_RETRY_DELAY`).

    Raises:
        FetchError: one line naming the problem and the fix; nothing is left under a final name.
        FetchStopped: ctrl-c during a download (a ``KeyboardInterrupt``); the partial file is kept.
    """
    other = other_language(pair)
    directory = os.path.abspath(directory)
    wanted = layout_files(other, directory)
    if _in_place(wanted):
        return _present(pair, directory, wanted, checksums)
    _writable_dir(directory)
    with _fetch_lock(directory, pair):
        if _in_place(wanted):  # another process fetched it while we waited
            return _present(pair, directory, wanted, checksums)
        _remove_stale_temporaries(directory)
        expected = {**PUBLISHED_SHA256, **(checksums or {})}
        downloads = os.path.join(directory, DOWNLOAD_DIR)
        os.makedirs(downloads, exist_ok=True)
        folder = f"{base_url.rstrip('/')}/{other}-en"
        show = sys.stderr.isatty() if progress is None else progress
        received: dict[str, int] = {}
        records: dict[str, dict] = {}
        verified: dict[str, str] = {}
        for name in release_files(other):
            dest = os.path.join(downloads, name)
            received[name] = 0
            if not os.path.exists(dest):
                received[name] = _download(
                    f"{folder}/{name}", dest, show, timeout, retries, retry_delay, pair, directory
                )
                _record_download(downloads, name)
            else:
                log.info("%s: using %s (already downloaded or placed by hand)", pair, dest)
            digest = _sha256(dest)
            if name in expected:
                if digest != expected[name].lower():
                    raise FetchError(
                        f"{name}: sha256 {digest} does not match the expected "
                        f"{expected[name]}; {_discard(downloads, name, folder)}"
                    )
                verified[name] = "download" if received[name] else "archive"
            records[name] = dict(url=f"{folder}/{name}", bytes=os.path.getsize(dest), sha256=digest)
        corpus_other, corpus_en, dev = (os.path.join(downloads, n) for n in release_files(other))
        staged: list[tuple[str, str]] = []  # (temporary, final): renamed only when all are good
        try:
            sets = _unpack(dev, other, directory, staged)
            for src, lang in ((corpus_other, other), (corpus_en, "en")):
                final = os.path.join(directory, f"{PAIR_DEFAULTS[other]['train']}.{lang}")
                _gunzip(src, final, staged)
            missing = [p for p in wanted if p not in {f for _, f in staged}]
            if missing:
                raise FetchError(
                    f"dev.tgz of {folder} has no {', '.join(os.path.basename(p) for p in missing)}"
                    f" (found: {', '.join(sorted(sets)) or 'no <set>.tc.<lang> files'}); pass "
                    "valid_prefix/test_prefix to WMT17DataModule to use the sets it has"
                )
            manifest = dict(
                pair=pair,
                release=folder,
                files=records,
                fetched_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            )
            _write_text(
                os.path.join(directory, MANIFEST), json.dumps(manifest, indent=1) + "\n", staged
            )
            for tmp, final in staged:
                os.replace(tmp, final)
            staged.clear()
        except _Corrupt as exc:
            name = os.path.basename(exc.archive)
            raise FetchError(
                f"{name} is truncated or corrupt ({exc.err}); {_discard(downloads, name, folder)}"
            ) from None
        finally:
            for tmp, _ in staged:
                if os.path.exists(tmp):
                    os.remove(tmp)
        kept = [] if keep_archives else _remove_downloaded(downloads, release_files(other))
        for name in kept:
            log.info("%s: kept %s (placed by hand)", pair, os.path.join(downloads, name))
        log.info("%s: WMT'17 release laid out under %s", pair, directory)
    return FetchReport(pair, directory, "fetched", received, wanted, verified, kept)


def _present(
    pair: str, directory: str, wanted: list[str], checksums: dict[str, str] | None
) -> FetchReport:
    """The layout is complete: nothing to download; ``checksums`` checked as far as possible."""
    report = FetchReport(pair, directory, "present", files=wanted)
    names = [n for n in release_files(other_language(pair)) if n in (checksums or {})]
    if not names:
        return report
    downloads = os.path.join(directory, DOWNLOAD_DIR)
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as fh:
            recorded = {n: r.get("sha256") for n, r in json.load(fh).get("files", {}).items()}
    except (OSError, ValueError, AttributeError):
        recorded = {}
    for name in names:
        archive = os.path.join(downloads, name)
        if os.path.isfile(archive):
            digest, source, where = _sha256(archive), "archive", archive
        elif recorded.get(name):
            digest, source = recorded[name], MANIFEST
            where = f"{os.path.join(directory, MANIFEST)} (recorded when the files were fetched)"
        else:
            raise FetchError(
                f"cannot check --sha256sums for {name}: the files in {directory} are in place but "
                f"{name} is not in {downloads}/ and {MANIFEST} records no sha256 for it (files "
                f"placed by hand?); copy the release archives into {downloads}/ to check them, or "
                "drop --sha256sums"
            )
        if digest != checksums[name].lower():
            raise FetchError(
                f"{name}: sha256 {digest} of {where} does not match the expected {checksums[name]};"
                f" the files in {directory} did not come from that archive: move them away and "
                "run the same command again to fetch the release afresh"
            )
        report.verified[name] = source
    return report


# ------------------------------------------------------------------------------------ lock
@contextlib.contextmanager
def _fetch_lock(directory: str, pair: str) -> Iterator[None]:
    """Exclusive lock on ``<directory>/.fetch.lock``; says so when another fetch holds it.

    The holder writes ``pid <pid> on <host> since <time>`` into the file, so a waiting fetch can
    name it.
    """
    path = os.path.join(directory, LOCK)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.lseek(fd, 0, os.SEEK_SET)
                holder = os.read(fd, 512).decode("utf-8", "replace").strip()
                log.warning(
                    "%s: waiting for another fetch into %s to finish (lock %s held by %s);"
                    " it downloads once for both",
                    pair,
                    directory,
                    path,
                    holder or "another process",
                )
                t0 = time.monotonic()
                fcntl.flock(fd, fcntl.LOCK_EX)
                log.info("%s: lock %s free after %.0f s", pair, path, time.monotonic() - t0)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(
            fd,
            f"pid {os.getpid()} on {socket.gethostname()} since "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(),
        )
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------ download
def _download(
    url: str,
    dest: str,
    progress: bool,
    timeout: float,
    retries: int,
    retry_delay: float,
    pair: str,
    directory: str,
) -> int:
    """``url`` -> ``dest`` through ``dest.part``, resuming it; returns the bytes received."""
    part = dest + ".part"
    received = 0
    log.info(
        "%s: downloading %s%s",
        pair,
        url,
        f" (resuming at {os.path.getsize(part):,} bytes)" if os.path.exists(part) else "",
    )
    t0 = time.perf_counter()
    failures = 0  # tries in a row that received nothing
    waited = 0.0
    try:
        while True:
            try:
                received += _download_once(url, part, progress, timeout, pair, directory)
                break
            except _Retryable as exc:
                received += exc.got
                failures = 1 if exc.got else failures + 1
                if failures > retries:
                    tries = f"{failures} tr{'y' if failures == 1 else 'ies'}"
                    raise FetchError(exc.final(tries, waited, url, part, pair, directory)) from None
                wait = min(retry_delay * 2 ** (failures - 1), MAX_RETRY_DELAY)
                log.warning(
                    "%s: %s; retry %d of %d in %.3g s", pair, exc.what(url), failures, retries, wait
                )
                time.sleep(wait)
                waited += wait
    except KeyboardInterrupt:
        have = os.path.getsize(part) if os.path.exists(part) else 0
        raise FetchStopped(
            f"stopped: {have:,} bytes of {os.path.basename(dest)} kept in {part}; "
            "run the same command again to resume"
        ) from None
    os.replace(part, dest)
    secs = time.perf_counter() - t0
    log.info(
        "%s: %s complete, %s bytes (%s received in %.1f s, %.1f MB/s)",
        pair,
        os.path.basename(dest),
        f"{os.path.getsize(dest):,}",
        f"{received:,}",
        secs,
        received / 1e6 / max(secs, 1e-9),
    )
    return received


class _Retryable(Exception):
    """A failure worth another try: a server error, a connection problem, a transfer cut short."""

    def __init__(
        self, kind: str, reason: str, have: int = 0, total: int | None = None, got: int = 0
    ) -> None:
        super().__init__(reason)
        self.kind, self.reason, self.have, self.total, self.got = kind, reason, have, total, got

    def what(self, url: str) -> str:
        if self.kind == "http":
            return f"{self.reason} from {url}"
        if self.kind == "connect":
            return f"cannot reach {url} ({self.reason})"
        return (
            f"download of {url} broke off at {self.have:,} of "
            f"{'?' if self.total is None else format(self.total, ',')} bytes ({self.reason})"
        )

    def final(
        self, tries: str, waited: float, url: str, part: str, pair: str, directory: str
    ) -> str:
        hint = hand_placement_hint(pair, directory, _release_root(url))
        after = f"after {tries} over {waited:.0f} s"
        if self.kind == "http":
            return (
                f"{self.reason} for {url} {after}: the server is failing, not the address; "
                f"try again later or use a mirror with --base-url (release_url); {hint}"
            )
        if self.kind == "connect":
            return (
                f"cannot reach {url} ({self.reason}) {after}: check the network or proxy, or "
                f"use --base-url (release_url) for a mirror; {hint}"
            )
        return (
            f"{self.what(url)} {after}; the partial file {part} is kept: run the same command "
            "again to resume"
        )


def _transient(reason: object) -> bool:
    """A connection failure that may pass (refused, reset, timed out, DNS busy), not an unknown
    host name or a bad certificate."""
    if isinstance(reason, socket.gaierror):
        return reason.errno == socket.EAI_AGAIN
    return isinstance(reason, OSError) and not isinstance(reason, ssl.SSLCertVerificationError)


def _download_once(
    url: str, part: str, progress: bool, timeout: float, pair: str, directory: str
) -> int:
    have = os.path.getsize(part) if os.path.exists(part) else 0
    headers = {"User-Agent": "memattn-sweeps-wmt17-fetch"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416 and have:  # nothing left to send from offset `have`
            total = re.fullmatch(r"bytes \*/(\d+)", exc.headers.get("Content-Range", "") or "")
            if total and int(total.group(1)) == have:
                return 0  # the part is already whole (a run stopped before renaming it)
            os.remove(part)  # longer than the file: not a prefix of it (changed upstream?)
            return _download_once(url, part, progress, timeout, pair, directory)
        if exc.code in _RETRY_STATUS:
            raise _Retryable("http", f"HTTP {exc.code} {exc.reason}") from None
        hint = hand_placement_hint(pair, directory, _release_root(url))
        if exc.code in (404, 410):
            raise FetchError(
                f"HTTP {exc.code} {exc.reason} for {url}: check --base-url "
                f"(release_url) and the pair; {hint}"
            ) from None
        raise FetchError(
            f"HTTP {exc.code} {exc.reason} for {url}: the server refuses the request "
            f"(access rules or a proxy?); {hint}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if _transient(reason):
            raise _Retryable("connect", str(reason)) from None
        hint = hand_placement_hint(pair, directory, _release_root(url))
        raise FetchError(
            f"cannot reach {url} ({reason}): check the network or proxy, or use "
            f"--base-url (release_url) for a mirror; {hint}"
        ) from None
    with resp:
        total = _total_size(resp, have)
        if resp.status != 206:  # the server ignored the Range header: start over
            have = 0
        if total is not None:
            _check_space(os.path.dirname(part), total - have, url)
        bar = _progress_bar(os.path.basename(part)[: -len(".part")], total, have, progress)
        try:
            with open(part, "ab" if have else "wb") as fh:
                _receive(resp, fh, part, bar, have, total)
                got = fh.tell() - have
        finally:
            bar(None)
    size = os.path.getsize(part)
    if total is not None and size < total:
        raise _Retryable("break", "connection closed early", size, total, got)
    if total is not None and size > total:
        os.remove(part)
        raise FetchError(
            f"{url}: got {size:,} bytes but the server announced {total:,}; the "
            "partial file was deleted: run the same command again"
        )
    return got


def _receive(
    resp, fh, part: str, bar: Callable[[int | None], None], have: int, total: int | None
) -> None:
    """Append the body to ``fh`` as it arrives, each piece flushed at once: a reset, a timeout or
    ctrl-c leaves every received byte in the file, and the next try resumes from its size."""
    chunk = b""
    mark = fh.tell()
    try:
        while True:
            chunk = b""
            mark = fh.tell()
            try:
                chunk = resp.read1(CHUNK)  # what has arrived, up to CHUNK: never waits for more
            except (http.client.HTTPException, OSError) as exc:
                raise _Retryable(
                    "break", type(exc).__name__, fh.tell(), total, fh.tell() - have
                ) from None
            if not chunk:
                return
            _write(fh, chunk, part)
            fh.flush()
            bar(len(chunk))
    except KeyboardInterrupt:
        if chunk and fh.tell() == mark:  # read but not yet written when ctrl-c came
            _write(fh, chunk, part)
        raise


def _release_root(url: str) -> str:
    return url.rsplit("/", 2)[0]


def _total_size(resp, have: int) -> int | None:
    if resp.status == 206:
        match = re.match(r"bytes (\d+)-\d+/(\d+)", resp.headers.get("Content-Range", ""))
        if match and int(match.group(1)) == have:
            return int(match.group(2))
        return None
    length = resp.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def _progress_bar(
    name: str, total: int | None, initial: int, show: bool
) -> Callable[[int | None], None]:
    """``update(n)`` adds n bytes; ``update(None)`` closes. A no-op when not shown."""
    if not show:
        return lambda n: None
    from tqdm import tqdm  # a dependency of lightning

    bar = tqdm(
        total=total,
        initial=initial,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=name,
        file=sys.stderr,
        leave=True,
    )
    return lambda n: bar.close() if n is None else bar.update(n)


def _check_space(folder: str, needed: int, what: str) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise FetchError(
            f"not enough space for {what}: {needed / 1e6:,.0f} MB needed, "
            f"{free / 1e6:,.0f} MB free on the filesystem of {folder}; free space or "
            "fetch to another --to (data_dir)"
        )


def _write(fh, data: bytes, path: str) -> None:
    try:
        fh.write(data)
    except OSError as exc:
        raise _disk_error(exc, path) from None


def _disk_error(exc: OSError, path: str) -> FetchError:
    if exc.errno in _DISK_FULL:
        return FetchError(
            f"cannot write {path}: {os.strerror(exc.errno)} (disk full or a quota/"
            "file-size limit); free space or fetch to another --to (data_dir), then run the "
            "same command again (finished downloads are kept)"
        )
    return FetchError(
        f"cannot write {path}: {exc.strerror or exc}; check the permissions of "
        f"{os.path.dirname(path)} or fetch to another --to (data_dir)"
    )


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------------------------ archives
def _downloaded(downloads: str) -> dict[str, dict]:
    """Archives this command downloaded into ``downloads``: name -> size and mtime."""
    try:
        with open(os.path.join(downloads, DOWNLOADED), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def _record_download(downloads: str, name: str) -> None:
    st = os.stat(os.path.join(downloads, name))
    records = {**_downloaded(downloads), name: dict(bytes=st.st_size, mtime_ns=st.st_mtime_ns)}
    tmp = os.path.join(downloads, DOWNLOADED + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(records, fh)
    os.replace(tmp, os.path.join(downloads, DOWNLOADED))


def _ours(downloads: str, name: str) -> bool:
    """``name`` is the very file this command downloaded (not one placed or replaced by hand)."""
    record = _downloaded(downloads).get(name)
    try:
        st = os.stat(os.path.join(downloads, name))
    except OSError:
        return False
    return record == dict(bytes=st.st_size, mtime_ns=st.st_mtime_ns)


def _discard(downloads: str, name: str, folder: str) -> str:
    """Delete a bad archive this command downloaded (never one placed by hand); what to do next."""
    path = os.path.join(downloads, name)
    if _ours(downloads, name):
        os.remove(path)
        return (
            f"it was deleted: run the same command again to download it afresh, or check the "
            f"mirror {folder} (or copy an intact one into {downloads}/)"
        )
    return (
        f"{path} was placed by hand and is kept: replace it with an intact copy of "
        f"{folder}/{name} (or delete it to have it downloaded) and run the same command again"
    )


def _remove_downloaded(downloads: str, names: Sequence[str]) -> list[str]:
    """Delete the archives this command downloaded; returns the others (placed by hand, kept)."""
    kept = []
    for name in names:
        path = os.path.join(downloads, name)
        if _ours(downloads, name):
            os.remove(path)
        elif os.path.exists(path):
            kept.append(name)
    records = {n: r for n, r in _downloaded(downloads).items() if n not in names}
    if records:
        with open(os.path.join(downloads, DOWNLOADED), "w", encoding="utf-8") as fh:
            json.dump(records, fh)
    elif os.path.exists(os.path.join(downloads, DOWNLOADED)):
        os.remove(os.path.join(downloads, DOWNLOADED))
    with contextlib.suppress(OSError):
        os.rmdir(downloads)  # only when empty
    return kept


# ------------------------------------------------------------------------------------ unpack
def _temporary(final: str) -> str:
    return os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.tmp-{os.getpid()}")


class _Corrupt(Exception):
    """An archive failed its check while unpacking; :func:`fetch` decides whether to delete it."""

    def __init__(self, archive: str, err: BaseException) -> None:
        super().__init__(str(err))
        self.archive, self.err = archive, err


def _copy_stream(
    read: Callable[[int], bytes], final: str, archive: str, staged: list[tuple[str, str]]
) -> None:
    """Copy a decompressing stream to a hidden temporary of ``final``, recorded in ``staged``."""
    tmp = _temporary(final)
    staged.append((tmp, final))
    with open(tmp, "wb") as out:
        while True:
            try:
                block = read(CHUNK)
            except (OSError, EOFError, zlib.error, tarfile.TarError) as err:
                raise _Corrupt(archive, err) from None
            if not block:
                break
            _write(out, block, final)


def _gunzip(archive: str, final: str, staged: list[tuple[str, str]]) -> None:
    with gzip.open(archive, "rb") as fh:
        _copy_stream(fh.read, final, archive, staged)


def _unpack(archive: str, other: str, directory: str, staged: list[tuple[str, str]]) -> list[str]:
    """Every ``<set>.tc.<lang>`` member of dev.tgz (lang = en or ``other``) -> ``<set>.<lang>``."""
    try:  # the whole gzip stream first: CRC and length catch a truncated or damaged archive
        with gzip.open(archive, "rb") as fh:
            while fh.read(CHUNK):
                pass
        tar = tarfile.open(archive, "r:gz")
    except (OSError, EOFError, zlib.error, tarfile.TarError) as err:
        raise _Corrupt(archive, err) from None
    names = []
    with tar:
        try:
            members = tar.getmembers()
        except (OSError, EOFError, zlib.error, tarfile.TarError) as err:
            raise _Corrupt(archive, err) from None
        for member in members:
            match = _DEV_MEMBER.match(os.path.basename(member.name))
            if not member.isfile() or not match or match.group(2) not in (other, "en"):
                continue
            name = f"{match.group(1)}.{match.group(2)}"
            stream = tar.extractfile(member)
            _copy_stream(stream.read, os.path.join(directory, name), archive, staged)
            names.append(name)
    return names


def _write_text(path: str, text: str, staged: list[tuple[str, str]]) -> None:
    tmp = _temporary(path)
    staged.append((tmp, path))
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise _disk_error(exc, path) from None


def _remove_stale_temporaries(directory: str) -> None:
    """Temporaries of a killed fetch (we hold the lock, so no live fetch owns them)."""
    for name in os.listdir(directory):
        if name.startswith(".") and ".tmp-" in name:
            os.remove(os.path.join(directory, name))


def _writable_dir(directory: str) -> None:
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise FetchError(f"{directory} is a file, not a folder; choose another --to (data_dir)")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise FetchError(
            f"cannot create {directory}: {exc.strerror or exc}; choose another --to (data_dir)"
        ) from None
    if not os.access(directory, os.W_OK):
        raise FetchError(
            f"{directory} is not writable; choose another --to (data_dir) or fix its permissions"
        )


# ------------------------------------------------------------------------------------ command line
def read_sha256sums(path: str) -> dict[str, str]:
    """``sha256sum`` output (``<hex>  <name>`` per line) -> {name: hex}; a ValueError naming the
    first line that is not one (or a file that is not text)."""
    out = {}
    with open(path, encoding="utf-8") as fh:
        try:
            lines = fh.read().splitlines()
        except UnicodeDecodeError:
            raise ValueError(
                "not a text file; give `sha256sum` output: <hex>  <name> per line"
            ) from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or not re.fullmatch(r"[0-9a-fA-F]{64}", parts[0]):
            raise ValueError(
                f"line {number} is not `<64 hex digits>  <file name>` (`sha256sum` output): "
                f"{line.strip()[:60]!r}"
            )
        digest, name = parts
        out[os.path.basename(name.strip().lstrip("*"))] = digest.lower()
    return out


def files_per_pair() -> str:
    """The help's table: the files each pair needs in DIR, and the release files behind them."""
    rows = [
        "Files per pair: what WMT17DataModule reads in DIR (the names to use when placing files",
        "by hand), and the release files at <base-url>/<xx>-en/ they come from:",
        "",
    ]
    for other in sorted(PAIR_DEFAULTS):
        rows.append(
            f"  en-{other}  {' '.join(os.path.basename(p) for p in layout_files(other, ''))}"
        )
        rows.append(f"         from {' '.join(release_files(other))}")
    return "\n".join(rows)


def _http_url(text: str) -> str:
    """``--base-url``: an http(s) URL (a bare host or path reached urllib as "unknown url type")."""
    if not text.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http(s) URL; e.g. {RELEASE_URL} or a mirror's http://HOST/PATH"
        )
    return text


def _at_least_zero(kind: type) -> Any:
    """An argparse type: a number of ``kind`` that is 0 or more (a negative one was taken as 0)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value >= 0:
            raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
        return value

    return parse


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m datamodules.wmt17 fetch ...``; returns the exit status (2 on a FetchError,
    130 on ctrl-c)."""
    parser = argparse.ArgumentParser(
        prog="python -m datamodules.wmt17", description="WMT'17 data for WMT17DataModule."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser(
        "fetch",
        help="download, verify and lay out the preprocessed release of one pair",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__[__doc__.index("The release the paper used") :].rstrip()
        + "\n\n"
        + files_per_pair(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument(
        "--pair", required=True, help="en-cs, en-de, en-fi or en-tr (either direction)"
    )
    cmd.add_argument(
        "--to",
        required=True,
        metavar="DIR",
        help="target folder (the datamodule's data_dir); shared by all nodes on a cluster",
    )
    cmd.add_argument(
        "--base-url",
        type=_http_url,
        default=RELEASE_URL,
        help=f"release root, http(s):// (default {RELEASE_URL})",
    )
    cmd.add_argument(
        "--sha256sums",
        metavar="FILE",
        help="sha256sum-format list of expected checksums of the release files "
        "(also checked when the files are already in place)",
    )
    cmd.add_argument(
        "--keep-archives",
        action="store_true",
        help="keep the downloaded archives in DIR/.download/ after unpacking "
        "(archives placed there by hand are always kept)",
    )
    cmd.add_argument("--no-progress", action="store_true", help="no progress bar")
    cmd.add_argument(
        "--retries",
        type=_at_least_zero(int),
        default=5,
        help="retries after the first try, in a row that receive nothing, before giving up on "
        "a file: HTTP 5xx/408/429, connection errors, broken transfers (default 5)",
    )
    cmd.add_argument(
        "--retry-delay",
        type=_at_least_zero(float),
        default=1.0,
        metavar="SECONDS",
        help="wait before the first retry, doubled for each further one (default 1)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(message)s", stream=sys.stdout
    )  # stderr: errors
    try:
        sums = read_sha256sums(args.sha256sums) if args.sha256sums else None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or exc  # OSError's words, or the line refused
        print(f"error: --sha256sums {args.sha256sums}: {reason}", file=sys.stderr)
        return 2
    try:
        report = fetch(
            args.pair,
            args.to,
            base_url=args.base_url,
            checksums=sums,
            progress=False if args.no_progress else None,
            keep_archives=args.keep_archives,
            retries=args.retries,
            retry_delay=args.retry_delay,
        )
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:  # e.g. a folder it cannot write
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(
            f"interrupted: {exc}"
            if isinstance(exc, FetchStopped)
            else "interrupted: run the same command again to resume (downloads, whole or partial, "
            f"are kept in {os.path.join(os.path.abspath(args.to), DOWNLOAD_DIR)}/)",
            file=sys.stderr,
        )
        return 130
    if report.outcome == "present":
        print(f"{args.pair}: already in place under {report.directory}; nothing downloaded")
    else:
        got = sum(report.received.values())
        print(f"{args.pair}: fetched into {report.directory} ({got / 1e6:,.1f} MB received)")
    if sums is not None:
        how = {
            "download": "as downloaded",
            "archive": f"in {DOWNLOAD_DIR}/",
            MANIFEST: f"as recorded in {MANIFEST} when fetched",
        }
        checked = ", ".join(f"{n} ({how[s]})" for n, s in report.verified.items())
        print(
            f"sha256 matches {args.sha256sums}: {checked}"
            if checked
            else f"note: {args.sha256sums} lists none of "
            f"{', '.join(release_files(other_language(args.pair)))}: nothing checked"
        )
    for path in report.files:
        print(f"  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
