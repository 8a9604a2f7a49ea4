"""The run's secret: one random token per run, the key every server of the run asks for.

Here, in the load generator's layer (below the providers and the engines, which both use it), with the
provider's file API as a Protocol: the generator reads the same file (servebench/load/credentials.py).

Made without asking when a run first needs it (`ensure_run_secret`): `<run dir>/secret/token`, the
directory mode 0700 and the file 0600, created exclusively and never through a link, so another
user can neither read it nor plant one. A resumed run finds the same token in the same place.

The token travels only as a file: copied to every node a run uses through the provider's file API
(`place_secret`: on a node that shares the run directory, nothing is copied; else the directory goes
to the run's scratch directory there, which the provider removes at release). Processes read it from
that file (an engine's key-file flag, a variable a small shell wrapper fills from the file, Ray's
`RAY_AUTH_TOKEN_PATH`), so it is never on a command line, in the plan, a log, the warehouse or a report.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Protocol, Sequence, TypeVar


class NamedNode(Protocol):
    """A node as placing the secret needs it (servebench.config.node.Node is one): its name."""

    @property
    def name(self) -> str: ...


NodeT = TypeVar("NodeT", bound=NamedNode, contravariant=True)


class SecretFiles(Protocol[NodeT]):
    """The part of a provider's file API the secret travels by (servebench.providers.base.NodeFiles)."""

    def shares(self, path: str) -> bool: ...

    def put_tree(self, node: NodeT, local: Path, remote: str) -> None: ...

    def scratch_dir(self, node: NodeT) -> str: ...

SECRET_DIR = "secret"
TOKEN_FILE = "token"
TOKEN_BYTES = 32  # 64 hex digits


class SecretError(RuntimeError):
    pass


def secret_path(run_dir: Path | str) -> Path:
    """Where a run keeps its token: `<run dir>/secret/token`."""
    return Path(run_dir) / SECRET_DIR / TOKEN_FILE


def ensure_run_secret(run_dir: Path | str) -> Path:
    """The run's token file, made if it is not there yet (a new random token); checked if it is: a
    regular file of this user's, one name, readable by nobody else."""
    path = secret_path(run_dir)
    directory = path.parent
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        pass
    _check_private(directory, is_dir=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        _check_private(path, is_dir=False)
        return path
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(TOKEN_BYTES))  # no newline: Ray and llama-server read the file whole
    return path


def _check_private(path: Path, is_dir: bool) -> None:
    info = os.lstat(path)
    kind_ok = stat.S_ISDIR(info.st_mode) if is_dir else stat.S_ISREG(info.st_mode)
    if not kind_ok or info.st_uid != os.getuid() or info.st_mode & 0o077 or (not is_dir and info.st_nlink != 1):
        raise SecretError(f"{path} is not a private {'directory' if is_dir else 'file'} of this user's "
                          f"(mode {stat.filemode(info.st_mode)}, owner {info.st_uid}, {info.st_nlink} names): "
                          "remove it and start the run again")


def read_token(path: Path | str) -> str:
    """The token in a key file (surrounding whitespace stripped); an empty file is refused."""
    token = Path(path).read_text().strip()
    if not token:
        raise SecretError(f"{path} holds no token")
    return token


def node_secret_path(provider: SecretFiles[NodeT], node: NodeT, run_dir: Path | str) -> str:
    """Where the run's token file is on `node`: the run directory's own where the node shares it, else the
    run's scratch directory there."""
    local = secret_path(run_dir)
    if provider.shares(str(local.parent)):
        return str(local)
    return f"{provider.scratch_dir(node).rstrip('/')}/{SECRET_DIR}/{TOKEN_FILE}"


def place_secret(provider: SecretFiles[NodeT], nodes: Sequence[NodeT], run_dir: Path | str) -> str:
    """The run's token on every node of `nodes` (made first if the run has none), at one path on all of
    them, which is returned: what a process there is told to read. A node that does not share the run
    directory gets the secret directory copied into the run's scratch directory (mode kept: 0700, 0600)."""
    local = ensure_run_secret(run_dir)
    paths = {node.name: node_secret_path(provider, node, run_dir) for node in nodes}
    if len(set(paths.values())) > 1:
        raise SecretError(f"the run's token would be at different paths on its nodes ({paths}): every process "
                          "of a server is told one path")
    for node in nodes:
        if paths[node.name] != str(local):
            provider.put_tree(node, local.parent, paths[node.name].rpartition("/")[0])
    return next(iter(paths.values()), str(local))


# Sets each variable named before `--` from the file after it, then runs the rest: a value read on the node,
# never written on a command line (a remote provider puts a process's `env` on its command line).
ENV_FROM_FILES = ('while [ "$1" != -- ]; do IFS= read -r v <"$2" || [ -n "$v" ] || '
                  '{ echo "no value in $2 for $1" >&2; exit 97; }; export "$1=$v"; shift 2; done; shift; exec "$@"')


def env_from_files_argv(env_files: dict[str, str], argv: list[str]) -> list[str]:
    """argv run with each variable of `env_files` set from its file on the node (`/bin/sh` reads the file
    and execs argv, so the process keeps the PID it was started with); argv as is when there are none."""
    if not env_files:
        return list(argv)
    pairs = [item for name, path in sorted(env_files.items()) for item in (name, path)]
    return ["/bin/sh", "-c", ENV_FROM_FILES, "sh", *pairs, "--", *argv]
