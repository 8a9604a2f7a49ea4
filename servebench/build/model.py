"""The model a campaign serves: a local directory, or a tiny random-weight Llama that is
generated (by the engine venv's python, which has torch) and cached by config and seed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from servebench.build.venv import source_digest
from servebench.campaign.schema import GeneratedModelSpec, LocalModelSpec, ModelSpec, sha256_json


class ModelError(Exception):
    pass


def model_cache_key(spec: GeneratedModelSpec) -> str:
    # The generator's source is part of the key: a change to it must not reuse old weights.
    return f"tiny-llama-{sha256_json({'spec': spec.model_dump(mode='json'), 'code': source_digest()})[:16]}"


def ensure_model(spec: ModelSpec, engine_python: str, cache: Path, base_dir: Path | None = None) -> Path:
    """Return the model directory, generating it first if needed."""
    if isinstance(spec, LocalModelSpec):
        path = Path(spec.path).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not (path / "config.json").exists():
            raise ModelError(f"model.path {path} has no config.json")
        return path
    out = cache / "models" / model_cache_key(spec)
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


def vocab_size(model_dir: Path) -> int:
    config = json.loads((model_dir / "config.json").read_text())
    return int(config.get("text_config", config)["vocab_size"])
