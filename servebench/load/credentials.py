"""The API key a process sends to the servers it measures: `Authorization: Bearer <key>`.

The key is only ever read from a file (a run's token file, `servebench load --api-key-file PATH`) or from an
environment variable the user names (`--api-key-env NAME`), never taken from a command line, and never
written anywhere: a load config carries the file's path or the variable's name, not the key.

A process registers where its key is for the servers it talks to (`use_key`, by host and port: a load
config's base URL, its metrics URLs and health URL). Every request this process then makes to them carries
the header: the streaming client's requests (`Endpoint`, servebench/load/http.py) and every
`urllib.request.urlopen` of the process (a handler installed once: the token counter's /metrics reads, the
health probe, the telemetry scraper). Requests to any other host carry nothing.
"""

from __future__ import annotations

import os
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

# What the orchestrator's own helper processes (the telemetry scraper) are told the run's token file is.
KEY_FILE_VARIABLE = "SERVEBENCH_API_KEY_FILE"


class CredentialError(RuntimeError):
    pass


@dataclass(frozen=True)
class KeySource:
    """Where a key is: a file, or an environment variable of this process (one of the two)."""

    file: str | None = None
    env: str | None = None

    def read(self) -> str:
        if self.file is not None:
            try:
                key = Path(self.file).read_text().strip()
            except OSError as exc:
                raise CredentialError(f"the API key file {self.file}: {exc.strerror or exc}") from None
            where = f"the API key file {self.file}"
        elif self.env is not None:
            key = os.environ.get(self.env, "").strip()
            where = f"the environment variable {self.env}"
        else:
            raise CredentialError("no API key source")
        if not key:
            raise CredentialError(f"{where} holds no key")
        return key


_lock = threading.Lock()
_sources: dict[str, KeySource] = {}       # 'host:port' -> where its key is
_keys: dict[str, str] = {}                # 'host:port' -> the key, read at first use
_installed: urllib.request.OpenerDirector | None = None   # the opener with the handler, once installed


def _netloc(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 80}"


def use_key(urls: list[str], source: KeySource) -> None:
    """Send the key from `source` with every request of this process to these servers (read when first sent)."""
    global _installed
    with _lock:
        for url in urls:
            netloc = _netloc(url)
            if _sources.get(netloc) != source:
                _sources[netloc] = source
                _keys.pop(netloc, None)
        # installed again if another opener took its place since (urllib keeps one per process)
        if _installed is None or getattr(urllib.request, "_opener", None) is not _installed:
            _installed = urllib.request.build_opener(_BearerHandler())
            urllib.request.install_opener(_installed)


def authorization(url: str, strict: bool = True) -> str | None:
    """The `Authorization` header's value for a request to `url` ('Bearer <key>'), or None: no key for it.
    A key that cannot be read raises CredentialError (not `strict`: None, and the server's 401 says it)."""
    netloc = _netloc(url)
    with _lock:
        source = _sources.get(netloc)
        if source is None:
            return None
        if netloc not in _keys:
            try:
                _keys[netloc] = source.read()
            except CredentialError:
                if strict:
                    raise
                return None
        return f"Bearer {_keys[netloc]}"


def forget_keys() -> None:
    """No key for any server any more (tests; a process that measured one run and goes on to another)."""
    with _lock:
        _sources.clear()
        _keys.clear()


class _BearerHandler(urllib.request.BaseHandler):
    """Adds the header to urllib's requests to a server with a key (unless the caller set one)."""

    handler_order = 400

    def http_request(self, request: urllib.request.Request) -> urllib.request.Request:
        value = authorization(request.full_url, strict=False)
        if value is not None and not request.has_header("Authorization"):
            request.add_unredirected_header("Authorization", value)
        return request

    https_request = http_request
