"""The model a campaign serves: a local directory (Hugging Face layout) or GGUF file, or a tiny
random-weight Llama that is generated and cached by config and seed: as a Hugging Face
directory by the engine venv's python (which has torch), or as a GGUF file by servebench's own
(numpy and `gguf`, servebench/build/tiny_gguf.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from servebench.build import tiny_gguf
from servebench.build.venv import source_digest
from servebench.campaign.schema import GeneratedModelSpec, LocalModelSpec, ModelSpec, sha256_json


GGUF_NAME = "model.gguf"


class ModelError(Exception):
    pass


def model_cache_key(spec: GeneratedModelSpec, fmt: str = "hf") -> str:
    # The generator's source is part of the key: a change to it must not reuse old weights.
    if fmt == "gguf":
        code = hashlib.sha256(Path(tiny_gguf.__file__).read_bytes()).hexdigest()
        return f"tiny-gguf-{sha256_json({'spec': spec.model_dump(mode='json'), 'code': code})[:16]}"
    return f"tiny-llama-{sha256_json({'spec': spec.model_dump(mode='json'), 'code': source_digest()})[:16]}"


def generated_model_path(spec: GeneratedModelSpec, cache: Path, fmt: str = "hf") -> Path:
    """Where the generated model lives in the cache: a directory (hf), or a .gguf file in one."""
    directory = cache / "models" / model_cache_key(spec, fmt)
    return directory / GGUF_NAME if fmt == "gguf" else directory


def _local_path(spec: LocalModelSpec, base_dir: Path | None) -> Path:
    path = Path(spec.path).expanduser()
    return base_dir / path if not path.is_absolute() and base_dir is not None else path


def ensure_model(spec: ModelSpec, engine_python: str, cache: Path, base_dir: Path | None = None,
                 fmt: str = "hf") -> Path:
    """Return the model directory (or GGUF file), generating it first if needed."""
    if isinstance(spec, LocalModelSpec):
        path = _local_path(spec, base_dir)
        if path.suffix.lower() == ".gguf":
            if not path.is_file():
                raise ModelError(f"model.path {path}: no such GGUF file")
            return path
        if not (path / "config.json").exists():
            raise ModelError(f"model.path {path} has no config.json")
        return path
    if fmt == "gguf":
        return _ensure_gguf(spec, cache)
    out = generated_model_path(spec, cache, "hf")
    if (out / "servebench-model.json").exists():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    config = spec.model_dump(mode="json", exclude={"generate", "dtype"})
    result = subprocess.run(
        [engine_python, "-m", "servebench_engine.tiny_llama", "--out", str(tmp), "--config", json.dumps(config)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    if result.returncode != 0:
        raise ModelError(f"generating the tiny Llama failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def _ensure_gguf(spec: GeneratedModelSpec, cache: Path) -> Path:
    """The file in a directory of its own: nodes get a model as a directory tree (placed by digest)."""
    out = generated_model_path(spec, cache, "gguf")
    if out.is_file():
        return out
    tmp = out.parent.with_name(out.parent.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        tiny_gguf.write_tiny_gguf(spec, tmp / GGUF_NAME)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelError(f"writing the tiny GGUF failed: {exc}") from exc
    shutil.rmtree(out.parent, ignore_errors=True)
    tmp.rename(out.parent)
    return out


def model_tree(model_path: Path) -> Path:
    """The directory placed on the nodes for a model: the model's directory, or a GGUF file's."""
    return model_path.parent if model_path.suffix.lower() == ".gguf" else model_path


def vocab_size(model_dir: Path) -> int:
    """The vocabulary size the load generator draws token ids from."""
    if model_dir.suffix.lower() == ".gguf":
        return tiny_gguf.gguf_vocab_size(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    return int(config.get("text_config", config)["vocab_size"])
