"""The Vega, Vega-Lite and vega-embed libraries as one script, made once per vl-convert version.

`vl_convert.javascript_bundle()` takes seconds (it bundles the libraries with Deno) and its output
depends only on vl-convert's version, while every run renders a report: the bundle is kept in the
process and in the cache directory, and a page puts its own calls in a script of their own.
"""

from __future__ import annotations

import functools
import os
from importlib.metadata import version
from pathlib import Path

import vl_convert as vlc

from servebench.paths import cache_dir


def bundle_path() -> Path:
    """Where the bundle of the installed vl-convert is kept: beside the other tools (`servebench builds list`)."""
    return cache_dir() / "tools" / f"vega-bundle-{version('vl-convert-python')}.js"


@functools.cache
def vega_bundle() -> str:
    """The libraries, with `vegaEmbed` put on `window`, for a `<script type="module">` that comes
    before the page's calls."""
    path = bundle_path()
    try:
        return path.read_text()
    except OSError:
        pass
    text = vlc.javascript_bundle("window.vegaEmbed = vegaEmbed;")
    try:  # a cache that cannot be written costs the next report its seconds, nothing else
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_text(text)
        partial.replace(path)
    except OSError:
        pass
    return text
