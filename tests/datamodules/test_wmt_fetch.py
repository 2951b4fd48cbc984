"""`python -m datamodules.wmt17 fetch` against a real HTTP server on 127.0.0.1.

The server serves a miniature WMT'17 preprocessed release in the real layout (``de-en/corpus.tc.
{de,en}.gz`` and a flat ``de-en/dev.tgz`` of ``news<set><year>.tc.<lang>`` files plus ``.sgm``
originals), built here from the shipped slice tests/data/wmt-ende-tiny. It honours Range requests,
counts the bytes it sends per file, can answer with an HTTP error, cut a response mid-file (FIN or
RST), hold it after some bytes, and can be slowed down.
"""

from __future__ import annotations

import collections
import gzip
import hashlib
import io
import json
import logging
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from datamodules.wmt17_fetch import (
    LOCK,
    MANIFEST,
    FetchError,
    _fetch_lock,
    fetch,
    layout_files,
    main,
    release_files,
)

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "wmt-ende-tiny"
CORPUS_DE = "/de-en/corpus.tc.de.gz"
CORPUS_EN = "/de-en/corpus.tc.en.gz"
DEV = "/de-en/dev.tgz"
LAYOUT = [
    "train.de",
    "train.en",
    "newstest2015.de",
    "newstest2015.en",
    "newstest2016.de",
    "newstest2016.en",
]


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _tgz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _lines(name: str) -> list[bytes]:
    return (TINY / name).read_bytes().splitlines(keepends=True)


def expected_layout() -> dict[str, bytes]:
    """What the fetch must write: the slice's training pairs, its 50 valid pairs split 25/25."""
    out = {f"train.{lang}": (TINY / f"train.{lang}").read_bytes() for lang in ("de", "en")}
    for lang in ("de", "en"):
        valid = _lines(f"valid.{lang}")
        out[f"newstest2015.{lang}"] = b"".join(valid[:25])
        out[f"newstest2016.{lang}"] = b"".join(valid[25:])
    return out


def miniature_release() -> dict[str, bytes]:
    """URL path -> bytes, in the release's layout."""
    layout = expected_layout()
    dev = {
        f"{s}.tc.{lang}": layout[f"{s}.{lang}"]
        for s in ("newstest2015", "newstest2016")
        for lang in ("de", "en")
    }
    dev["newstest2015-deen-src.de.sgm"] = b'<srcset setid="newstest2015">\n</srcset>\n'
    dev["newstest2014.tc.de"] = b"ein Satz .\n"  # another dev set: laid out too
    dev["newstest2014.tc.en"] = b"a sentence .\n"
    dev["newstest2015.tc.fr"] = b"hors sujet\n"  # not a language of the pair: skipped
    return {CORPUS_DE: _gz(layout["train.de"]), CORPUS_EN: _gz(layout["train.en"]), DEV: _tgz(dev)}


class ReleaseServer:
    """A threaded HTTP/1.1 file server with Range support, byte counts and fault injection."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = dict(files)
        self.sent: collections.Counter[str] = collections.Counter()  # body bytes actually written
        self.gets: collections.Counter[str] = collections.Counter()
        self.ranges: list[tuple[str, str]] = []
        self.cut: dict[str, int] = {}  # path -> close the next response after this many bytes
        self.reset: dict[str, int] = {}  # path -> the same, but with a TCP RST after a pause
        self.hold: dict[str, int] = {}  # path -> stop sending after this many bytes, until close()
        self.fail: dict[str, list[int]] = {}  # path -> HTTP statuses to answer first, in order
        self.delay = 0.0  # seconds per 4 KiB chunk
        self.released = threading.Event()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                data = server.files.get(self.path)
                with server.lock:
                    server.gets[self.path] += 1
                if data is None:
                    self.send_error(404, "Not Found")
                    return
                if server.fail.get(self.path):
                    self.send_error(server.fail[self.path].pop(0))
                    return
                start = 0
                rng = self.headers.get("Range")
                if rng:
                    server.ranges.append((self.path, rng))
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                limit, how = server.cut.pop(self.path, None), "cut"
                if limit is None:
                    limit, how = server.reset.pop(self.path, None), "reset"
                if limit is None:
                    limit, how = server.hold.pop(self.path, None), "hold"
                pos = start
                while pos < len(data):
                    end = min(pos + 4096, len(data))
                    if limit is not None:
                        end = min(end, start + limit)
                    self.wfile.write(data[pos:end])
                    with server.lock:
                        server.sent[self.path] += end - pos
                    pos = end
                    if limit is not None and pos >= start + limit:
                        self.wfile.flush()
                        if how == "hold":
                            server.released.wait(60)
                        elif how == "reset":  # the client has read it all by then: RST, not FIN
                            time.sleep(0.3)
                            self.connection.setsockopt(
                                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                            )
                            self.connection.close()
                        else:
                            self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                    if server.delay:
                        time.sleep(server.delay)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        # a short poll interval: shutdown() waits for the loop's next look (0.5 s by default)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def release() -> dict[str, bytes]:
    return miniature_release()


@pytest.fixture
def server(release):
    srv = ReleaseServer(release)
    yield srv
    srv.close()


def final_files(directory: Path) -> list[str]:
    """Non-hidden files: what a reader would take for data."""
    return (
        sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))
        if directory.exists()
        else []
    )


def hidden_temporaries(directory: Path) -> list[str]:
    return (
        sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name)
        if directory.exists()
        else []
    )


def test_full_fetch_lays_out_what_the_datamodule_reads(server, release, tmp_path):
    out = tmp_path / "en-de"
    report = fetch("en-de", str(out), base_url=server.url, progress=False)
    assert report.outcome == "fetched"
    expected = expected_layout()
    for name, data in expected.items():
        assert (out / name).read_bytes() == data, name
    assert (out / "newstest2014.de").read_bytes() == b"ein Satz .\n"
    assert not (out / "newstest2015.fr").exists() and not list(out.glob("*.sgm"))
    assert report.received == {n.rsplit("/", 1)[1]: len(release[n]) for n in release}
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["files"]["dev.tgz"]["sha256"] == hashlib.sha256(release[DEV]).hexdigest()
    assert manifest["files"]["corpus.tc.de.gz"]["bytes"] == len(release[CORPUS_DE])
    assert not (out / ".download").exists() and not hidden_temporaries(out)
    gets = sum(server.gets.values())
    again = fetch("de-en", str(out), base_url=server.url)  # the other direction: same release
    assert again.outcome == "present" and sum(server.gets.values()) == gets  # no request at all


def test_interrupted_download_resumes_without_fetching_bytes_twice(server, release, tmp_path):
    out = tmp_path / "en-de"
    size = len(release[CORPUS_DE])
    server.cut[CORPUS_DE] = size // 3
    with pytest.raises(FetchError, match="run the same command again to resume") as err:
        fetch("en-de", str(out), base_url=server.url, retries=0)
    assert "\n" not in str(err.value)
    part = out / ".download" / "corpus.tc.de.gz.part"
    assert part.stat().st_size == size // 3
    assert final_files(out) == []  # nothing under a final name
    report = fetch("en-de", str(out), base_url=server.url, retries=0)
    assert report.outcome == "fetched" and report.received["corpus.tc.de.gz"] == size - size // 3
    assert server.ranges == [(CORPUS_DE, f"bytes={size // 3}-")]
    assert server.sent[CORPUS_DE] == size  # every byte crossed the wire exactly once
    assert (out / "train.de").read_bytes() == expected_layout()["train.de"]


def test_broken_transfer_is_resumed_within_one_call(server, release, tmp_path):
    size = len(release[CORPUS_EN])
    server.cut[CORPUS_EN] = size // 2
    report = fetch(
        "en-de", str(tmp_path), base_url=server.url, retries=1, retry_delay=0, progress=True
    )
    assert report.outcome == "fetched" and server.gets[CORPUS_EN] == 2
    assert server.sent[CORPUS_EN] == size
    assert (tmp_path / "train.en").read_bytes() == expected_layout()["train.en"]


@pytest.mark.parametrize(
    "path,damage",
    [
        (DEV, "flip"),  # bytes changed mid-archive: gzip CRC
        (CORPUS_EN, "truncate"),  # the served file itself is cut short (Content-Length agrees)
    ],
)
def test_corrupt_archive_is_rejected_and_nothing_lands(release, tmp_path, path, damage):
    data = bytearray(release[path])
    if damage == "flip":
        mid = len(data) // 2
        data[mid : mid + 64] = bytes(b ^ 0xFF for b in data[mid : mid + 64])
    else:
        del data[len(data) * 2 // 3 :]
    srv = ReleaseServer({**release, path: bytes(data)})
    try:
        with pytest.raises(FetchError, match="truncated or corrupt") as err:
            fetch("en-de", str(tmp_path), base_url=srv.url)
    finally:
        srv.close()
    name = path.rsplit("/", 1)[1]
    assert name in str(err.value) and "run the same command again" in str(err.value)
    assert final_files(tmp_path) == [] and not hidden_temporaries(tmp_path)
    assert not (tmp_path / ".download" / name).exists()  # the bad copy is gone: a rerun refetches


# Runs in a bare interpreter (the fetch module needs no torch): waits until both racers are
# ready, so they really start together, then fetches and prints the outcome.
_RACER = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from datamodules.wmt17_fetch import fetch
out, base, ready_dir, me = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
open(os.path.join(ready_dir, me), "w").close()
while len(os.listdir(ready_dir)) < 2:
    time.sleep(0.002)
report = fetch("en-de", out, base_url=base, progress=False)
print(json.dumps([report.outcome, sum(report.received.values())]))
"""


@pytest.mark.train
def test_two_processes_at_once_download_once(server, release, tmp_path):
    server.delay = 0.01  # ~30 chunks: the first fetch is still downloading when the second starts
    ready = tmp_path / "ready"
    ready.mkdir()
    out = tmp_path / "shared"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(ROOT), str(out), server.url, str(ready), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    finished = [(p.communicate(timeout=120), p.returncode) for p in procs]
    assert all(server.gets[path] == 1 for path in release), server.gets  # each requested once
    assert [code for _, code in finished] == [0, 0], [err for (_, err), _ in finished]
    results = [json.loads(out) for (out, _), _ in finished]
    assert sorted(r[0] for r in results) == ["fetched", "present"]
    assert sum(server.sent.values()) == sum(len(d) for d in release.values())
    assert final_files(out) == sorted(LAYOUT + ["newstest2014.de", "newstest2014.en", MANIFEST])


def _cli(module: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", module, "fetch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


def test_http_404_gives_one_clear_line(server, tmp_path):
    res = _cli(
        "datamodules.wmt17",
        "--pair",
        "en-fi",
        "--to",
        str(tmp_path / "fi"),
        "--base-url",
        server.url,
        "--no-progress",
    )  # the miniature release has no fi-en
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith("error: HTTP 404") and f"{server.url}/fi-en/" in lines[0]
    assert "offline" in lines[0] and ".download" in lines[0]  # how to place the files by hand
    assert final_files(tmp_path / "fi") == []
    assert server.gets["/fi-en/corpus.tc.fi.gz"] == 1  # a wrong address is not retried


def test_unreachable_host_gives_one_clear_line(tmp_path):
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    res = _cli(
        "datamodules.wmt17_fetch",
        "--pair",
        "en-tr",
        "--to",
        str(tmp_path / "tr"),
        "--base-url",
        f"http://127.0.0.1:{port}/wmt17",
        "--no-progress",
        "--retries",
        "2",
        "--retry-delay",
        "0.01",
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith(f"error: cannot reach http://127.0.0.1:{port}/wmt17/tr-en/")
    assert "after 3 tries" in lines[0]  # a refused connection is retried
    assert [ln.rsplit(";", 1)[1] for ln in res.stdout.splitlines() if "retry" in ln] == [
        " retry 1 of 2 in 0.01 s",
        " retry 2 of 2 in 0.02 s",
    ]
    assert "refused" in lines[0].lower() and "--base-url" in lines[0] and "offline" in lines[0]
    assert final_files(tmp_path / "tr") == []


def _limit_file_size() -> None:  # runs in the child: writes past 64 KB fail with EFBIG
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64_000, 64_000))


def test_full_disk_leaves_no_half_written_file(server, release, tmp_path):
    assert max(len(d) for d in release.values()) < 64_000 < len(expected_layout()["train.de"])
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from datamodules.wmt17_fetch import main; sys.exit(main(sys.argv[2:]))"
    )
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(ROOT),
            "fetch",
            "--pair",
            "en-de",
            "--to",
            str(tmp_path),
            "--base-url",
            server.url,
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size,
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "disk full" in lines[0] and "run the same command again" in lines[0]
    assert final_files(tmp_path) == [] and not hidden_temporaries(tmp_path)
    kept = sorted(p.name for p in (tmp_path / ".download").iterdir() if not p.name.startswith("."))
    assert kept == ["corpus.tc.de.gz", "corpus.tc.en.gz", "dev.tgz"]  # downloads survive
    gets = sum(server.gets.values())
    fetch("en-de", str(tmp_path), base_url=server.url)  # with room: no byte downloaded again
    assert sum(server.gets.values()) == gets
    assert (tmp_path / "train.de").read_bytes() == expected_layout()["train.de"]


def test_archives_placed_by_hand_are_used_offline(release, tmp_path):
    """The air-gapped recipe: copy the release files into DIR/.download/, run fetch, no network."""
    (tmp_path / ".download").mkdir()
    for path, data in release.items():
        (tmp_path / ".download" / path.rsplit("/", 1)[1]).write_bytes(data)
    report = fetch("en-de", str(tmp_path), base_url="http://127.0.0.1:9/unreachable")
    assert report.outcome == "fetched" and sum(report.received.values()) == 0
    assert (tmp_path / "newstest2016.en").read_bytes() == expected_layout()["newstest2016.en"]
    assert report.kept == ["corpus.tc.de.gz", "corpus.tc.en.gz", "dev.tgz"]  # never deleted
    for path, data in release.items():
        assert (tmp_path / ".download" / path.rsplit("/", 1)[1]).read_bytes() == data


def test_a_whole_part_file_left_by_a_stopped_run_is_not_downloaded_again(server, release, tmp_path):
    (tmp_path / ".download").mkdir()
    (tmp_path / ".download" / "dev.tgz.part").write_bytes(release[DEV])  # stopped before the rename
    report = fetch("en-de", str(tmp_path), base_url=server.url)
    assert report.received["dev.tgz"] == 0 and server.sent[DEV] == 0
    assert server.ranges == [(DEV, f"bytes={len(release[DEV])}-")]  # answered 416 with the size
    assert (tmp_path / "newstest2015.en").read_bytes() == expected_layout()["newstest2015.en"]


def test_checksum_mismatch_is_rejected(server, tmp_path):
    with pytest.raises(FetchError, match="does not match the expected"):
        fetch("en-de", str(tmp_path), base_url=server.url, checksums={"dev.tgz": "0" * 64})
    assert final_files(tmp_path) == []


def test_help_lists_the_file_names_of_every_pair(capsys):
    """`--help` says to place files by hand under their names: it must list them, per pair."""
    with pytest.raises(SystemExit) as done:
        main(["fetch", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for other in ("cs", "de", "fi", "tr"):
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"en-{other} "))
        assert line.split()[1:] == [os.path.basename(p) for p in layout_files(other, "")]
        assert " ".join(release_files(other)) in text
    assert "newsdev2016.tr" in text and "names above" not in text


def test_the_commands_bad_options_are_refused_before_anything_is_fetched(tmp_path, capsys):
    """A negative --retries or --retry-delay was taken as 0; a --base-url without http(s):// got
    urllib's "unknown url type" after the first download began; a --to that is a file said
    "cannot create ...: File exists"."""
    for option, said in [
        (["--retries", "-1"], "argument --retries: must be 0 or more, got -1"),
        (["--retry-delay", "-3"], "argument --retry-delay: must be 0 or more, got -3"),
        (
            ["--base-url", "mirror/wmt17"],
            "argument --base-url: 'mirror/wmt17' is not an http(s) URL",
        ),
    ]:
        with pytest.raises(SystemExit) as done:
            main(["fetch", "--pair", "en-de", "--to", str(tmp_path / "d"), *option])
        assert done.value.code == 2 and said in capsys.readouterr().err, option
    assert not (tmp_path / "d").exists(), "nothing made before the options were checked"
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    assert main(["fetch", "--pair", "en-de", "--to", str(afile)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {afile} is a file, not a folder; choose another --to (data_dir)"
    )


def test_sha256sums_are_checked_when_the_files_are_already_in_place(
    server, release, tmp_path, capsys
):
    sums = {n.rsplit("/", 1)[1]: hashlib.sha256(d).hexdigest() for n, d in release.items()}
    fetch("en-de", str(tmp_path), base_url=server.url, checksums=sums)
    layout = {name: (tmp_path / name).read_bytes() for name in LAYOUT}
    gets = sum(server.gets.values())
    again = fetch("en-de", str(tmp_path), base_url=server.url, checksums=sums)
    assert again.outcome == "present" and again.verified == dict.fromkeys(sums, MANIFEST)
    wrong = {**sums, "dev.tgz": "0" * 64}
    with pytest.raises(
        FetchError,
        match=r"dev\.tgz: sha256 \w+ of .*wmt17-fetch\.json .*does not "
        "match the expected 0{64}.*move them away",
    ):
        fetch("en-de", str(tmp_path), base_url=server.url, checksums=wrong)
    assert {name: (tmp_path / name).read_bytes() for name in LAYOUT} == layout  # untouched
    sums_file = tmp_path.parent / f"{tmp_path.name}.sha256"
    sums_file.write_text("".join(f"{d}  {n}\n" for n, d in sums.items()))
    assert (
        main(
            [
                "fetch",
                "--pair",
                "en-de",
                "--to",
                str(tmp_path),
                "--base-url",
                server.url,
                "--sha256sums",
                str(sums_file),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "nothing downloaded" in out
        and "sha256 matches" in out
        and "dev.tgz (as recorded in wmt17-fetch.json when fetched)" in out
    )
    assert sum(server.gets.values()) == gets  # checked without a request
    # a sums file that is not there: named as the option ("[Errno 2] No such file" alone had been)
    missing = ["fetch", "--pair", "en-de", "--to", str(tmp_path), "--sha256sums", "/nonexistent"]
    assert main(missing) == 2
    assert "error: --sha256sums /nonexistent: No such file" in capsys.readouterr().err
    # nor one that is not sha256sum's output: a line of another shape, or bytes that are not text
    # (each was a traceback, or taken as a checksum of a file named by its second word)
    bad = tmp_path / "bad.txt"
    for content, said in (
        (b"not a sha line\n", "line 1 is not `<64 hex digits>  <file name>` (`sha256sum` output)"),
        (b"\xff\xfe\x00garbage", "not a text file"),
    ):
        bad.write_bytes(content)
        assert main([*missing[:-1], str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --sha256sums {bad}: {said}") and "Traceback" not in err
    (tmp_path / MANIFEST).unlink()  # now as if placed by hand: nothing to check against
    with pytest.raises(
        FetchError,
        match="cannot check --sha256sums for corpus.tc.de.gz.*placed by hand.*drop --sha256sums",
    ):
        fetch("en-de", str(tmp_path), base_url=server.url, checksums=sums)
    (tmp_path / ".download").mkdir()  # the archives copied back: they are hashed
    for path, data in release.items():
        (tmp_path / ".download" / path.rsplit("/", 1)[1]).write_bytes(data)
    report = fetch("en-de", str(tmp_path), base_url=server.url, checksums=sums)
    assert report.verified == dict.fromkeys(sums, "archive")


def _retry_waits(caplog) -> list[str]:
    return [
        r.getMessage().rsplit(" in ", 1)[1] for r in caplog.records if "; retry " in r.getMessage()
    ]


def test_server_errors_are_retried_with_exponential_backoff(server, release, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="datamodules.wmt17_fetch")
    server.fail[CORPUS_DE] = [503, 502, 500]
    report = fetch("en-de", str(tmp_path), base_url=server.url, retries=3, retry_delay=0.01)
    assert report.outcome == "fetched" and server.gets[CORPUS_DE] == 4
    assert _retry_waits(caplog) == ["0.01 s", "0.02 s", "0.04 s"]
    assert (tmp_path / "train.de").read_bytes() == expected_layout()["train.de"]


def test_a_server_error_that_lasts_does_not_blame_the_address(server, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="datamodules.wmt17_fetch")
    server.fail[CORPUS_DE] = [503] * 10
    with pytest.raises(FetchError) as err:
        fetch("en-de", str(tmp_path), base_url=server.url, retries=2, retry_delay=0.01)
    msg = str(err.value)
    assert msg.startswith(f"HTTP 503 Service Unavailable for {server.url}{CORPUS_DE} after 3 tries")
    assert "the server is failing, not the address" in msg and "check --base-url" not in msg
    assert server.gets[CORPUS_DE] == 3 and _retry_waits(caplog) == ["0.01 s", "0.02 s"]
    assert final_files(tmp_path) == []


@pytest.mark.train
def test_ctrl_c_says_how_to_resume_and_keeps_every_byte_received(server, release, tmp_path):
    """A real SIGINT to the command while it waits for more of corpus.tc.de.gz: one line on
    stderr, status 130, and the partial file holds the 5,000 bytes that had arrived."""
    server.hold[CORPUS_DE] = 5000  # not a multiple of any block size
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "datamodules.wmt17_fetch",
            "fetch",
            "--pair",
            "en-de",
            "--to",
            str(tmp_path),
            "--base-url",
            server.url,
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while server.sent[CORPUS_DE] < 5000 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # the client has read them by now
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    part = tmp_path / ".download" / "corpus.tc.de.gz.part"
    assert proc.returncode == 130 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(
        f"interrupted: stopped: 5,000 bytes of corpus.tc.de.gz kept in {part}; "
        "run the same command again to resume"
    )
    assert part.stat().st_size == 5000
    report = fetch("en-de", str(tmp_path), base_url=server.url)  # the same command again
    assert (CORPUS_DE, "bytes=5000-") in server.ranges
    assert report.received["corpus.tc.de.gz"] == len(release[CORPUS_DE]) - 5000
    assert (tmp_path / "train.de").read_bytes() == expected_layout()["train.de"]


def test_a_reset_connection_resumes_from_the_exact_byte(server, release, tmp_path):
    """A TCP reset after 10,001 bytes: the retry asks for the rest from byte 10,001, and every
    byte crosses the wire once (before the fix, the bytes of the current 1 MiB read were lost)."""
    size = len(release[CORPUS_EN])
    assert size > 10_001
    server.reset[CORPUS_EN] = 10_001
    report = fetch("en-de", str(tmp_path), base_url=server.url, retries=1, retry_delay=0)
    assert server.ranges == [(CORPUS_EN, "bytes=10001-")]
    assert server.sent[CORPUS_EN] == size and report.received["corpus.tc.en.gz"] == size
    assert (tmp_path / "train.en").read_bytes() == expected_layout()["train.en"]


def test_a_fetch_waiting_for_the_lock_says_who_holds_it(server, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="datamodules.wmt17_fetch")
    results = []
    with _fetch_lock(str(tmp_path), "en-de"):  # another fetch at work
        waiter = threading.Thread(
            target=lambda: results.append(fetch("en-de", str(tmp_path), base_url=server.url))
        )
        waiter.start()
        deadline = time.monotonic() + 10
        while (
            not any("waiting for" in r.getMessage() for r in caplog.records)
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        assert sum(server.gets.values()) == 0  # it waits: nothing downloaded yet
    waiter.join(60)
    (line,) = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert f"waiting for another fetch into {tmp_path} to finish" in line
    assert f"lock {tmp_path / LOCK} held by pid {os.getpid()} on {socket.gethostname()}" in line
    assert results[0].outcome == "fetched"


def test_archives_placed_by_hand_are_kept_and_downloaded_ones_removed(server, release, tmp_path):
    """Only what the command downloaded itself is deleted after unpacking."""
    (tmp_path / ".download").mkdir()
    for path in (CORPUS_DE, DEV):
        (tmp_path / ".download" / path.rsplit("/", 1)[1]).write_bytes(release[path])
    report = fetch("en-de", str(tmp_path), base_url=server.url)
    assert report.received == {
        "corpus.tc.de.gz": 0,
        "corpus.tc.en.gz": len(release[CORPUS_EN]),
        "dev.tgz": 0,
    }
    assert report.kept == ["corpus.tc.de.gz", "dev.tgz"]
    assert sorted(p.name for p in (tmp_path / ".download").iterdir()) == [
        "corpus.tc.de.gz",
        "dev.tgz",
    ]
    assert (tmp_path / ".download" / "dev.tgz").read_bytes() == release[DEV]


def test_a_corrupt_archive_placed_by_hand_is_kept_and_named(release, tmp_path):
    (tmp_path / ".download").mkdir()
    for path, data in release.items():
        (tmp_path / ".download" / path.rsplit("/", 1)[1]).write_bytes(data)
    bad = tmp_path / ".download" / "dev.tgz"
    bad.write_bytes(release[DEV][: len(release[DEV]) // 2])
    with pytest.raises(
        FetchError, match="dev.tgz is truncated or corrupt .*placed by hand and is kept: replace it"
    ):
        fetch("en-de", str(tmp_path), base_url="http://127.0.0.1:9/unreachable")
    assert bad.stat().st_size == len(release[DEV]) // 2
    assert final_files(tmp_path) == [] and not hidden_temporaries(tmp_path)


def test_an_empty_file_in_the_layout_is_fetched_again(server, tmp_path):
    fetch("en-de", str(tmp_path), base_url=server.url)
    (tmp_path / "train.de").write_bytes(b"")  # what an interrupted copy leaves
    report = fetch("en-de", str(tmp_path), base_url=server.url)
    assert report.outcome == "fetched"
    assert (tmp_path / "train.de").read_bytes() == expected_layout()["train.de"]


@pytest.mark.train
def test_tiny_model_trains_on_fetched_data_and_reports_bleu(server, tmp_path, quiet_trainer):
    import lightning.pytorch as pl

    from datamodules import WMT17DataModule
    from lightning_modules import Seq2SeqModule

    settings = dict(
        pair="en-de",
        data_dir=str(tmp_path / "wmt17" / "en-de"),
        vocab_size=800,
        max_length=50,
        batch_tokens=1500,
        release_url=server.url,
    )
    with pytest.raises(FileNotFoundError, match="python -m datamodules.wmt17 fetch --pair en-de"):
        WMT17DataModule(**settings).prepare_data()  # download is off by default
    assert sum(server.gets.values()) == 0
    dm = WMT17DataModule(**settings, download=True)
    dm.prepare_data()
    dm.setup("fit")
    assert len(dm.datasets["valid"]) == 25 and dm.prefixes["valid"] == "newstest2015"
    pl.seed_everything(0)
    model = Seq2SeqModule(
        src_vocab_size=dm.src_vocab_size,
        tgt_vocab_size=dm.tgt_vocab_size,
        attention="bahdanau",
        preset="tiny",
        lr=1e-3,
        max_source_len=dm.max_source_len,
    )
    trainer = quiet_trainer(
        max_steps=3, num_sanity_val_steps=0, limit_train_batches=3, use_distributed_sampler=False
    )
    trainer.fit(model, datamodule=dm)
    metrics = trainer.callback_metrics
    assert trainer.global_step == 3
    assert 0.0 <= float(metrics["val/bleu"]) <= 100.0
    assert 0.0 <= float(metrics["val/sacrebleu"]) <= 100.0
    assert (
        model.last_bleu_signature.startswith("nrefs:1") and "tok:13a" in model.last_bleu_signature
    )


def test_the_study_fetches_once_in_the_driver_and_trials_find_the_files(server, release, tmp_path):
    """sweeps/wmt17.yaml with download on: the launcher's one prepare_data pass over the sweep's
    plans (before Ray starts) fetches each pair once; each trial's own prepare_data downloads
    nothing and hits the BPE/token caches."""
    from sweeps.build import build_datamodule, prepare_data
    from sweeps.spec import load_spec

    sweep = load_spec(
        ROOT / "sweeps" / "wmt17.yaml",
        profile="smoke",
        overrides=[
            "task.download=true",
            f"task.release_url={server.url}",
            f"task.data_dir={tmp_path}/wmt17/{{pair}}",
            f"task.cache_dir={tmp_path}/cache",
            "task.valid_prefix=newstest2015",
            "task.test_prefix=newstest2016",
        ],
    )
    tasks = [plan.task for plan in sweep.plans]
    assert len(tasks) == 5 and all(t["download"] is True for t in tasks)
    prepare_data(tasks)  # what sweeps/launch.py runs in the driver
    assert all(server.gets[path] == 1 for path in release)
    dm = build_datamodule(tasks[-1], seed=0)  # what a trial runs
    dm.prepare_data()
    assert set(dm.cache_report.values()) == {"hit"}
    assert sum(server.gets.values()) == len(release)
    assert (tmp_path / "wmt17" / "en-de" / "newstest2016.de").read_bytes() == expected_layout()[
        "newstest2016.de"
    ]


def test_a_sweep_without_a_test_split_is_refused_before_it_trains(tmp_path):
    """wmt17's smoke with ``task.test_prefix=""`` (the 10k sample has no test files) passed the dry
    run, trained every trial, then failed the held-out evaluation of each, exit status 0. The plan
    refuses it, as the dry run and the launch make it; with the held-out stage off it stands."""
    from sweeps.errors import LaunchError
    from sweeps.plan.sweep_plan import build_plan
    from sweeps.spec import load_spec

    def plan(*more):
        sets = ['task.test_prefix=""', f"task.cache_dir={tmp_path}/cache", *more]
        return build_plan(
            load_spec(ROOT / "sweeps" / "wmt17.yaml", profile="smoke", overrides=sets), tmp_path
        )

    with pytest.raises(LaunchError) as info:
        plan()
    assert str(info.value) == (
        "task 'wmt17' has no test split (task.test_prefix is empty), and the held-out stage "
        "evaluates the chosen trials on one after training: set task.test_prefix (e.g. "
        "newstest2016) or heldout.enabled: false"
    )
    assert plan("heldout.enabled=false").sweep.num_trials == 5
