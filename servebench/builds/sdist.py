"""A pinned requirement's sdist, taken from the package index pip is configured with: the source of
a `cmake` build (llama-cpp-python's vendored llama.cpp) and of a `wheel` build (vLLM).

Read from the index's project page and checked against its sha256, not `pip download`: pip prepares
an sdist's metadata in an isolated build first, which for vLLM means importing torch and for
llama-cpp-python installing scikit-build-core and CMake into a throwaway environment (6.5 minutes on
a fresh machine here, for a file the build then unpacks itself).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

from packaging.utils import canonicalize_name

from servebench.builds.cache import file_sha256
from servebench.builds.venv import BuildError
from servebench.offline import refuse_download

DEFAULT_INDEX = "https://pypi.org/simple"


def index_url() -> str:
    """pip's index as this host configures it (PIP_INDEX_URL, `pip config`), else PyPI."""
    if url := os.environ.get("PIP_INDEX_URL"):
        return url
    done = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else DEFAULT_INDEX


def sdist_links(page: str, name: str, version: str) -> list[tuple[str, str | None]]:
    """(href, sha256 or None) of `<name>-<version>.tar.gz` on a PEP 503 project page (pure)."""
    found = []
    for href in re.findall(r'href="([^"]+)"', page):
        url, _, fragment = href.partition("#")
        filename = url.rsplit("/", 1)[-1]
        stem = filename.removesuffix(".tar.gz")
        if filename.endswith(".tar.gz") and "-" in stem:
            project, _, found_version = stem.rpartition("-")
            if canonicalize_name(project) == canonicalize_name(name) and found_version == version:
                digest = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
                found.append((url, digest))
    return found


def fetch_sdist(requirement: str, cache: Path, log: Callable[[str], None] = print) -> Path:
    """The sdist of a pinned requirement, taken from the package index's project page into
    `<cache>/sources/<name>-<version>/` (once) and checked against the index's sha256."""
    name, _, version = requirement.partition("==")
    name, version = name.strip(), version.strip()
    folder = cache / "sources" / f"{name}-{version}"
    found = sorted(folder.glob("*.tar.gz")) if folder.exists() else []
    if found:
        return found[0]
    refuse_download(f"the sdist {requirement}")
    index = index_url().rstrip("/")
    page_url = f"{index}/{canonicalize_name(name)}/"
    try:  # a file:// index (a local mirror) is a directory per project with its index.html, as pip reads it
        with urllib.request.urlopen(page_url + ("index.html" if page_url.startswith("file:") else ""),
                                    timeout=60) as response:
            page = response.read().decode("utf-8", "replace")
    except OSError as error:
        raise BuildError(f"could not read the index page {page_url} for {requirement}: {error}") from error
    links = sdist_links(page, name, version)
    if not links:
        raise BuildError(f"the index {index} has no sdist for {requirement} ({page_url})")
    href, digest = links[0]
    url = urllib.parse.urljoin(page_url, href)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / url.rsplit("/", 1)[-1]
    partial = target.with_suffix(".part")
    log(f"downloading the sdist {requirement} from {url}")
    try:
        with urllib.request.urlopen(url, timeout=600) as response, open(partial, "wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise BuildError(f"could not download {url}: {error}") from error
    if digest is not None and file_sha256(partial) != digest:
        partial.unlink()
        raise BuildError(f"{url}: sha256 is not the index's {digest}")
    partial.rename(target)
    return target
