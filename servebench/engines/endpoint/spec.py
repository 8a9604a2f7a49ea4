"""The campaign's `engine:` block for a server servebench did not start: where it answers, the name it
serves the model under, whose server it is (which engine's API and Prometheus names it speaks), the
environment variable holding its key, and the server whose answers the gate compares it with, if any."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from servebench.config.campaign import ENV_NAME_PATTERN, EngineSpecBase, StrictModel

KIND_PATTERN = r"^[a-z][a-z0-9_-]*$"


def base_url(value: str) -> str:
    """An http(s) URL with a host and nothing that would carry a secret or confuse the paths joined to it
    (user info, a query, a fragment); without its trailing '/'."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"give the server's base URL, http://HOST:PORT (got {value!r})")
    if parts.username is not None or parts.password is not None:
        raise ValueError("no user or password in the URL: it is landed and reported; name the key's "
                         "environment variable in `api_key_env` instead")
    if parts.query or parts.fragment:
        raise ValueError(f"the base URL takes no query or fragment (got {value!r}): /v1/completions, /health "
                         "and /metrics are joined to it")
    return value.rstrip("/")


def request_path(value: str) -> str:
    if not value.startswith("/") or any(c in value for c in "?# "):
        raise ValueError(f"a path on the server, starting with '/' (got {value!r})")
    return value


class EndpointReferenceSpec(StrictModel):
    """The server whose greedy answers the endpoint's must match (the correctness gate's reference): one
    serving the same model at a single worker, say, also not started by servebench."""

    url: str = Field(description="Its base URL, http://HOST:PORT.")
    served_model: str | None = Field(None, min_length=1, description=(
        "The model name it answers to; null: the endpoint's `served_model`."))
    api_key_env: str | None = Field(None, pattern=ENV_NAME_PATTERN, description=(
        "The environment variable holding its API key (null: it asks for none)."))
    health_path: str = Field("/health", description="The path that answers 200 while it can serve.")

    # the same checks on both blocks' address (pydantic's reuse of a plain function as a validator)
    _base_url = field_validator("url")(base_url)
    _health_path = field_validator("health_path")(request_path)


class EndpointEngineSpec(EngineSpecBase):
    kind: Literal["endpoint"] = "endpoint"
    url: str = Field(description=(
        "The base URL of the server to measure, http://HOST:PORT (its OpenAI API under /v1): a server your site "
        "runs or your own job script started. servebench never starts or stops it."))
    served_model: str = Field(min_length=1, description=(
        "The model name the server answers to (the `model` of every request: vLLM's --served-model-name)."))
    api: str = Field(pattern=KIND_PATTERN, description=(
        "Whose server it is: an engine kind servebench knows (vllm, llamacpp). Its Prometheus names (telemetry), "
        "token counter, request and gate extensions and gate answers are read as that engine's."))
    api_key_env: str | None = Field(None, pattern=ENV_NAME_PATTERN, description=(
        "The environment variable holding the server's API key (null: it asks for none). The run writes its "
        "value to a 0600 file in the run directory, which the load generator, the gate and the scraper read: "
        "the key is never on a command line, in the plan, a log, the warehouse or a report."))
    health_path: str = Field("/health", description="The path that answers 200 while the server can serve.")
    metrics: bool = Field(True, description=(
        "Read the server's Prometheus /metrics: the server samples of the report and the token counter check. "
        "false: a server without /metrics (or one not reachable there): no server samples."))
    reference: EndpointReferenceSpec | None = Field(None, description=(
        "The server the correctness gate compares this one's greedy answers with, e.g. a single-worker server "
        "of the same model (`{url: http://HOST:PORT}`); null: the gate says 'not checked: no reference named' "
        "and the cells run unchecked."))
    env: dict[str, str] = Field(default_factory=dict, description="Unused: the server's environment is its own.")
    ready_timeout_s: float = Field(60.0, gt=0, description=(
        "Seconds the server (and the reference) may take to answer its health path when a mode begins; it is "
        "running already, so it should answer at once."))

    # the same checks on both blocks' address (pydantic's reuse of a plain function as a validator)
    _base_url = field_validator("url")(base_url)
    _health_path = field_validator("health_path")(request_path)

    @field_validator("env")
    @classmethod
    def _no_env(cls, value: dict[str, str]) -> dict[str, str]:
        if value:
            raise ValueError("the server is not servebench's: its environment is its own (leave `env` out)")
        return value

    def describe(self) -> str:
        key = f", key from ${self.api_key_env}" if self.api_key_env else ""
        return f"endpoint {self.url} ({self.api} server, model {self.served_model!r}{key})"

    def reference_label(self) -> str:
        """What the gate compares the server with, for the plan."""
        if self.reference is None:
            return "not checked: no reference named"
        return f"against the reference at {self.reference.url}"
