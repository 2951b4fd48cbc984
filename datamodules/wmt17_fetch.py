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

* downloads go to ``<to>/.download/<name>.part`` and are resumed with an HTTP Range request when a
  call is interrupted (run the same command again); a finished download is renamed to
  ``<to>/.download/<name>``; its size is checked against the server's Content-Length, its sha256
  against ``--sha256sums`` when given (the release publishes no checksum file that we found; the
  figures we computed are recorded in ``wmt17-fetch.json`` so a site can pin them);
* archives are checked end to end (gzip CRC and length, tar structure) while they are unpacked to
  hidden temporary names, and only renamed to their final names when complete: a failure at any
  point (no network, HTTP error, truncated or corrupt archive, full disk) leaves no half-written
  file under a final name and prints one line saying what to do;
* a file lock in ``<to>`` makes concurrent calls on one shared filesystem download once: the
  others wait and find the files there;
* when every file ``WMT17DataModule`` reads is already present, nothing is downloaded.

Air-gapped cluster: on a machine with internet, download the three files of the pair (e.g.
``wget <base-url>/de-en/{corpus.tc.de.gz,corpus.tc.en.gz,dev.tgz}``), copy them into
``<to>/.download/`` on the cluster and run the same fetch command there: files already present are
verified and unpacked, never downloaded. Or place ``train.*`` and the dev/test files by hand under
the names above.
"""
from __future__ import annotations

import argparse
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
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zlib
from typing import Callable, Optional, Sequence

from .bpe import file_lock

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
CHUNK = 1 << 20
_DEV_MEMBER = re.compile(r"^(news[a-z]+\d{4})\.tc\.([a-z]{2})$")
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class FetchError(FileNotFoundError):
    """The data could not be fetched; the message is one line that says what to do."""


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


def other_language(pair: str) -> str:
    """The non-English side of ``pair`` (``"en-de"`` or ``"de-en"`` -> ``"de"``); checks the pair."""
    langs = pair.split("-")
    if len(langs) != 2 or "en" not in langs or langs[0] == langs[1]:
        raise FetchError(f"pair must be English with one of {', '.join(sorted(PAIR_DEFAULTS))}, "
                         f"e.g. 'en-de' or 'de-en'; got {pair!r}")
    other = langs[1] if langs[0] == "en" else langs[0]
    if other not in PAIR_DEFAULTS:
        raise FetchError(f"the WMT'17 release has no pair {pair!r} in this study; valid: "
                         f"{', '.join(f'en-{x}' for x in sorted(PAIR_DEFAULTS))} (either direction)")
    return other


def release_files(other: str) -> tuple[str, str, str]:
    """Names of the release files of the ``<other>-en`` folder: two corpora and ``dev.tgz``."""
    return f"corpus.tc.{other}.gz", "corpus.tc.en.gz", "dev.tgz"


def layout_files(other: str, directory: str) -> list[str]:
    """The files ``WMT17DataModule`` reads with its default prefixes, under ``directory``."""
    prefixes = PAIR_DEFAULTS[other]
    return [os.path.join(directory, f"{prefixes[split]}.{lang}")
            for split in ("train", "valid", "test") for lang in (other, "en")]


def hand_placement_hint(pair: str, directory: str, base_url: str = RELEASE_URL) -> str:
    """How to place the files by hand, in one sentence."""
    other = other_language(pair)
    names = ",".join(release_files(other))
    return (f"offline, fetch {base_url.rstrip('/')}/{other}-en/{{{names}}} elsewhere, copy them "
            f"into {os.path.join(directory, DOWNLOAD_DIR)}/ and rerun (see `python -m "
            "datamodules.wmt17 fetch --help`)")


def fetch(
    pair: str,
    directory: str,
    base_url: str = RELEASE_URL,
    checksums: Optional[dict[str, str]] = None,
    progress: Optional[bool] = None,
    keep_archives: bool = False,
    timeout: float = 60.0,
    retries: int = 3,
) -> FetchReport:
    """Download, verify and unpack the release of ``pair`` into ``directory`` (once, under a lock).

    Args:
        pair: ``"en-de"``, ``"de-en"``, ... (one release folder serves both directions).
        directory: where the files go (created); a shared filesystem path for a cluster.
        base_url: the release root (a mirror, or a local test server).
        checksums: expected sha256 per release file name (added to :data:`PUBLISHED_SHA256`).
        progress: show a progress bar (default: when stderr is a terminal).
        keep_archives: keep ``.download/`` after unpacking (default: removed when all is in place).
        timeout: seconds without data before a connection counts as dead.
        retries: resumed attempts after a transfer breaks off mid-file (0: fail at once).

    Raises:
        FetchError: one line naming the problem and the fix; nothing is left under a final name.
    """
    other = other_language(pair)
    directory = os.path.abspath(directory)
    wanted = layout_files(other, directory)
    if all(os.path.isfile(p) for p in wanted):
        return FetchReport(pair, directory, "present", files=wanted)
    _writable_dir(directory)
    with file_lock(os.path.join(directory, ".fetch.lock")):
        if all(os.path.isfile(p) for p in wanted):  # another process fetched it while we waited
            return FetchReport(pair, directory, "present", files=wanted)
        _remove_stale_temporaries(directory)
        expected = {**PUBLISHED_SHA256, **(checksums or {})}
        downloads = os.path.join(directory, DOWNLOAD_DIR)
        os.makedirs(downloads, exist_ok=True)
        folder = f"{base_url.rstrip('/')}/{other}-en"
        show = sys.stderr.isatty() if progress is None else progress
        received: dict[str, int] = {}
        records: dict[str, dict] = {}
        for name in release_files(other):
            dest = os.path.join(downloads, name)
            received[name] = 0
            if not os.path.exists(dest):
                received[name] = _download(f"{folder}/{name}", dest, show, timeout, retries, pair,
                                           directory)
            else:
                log.info("%s: using %s (already downloaded or placed by hand)", pair, dest)
            digest = _sha256(dest)
            if name in expected and digest != expected[name].lower():
                os.remove(dest)
                raise FetchError(
                    f"{name}: sha256 {digest} does not match the expected {expected[name]}; the "
                    f"file was deleted: rerun to download it again, or check the mirror {folder}")
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
                    "valid_prefix/test_prefix to WMT17DataModule to use the sets it has")
            manifest = dict(pair=pair, release=folder, files=records,
                            fetched_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            _write_text(os.path.join(directory, MANIFEST), json.dumps(manifest, indent=1) + "\n",
                        staged)
            for tmp, final in staged:
                os.replace(tmp, final)
            staged.clear()
        finally:
            for tmp, _ in staged:
                if os.path.exists(tmp):
                    os.remove(tmp)
        if not keep_archives:
            shutil.rmtree(downloads, ignore_errors=True)
        log.info("%s: WMT'17 release laid out under %s", pair, directory)
    return FetchReport(pair, directory, "fetched", received, wanted)


# ------------------------------------------------------------------------------------ download
def _download(url: str, dest: str, progress: bool, timeout: float, retries: int, pair: str,
              directory: str) -> int:
    """``url`` -> ``dest`` through ``dest.part``, resuming it; returns the bytes received."""
    part = dest + ".part"
    received = 0
    log.info("%s: downloading %s%s", pair, url,
             f" (resuming at {os.path.getsize(part):,} bytes)" if os.path.exists(part) else "")
    t0 = time.perf_counter()
    for attempt in range(retries + 1):
        try:
            received += _download_once(url, part, progress, timeout, pair, directory)
            break
        except _Interrupted as exc:
            if attempt == retries:
                raise FetchError(
                    f"download of {url} broke off at {exc.have:,} of "
                    f"{'?' if exc.total is None else format(exc.total, ',')} bytes "
                    f"({exc.reason}); the partial file {part} is kept: run the same command again "
                    "to resume") from None
            received += exc.got
            wait = min(2 ** attempt, 30)
            log.warning("download of %s broke off (%s); resuming in %ds", url, exc.reason, wait)
            time.sleep(wait)
    os.replace(part, dest)
    secs = time.perf_counter() - t0
    log.info("%s: %s complete, %s bytes (%s received in %.1f s, %.1f MB/s)", pair,
             os.path.basename(dest), f"{os.path.getsize(dest):,}", f"{received:,}", secs,
             received / 1e6 / max(secs, 1e-9))
    return received


class _Interrupted(Exception):
    def __init__(self, reason: str, have: int, total: Optional[int], got: int) -> None:
        super().__init__(reason)
        self.reason, self.have, self.total, self.got = reason, have, total, got


def _download_once(url: str, part: str, progress: bool, timeout: float, pair: str,
                   directory: str) -> int:
    have = os.path.getsize(part) if os.path.exists(part) else 0
    headers = {"User-Agent": "memattn-sweeps-wmt17-fetch"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # nothing left to send from offset `have`
            total = re.fullmatch(r"bytes \*/(\d+)", exc.headers.get("Content-Range", "") or "")
            if total and int(total.group(1)) == have:
                return 0  # the part is already whole (a run stopped before renaming it)
            os.remove(part)  # longer than the file: not a prefix of it (changed upstream?)
            return _download_once(url, part, progress, timeout, pair, directory)
        hint = hand_placement_hint(pair, directory, _release_root(url))
        raise FetchError(f"HTTP {exc.code} {exc.reason} for {url}: check --base-url (release_url) "
                         f"and the pair; {hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        hint = hand_placement_hint(pair, directory, _release_root(url))
        raise FetchError(f"cannot reach {url} ({getattr(exc, 'reason', exc)}): check the network "
                         f"or proxy, or use --base-url (release_url) for a mirror; {hint}") from None
    with resp:
        total = _total_size(resp, have)
        if resp.status != 206:  # the server ignored the Range header: start over
            have = 0
        if total is not None:
            _check_space(os.path.dirname(part), total - have, url)
        bar = _progress_bar(os.path.basename(part)[: -len(".part")], total, have, progress)
        got = 0
        try:
            with open(part, "ab" if have else "wb") as fh:
                while True:
                    try:
                        chunk = resp.read(CHUNK)
                    except (http.client.HTTPException, socket.timeout, ConnectionError) as exc:
                        raise _Interrupted(type(exc).__name__, have + got, total, got) from None
                    if not chunk:
                        break
                    _write(fh, chunk, part)
                    got += len(chunk)
                    bar(len(chunk))
        finally:
            bar(None)
    size = os.path.getsize(part)
    if total is not None and size < total:
        raise _Interrupted("connection closed early", size, total, got)
    if total is not None and size > total:
        os.remove(part)
        raise FetchError(f"{url}: got {size:,} bytes but the server announced {total:,}; the "
                         "partial file was deleted: run the same command again")
    return got


def _release_root(url: str) -> str:
    return url.rsplit("/", 2)[0]


def _total_size(resp, have: int) -> Optional[int]:
    if resp.status == 206:
        match = re.match(r"bytes (\d+)-\d+/(\d+)", resp.headers.get("Content-Range", ""))
        if match and int(match.group(1)) == have:
            return int(match.group(2))
        return None
    length = resp.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def _progress_bar(name: str, total: Optional[int], initial: int,
                  show: bool) -> Callable[[Optional[int]], None]:
    """``update(n)`` adds n bytes; ``update(None)`` closes. A no-op when not shown."""
    if not show:
        return lambda n: None
    from tqdm import tqdm  # a dependency of lightning

    bar = tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024,
               desc=name, file=sys.stderr, leave=True)
    return lambda n: bar.close() if n is None else bar.update(n)


def _check_space(folder: str, needed: int, what: str) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise FetchError(f"not enough space for {what}: {needed / 1e6:,.0f} MB needed, "
                         f"{free / 1e6:,.0f} MB free on the filesystem of {folder}; free space or "
                         "fetch to another --to (data_dir)")


def _write(fh, data: bytes, path: str) -> None:
    try:
        fh.write(data)
    except OSError as exc:
        raise _disk_error(exc, path) from None


def _disk_error(exc: OSError, path: str) -> FetchError:
    if exc.errno in _DISK_FULL:
        return FetchError(f"cannot write {path}: {os.strerror(exc.errno)} (disk full or a quota/"
                          "file-size limit); free space or fetch to another --to (data_dir), then run the "
                          "same command again (finished downloads are kept)")
    return FetchError(f"cannot write {path}: {exc.strerror or exc}; check the permissions of "
                      f"{os.path.dirname(path)} or fetch to another --to (data_dir)")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------------------------ unpack
def _temporary(final: str) -> str:
    return os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.tmp-{os.getpid()}")


def _corrupt(archive: str, err: BaseException) -> FetchError:
    os.remove(archive)
    return FetchError(f"{os.path.basename(archive)} is truncated or corrupt ({err}); it was deleted: "
                      "run the same command again to download it afresh (or copy an intact one "
                      f"into {os.path.dirname(archive)}/)")


def _copy_stream(read: Callable[[int], bytes], final: str, archive: str,
                 staged: list[tuple[str, str]]) -> None:
    """Copy a decompressing stream to a hidden temporary of ``final``, recorded in ``staged``."""
    tmp = _temporary(final)
    staged.append((tmp, final))
    with open(tmp, "wb") as out:
        while True:
            try:
                block = read(CHUNK)
            except (OSError, EOFError, zlib.error, tarfile.TarError) as err:
                raise _corrupt(archive, err) from None
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
        raise _corrupt(archive, err) from None
    names = []
    with tar:
        try:
            members = tar.getmembers()
        except (OSError, EOFError, zlib.error, tarfile.TarError) as err:
            raise _corrupt(archive, err) from None
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
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise FetchError(f"cannot create {directory}: {exc.strerror or exc}; choose another --to "
                         "(data_dir)") from None
    if not os.access(directory, os.W_OK):
        raise FetchError(f"{directory} is not writable; choose another --to (data_dir) or fix its "
                         "permissions")


# ------------------------------------------------------------------------------------ command line
def read_sha256sums(path: str) -> dict[str, str]:
    """``sha256sum`` output (``<hex>  <name>`` per line) -> {name: hex}."""
    out = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                digest, name = line.split(maxsplit=1)
                out[os.path.basename(name.strip().lstrip("*"))] = digest.lower()
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m datamodules.wmt17 fetch ...``; returns the exit status (2 on a FetchError)."""
    parser = argparse.ArgumentParser(
        prog="python -m datamodules.wmt17",
        description="WMT'17 data for WMT17DataModule.")
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser(
        "fetch", help="download, verify and lay out the preprocessed release of one pair",
        description=__doc__.split("\n\n")[0], epilog=__doc__[__doc__.index("How it behaves"):],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("--pair", required=True, help="en-cs, en-de, en-fi or en-tr (either direction)")
    cmd.add_argument("--to", required=True, metavar="DIR",
                     help="target folder (the datamodule's data_dir); shared by all nodes on a cluster")
    cmd.add_argument("--base-url", default=RELEASE_URL, help=f"release root (default {RELEASE_URL})")
    cmd.add_argument("--sha256sums", metavar="FILE",
                     help="sha256sum-format list of expected checksums of the release files")
    cmd.add_argument("--keep-archives", action="store_true",
                     help="keep the downloaded archives in DIR/.download/ after unpacking")
    cmd.add_argument("--no-progress", action="store_true", help="no progress bar")
    cmd.add_argument("--retries", type=int, default=3,
                     help="resumed attempts when a transfer breaks off (default 3)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)  # stderr: errors
    try:
        sums = read_sha256sums(args.sha256sums) if args.sha256sums else None
        report = fetch(args.pair, args.to, base_url=args.base_url, checksums=sums,
                       progress=False if args.no_progress else None,
                       keep_archives=args.keep_archives, retries=max(0, args.retries))
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:  # e.g. an unreadable --sha256sums file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if report.outcome == "present":
        print(f"{args.pair}: already in place under {report.directory}; nothing downloaded")
    else:
        got = sum(report.received.values())
        print(f"{args.pair}: fetched into {report.directory} ({got / 1e6:,.1f} MB received)")
    for path in report.files:
        print(f"  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
