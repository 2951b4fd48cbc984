"""Print the pip option that lets `make venv` take torch from a CPU wheel index, or nothing.

    python3 requirements/torch_index.py --pip .venv/bin/pip -c requirements/cpu.txt -- URL

The Makefile passes ``TORCH_INDEX`` as URL (PyTorch's CPU index on Linux x86-64) and puts what
this prints on the line that installs torch. Prints ``--extra-index-url URL`` when the index
answers, so pip sees its builds beside the public index's and takes the newest: ``2.13.0+cpu``
sorts above the public index's ``2.13.0``, a CUDA build on Linux. Prints nothing, with one line
on stderr saying why, when:

- URL is empty (`make venv TORCH_INDEX=`, or a platform the Makefile has no index for);
- the index does not answer within ``--timeout`` seconds, or has no torch page: torch then comes
  from the public index. One request, not pip's retries of every package page it would ask the
  index for (minutes where the index's host cannot be reached);
- pip's own configuration (``--find-links`` folders, as on a machine with local wheels) already
  offers the very wheel file the index would serve: pip would otherwise prefer the index's copy
  of that file and download it again.

Standard library only (it runs with the Python that makes the venv), apart from ``--pip``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: a wheel file name on an index page (PEP 503: the anchors' targets)
WHEEL_HREF = re.compile(r'href="([^"#]+\.whl)(?:#[^"]*)?"')


def torch_page(url: str, timeout: float) -> tuple[str | None, str]:
    """The index's torch page (PEP 503), or None and why not, after one request of at most
    ``timeout`` seconds."""
    page = url.rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(page, timeout=timeout) as reply:  # noqa: S310 (the user's URL)
            return reply.read().decode("utf-8", "replace"), "answered"
    except urllib.error.HTTPError as exc:
        return None, f"{page} answered {exc.code}"
    except (OSError, ValueError) as exc:  # URLError, timeouts, refused connections, bad URLs
        reason = getattr(exc, "reason", exc)
        return None, f"{page} unreachable within {timeout:g} s ({reason})"


def wheel_names(page: str) -> set[str]:
    """The wheel file names an index page links to."""
    return {unquote(Path(urlsplit(href).path).name) for href in WHEEL_HREF.findall(page)}


def local_torch(pip: str, constraints: list[str]) -> str | None:
    """The wheel file pip would install torch from without any index (its ``--find-links``
    folders only, under ``constraints``), or None."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [pip, "install", "--dry-run", "--no-index", "--no-deps", "--ignore-installed"]
        command += ["--quiet", "--report", str(report), *constraints, "torch"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not report.exists():
            return None
        items = json.loads(report.read_text()).get("install", [])
    urls = [i["download_info"]["url"] for i in items if i["metadata"]["name"].lower() == "torch"]
    return unquote(Path(urlsplit(urls[0]).path).name) if urls else None


def choose(url: str, timeout: float, pip: str | None, constraints: list[str]) -> tuple[str, str]:
    """(what to print, why) for the torch index ``url``."""
    if not url:
        return "", "no torch index (TORCH_INDEX is empty): torch from pip's own sources"
    page, why = torch_page(url, timeout)
    if page is None:
        return (
            "",
            f"{why}: left out, torch from pip's own sources (its configured index and links; "
            "the public index gives a CUDA build on Linux)",
        )
    local = local_torch(pip, constraints) if pip else None
    if local is not None and local in wheel_names(page):
        return "", f"pip's find-links already hold {local}, which {url} serves: taken from there"
    return f"--extra-index-url {url}", f"torch from {url} where it has a build for this machine"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", default="", help="the CPU wheel index (TORCH_INDEX)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds for the one request")
    parser.add_argument("--pip", help="the venv's pip, to ask which wheel its find-links hold")
    parser.add_argument("-c", dest="constraints", action="append", default=[], help="pip -c")
    args = parser.parse_args(argv)
    constraints = [x for c in args.constraints for x in ("-c", c)]
    option, why = choose(args.url, args.timeout, args.pip, constraints)
    print(f"torch: {why}", file=sys.stderr)
    print(option)
    return 0


if __name__ == "__main__":
    sys.exit(main())
