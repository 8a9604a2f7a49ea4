"""What tests/unit/test_your_cluster_doc.py and tests/e2e/test_your_cluster_doc.py share."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


PAGE = ROOT / "docs" / "your-cluster.md"


MARK = re.compile(r"^# your-cluster: (\S+)\n")


SMALLEST = "tiny-slurm.yaml"   # the page's first campaign: one node, one mode, two cells


# an 8B Llama's config.json, for the page's model path (`plan` reads the shape from it)
LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "bfloat16"}


def fenced(language: str) -> list[str]:
    """The page's fenced blocks of a language, in order (indented ones too)."""
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", PAGE.read_text(), re.M | re.S)
    return ["".join(line[len(indent):] + "\n" for line in body.splitlines()) for indent, body in found]


def page_campaigns() -> dict[str, str]:
    """File name -> YAML text of the page's marked campaign blocks."""
    return {match.group(1): text for text in fenced("yaml") if (match := MARK.match(text))}


def page_commands() -> list[list[str]]:
    """Every `servebench ...` line of the page's shell blocks, as argv (comments dropped)."""
    commands = []
    for block in fenced("bash"):
        for line in block.splitlines():
            if line.startswith("servebench "):
                commands.append(shlex.split(line, comments=True))
    return commands


def shared_model(directory: Path) -> Path:
    """The page's /shared/models/... directory, here: a config.json of the shape."""
    import json

    model = directory / "shared" / "models" / "Llama-3.1-8B-Instruct"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps(LLAMA_8B))
    return model
