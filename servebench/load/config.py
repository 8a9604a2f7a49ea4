"""What one load run is asked to do."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LoadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str
    model: str
    endpoint: Literal["completions"] = "completions"
    rate: float | None = Field(None, gt=0, description="Open loop: offered requests per second.")
    arrival: Literal["poisson", "constant"] = "poisson"
    clients: int | None = Field(None, ge=1, description="Closed loop: concurrent clients (with rate: a cap).")
    input_len: int = Field(64, ge=1)
    output_len: int = Field(32, ge=1)
    vocab_size: int = Field(1024, ge=16, description="Prompt token ids are drawn below this.")
    requests: int | None = Field(None, ge=1)
    duration: float | None = Field(None, gt=0)
    warmup: int = Field(0, ge=0)
    seed: int = 0
    timeout_s: float = Field(300.0, gt=0)
    token_counter: str | None = Field("vllm:generation_tokens_total",
                                      description="Server counter of generated tokens on /metrics, if any.")

    @model_validator(mode="after")
    def _check(self) -> "LoadConfig":
        if self.rate is None and self.clients is None:
            raise ValueError("give a rate (open loop), clients (closed loop) or both")
        if (self.requests is None) == (self.duration is None):
            raise ValueError("give exactly one of requests or duration")
        return self

    @property
    def data_seed(self) -> int:
        return self.seed

    @property
    def schedule_seed(self) -> int:
        # Separate streams: changing the rate must not change the prompts, and vice versa.
        return (self.seed * 7919 + 104729) % (2**31)


def to_argv(config: LoadConfig) -> list[str]:
    """The `servebench load` flags that reproduce this config (the CLI parses them back)."""
    argv = ["--base-url", config.base_url, "--model", config.model, "--endpoint", config.endpoint,
            "--input-len", str(config.input_len), "--output-len", str(config.output_len),
            "--vocab-size", str(config.vocab_size), "--warmup", str(config.warmup), "--seed", str(config.seed),
            "--timeout", f"{config.timeout_s:g}", "--arrival", config.arrival,
            "--token-counter", config.token_counter or ""]
    if config.rate is not None:
        argv += ["--rate", f"{config.rate:g}"]
    if config.clients is not None:
        argv += ["--clients", str(config.clients)]
    if config.requests is not None:
        argv += ["--requests", str(config.requests)]
    if config.duration is not None:
        argv += ["--duration", f"{config.duration:g}"]
    return argv
