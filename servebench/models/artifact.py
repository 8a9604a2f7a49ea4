"""The model a campaign serves: a local directory (Hugging Face layout) or GGUF file, or a
random-weight model of a named shape, generated and cached by spec and seed. How it is generated is the
engine's declaration (`Engine.default_model`, one of the generators here, one per model format):
a Hugging Face directory (numpy and `tokenizers`, servebench/models/hf_model.py; quantized for vLLM's
int8/int4 kernels by servebench/models/hf_quantized.py when `quantization` names one of its formats) or a
GGUF file (numpy and `gguf`, servebench/models/gguf_model.py), all by servebench's own python."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from servebench.config.campaign import GeneratedModelSpec, LocalModelSpec, ModelSpec, sha256_json
from servebench.models import gguf_model, hf_model, hf_quantized

GGUF_NAME = "model.gguf"


class ModelError(Exception):
    pass


@dataclass(frozen=True)
class ModelGenerator:
    """How an engine's default model is made from `model: {generate: tiny-llama, ...}`: its format,
    where it lives in the cache (keyed by the spec and the generator's code: a change to the code must
    not reuse old weights) and what writes it. Engines declare one (`Engine.default_model`)."""

    format: str                                            # a model format word: 'hf', 'gguf'
    key_prefix: str                                        # the cache directory's name before the key
    file_name: str | None                                  # the model is this file in its directory (None: the dir)
    code_digest: Callable[[], str]                         # the generator's source, part of the key
    write: Callable[[GeneratedModelSpec, str, Path], None]  # (spec, engine python, into this new directory)
    unused_fields: frozenset[str] = frozenset()             # spec fields this format ignores: not in the key
    # what a variant adds to the key (a quantized format and its writer's code); {}: nothing, the key as before
    key_variant: Callable[[GeneratedModelSpec], dict[str, str]] | None = None

    def cache_key(self, spec: GeneratedModelSpec) -> str:
        fields = spec.model_dump(mode="json", exclude=set(self.unused_fields))
        payload: dict[str, object] = {"spec": fields, "code": self.code_digest()}
        if self.key_variant is not None and (variant := self.key_variant(spec)):
            payload["variant"] = variant
        digest = sha256_json(payload)
        return f"{self.key_prefix}-{digest[:16]}"

    def path(self, spec: GeneratedModelSpec, cache: Path) -> Path:
        """Where the generated model lives in the cache: a directory, or a file in one."""
        directory = cache / "models" / self.cache_key(spec)
        return directory / self.file_name if self.file_name else directory

    def ensure(self, spec: GeneratedModelSpec, engine_python: str, cache: Path) -> Path:
        """The model, generated first if the cache lacks it. Written into a directory of its own (nodes
        get a model as a directory tree, placed by digest), renamed into place once complete."""
        out = self.path(spec, cache)
        directory = out.parent if self.file_name else out
        if out.is_file() if self.file_name else (out / "servebench-model.json").exists():
            return out
        tmp = directory.with_name(directory.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            self.write(spec, engine_python, tmp)
        except Exception:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(directory, ignore_errors=True)
        tmp.rename(directory)
        return out


def _write_hf(spec: GeneratedModelSpec, engine_python: str, into: Path) -> None:
    """By servebench's own python (numpy and `tokenizers`): no engine venv, any shape, streamed. A quantized
    format (`hf_quantized.FORMATS`) is the unquantized model's directory, generated (or found) in the same
    cache first (`ensure` writes into `<cache>/models/<key>.tmp`), then quantized into `into`."""
    if hf_quantized.is_hf_quantization(spec.quantization):
        source = GENERATED_HF.ensure(spec.model_copy(update={"quantization": None}), engine_python,
                                     into.parent.parent)
        try:
            hf_quantized.write_quantized_model(source, into, str(spec.quantization))
        except Exception as exc:
            raise ModelError(f"writing the {spec.quantization} model from {source} failed: {exc}") from exc
        return
    try:
        hf_model.write_hf_model(spec, into)
    except Exception as exc:
        raise ModelError(f"writing the generated Hugging Face model failed: {exc}") from exc


def _hf_code() -> str:
    """The writer's source, and the versions of numpy (its generators' streams may change between
    versions) and `tokenizers` (it serializes tokenizer.json)."""
    from importlib.metadata import version

    source = hashlib.sha256(Path(hf_model.__file__).read_bytes()).hexdigest()
    return f"{source}-numpy-{version('numpy')}-tokenizers-{version('tokenizers')}"


def _write_gguf(spec: GeneratedModelSpec, engine_python: str, into: Path) -> None:
    """By servebench's own python (numpy and `gguf`): no engine venv needed."""
    into.mkdir(parents=True)
    try:
        gguf_model.write_gguf(spec, into / GGUF_NAME)
    except Exception as exc:
        raise ModelError(f"writing the generated GGUF failed: {exc}") from exc


def _gguf_code() -> str:
    """The writer's source and the `gguf` package's version (its quantizers make the bytes)."""
    from importlib.metadata import version

    source = hashlib.sha256(Path(gguf_model.__file__).read_bytes()).hexdigest()
    return f"{source}-gguf-{version('gguf')}"


def _hf_variant(spec: GeneratedModelSpec) -> dict[str, str]:
    """A quantized Hugging Face format is another directory, keyed by the format and the quantizer's source
    (its code changes only the quantized copies, never the unquantized model's key)."""
    if not hf_quantized.is_hf_quantization(spec.quantization):
        return {}
    source = hashlib.sha256(Path(hf_quantized.__file__).read_bytes()).hexdigest()
    return {"quantization": str(spec.quantization), "quantizer": source}


# A Hugging Face directory with a tokenizer of the model's vocabulary; a GGUF file (the same weights' shapes)
# a GGUF quantization does not change a Hugging Face directory: variants that differ only there share one; a
# Hugging Face quantized format (w8a8, w4a16, gptq, awq) is a variant of its own
GENERATED_HF = ModelGenerator("hf", "generated-hf", None, _hf_code, _write_hf, frozenset({"quantization"}),
                              _hf_variant)
GENERATED_GGUF = ModelGenerator("gguf", "generated-gguf", GGUF_NAME, _gguf_code, _write_gguf)


def _local_path(spec: LocalModelSpec, base_dir: Path | None) -> Path:
    path = Path(spec.path).expanduser()
    return base_dir / path if not path.is_absolute() and base_dir is not None else path


def ensure_model(spec: ModelSpec, engine_python: str, cache: Path, base_dir: Path | None = None,
                 generator: ModelGenerator = GENERATED_HF) -> Path:
    """Return the model directory (or GGUF file), generating it first by the engine's `generator` if needed."""
    if isinstance(spec, LocalModelSpec):
        path = _local_path(spec, base_dir)
        if path.suffix.lower() == ".gguf":
            if not path.is_file():
                raise ModelError(f"model.path {path}: no such GGUF file")
            return path
        if not (path / "config.json").exists():
            raise ModelError(f"model.path {path} has no config.json")
        return path
    return generator.ensure(spec, engine_python, cache)


def model_tree(model_path: Path) -> Path:
    """The directory placed on the nodes for a model: the model's directory, or a GGUF file's."""
    return model_path.parent if model_path.suffix.lower() == ".gguf" else model_path


def vocab_size(model_dir: Path) -> int:
    """The vocabulary size the load generator draws token ids from."""
    if model_dir.suffix.lower() == ".gguf":
        return gguf_model.gguf_vocab_size(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    return int(config.get("text_config", config)["vocab_size"])
