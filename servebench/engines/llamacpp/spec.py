"""The campaign's `engine:` block for llama.cpp: which source to compile (the llama.cpp vendored by a
llama-cpp-python sdist, or a git commit), for which CPU, and the CMake flags that go into the build
(and so into its cache key)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from servebench.config.campaign import EngineSpecBase, GitSourceSpec, pinned_requirement
from servebench.platform.targets import profile

DEFAULT_LLAMACPP_PACKAGE = "llama-cpp-python==0.3.36"   # vendors llama.cpp 0c1e57098


class LlamaCppEngineSpec(EngineSpecBase):
    kind: Literal["llamacpp"] = "llamacpp"
    git_source_field: ClassVar[str | None] = "source"  # a commit axis and bisect build from `source:`
    package: str = Field(DEFAULT_LLAMACPP_PACKAGE,
                         description="Pinned llama-cpp-python sdist; its vendored llama.cpp is what is built.")
    cpu: Literal["portable", "native"] = Field(
        "portable", description="portable: the architecture's common target (x86-64-v3: AVX2, FMA, F16C, what "
                                "ggml's GGML_NATIVE=OFF enables; armv8-a on aarch64); native: -march=native for "
                                "this host's CPU (its flags join the build key). Unused when `target:` is given.")
    blas: bool = Field(False, description="GGML_BLAS with OpenBLAS (needs libopenblas-dev on the build host).")
    cmake_args: list[str] = Field(default_factory=list,
                                  description="More CMake defines, e.g. ['-DGGML_AVX512=OFF'].")
    target: str | None = Field(None, description=(
        "Build for a named target CPU instead (servebench/platform/targets.py): graviton2, graviton3, graviton4, "
        "ampere-altra, armv8-a (cross-compiled for aarch64), x86-64-v3, x86-64-v4, native; `cpu:` is then "
        "unused."))
    source: GitSourceSpec | None = Field(None, description=(
        "Build llama.cpp from a git repository instead of the sdist: `{git: /src/llama.cpp, commit: b6500}`, "
        "or `commits: [A, B]` as a sweep axis; compiled by CMake for `target` (native when left out)."))

    @field_validator("package")
    @classmethod
    def _pinned(cls, value: str) -> str:
        return pinned_requirement(value)

    @field_validator("target")
    @classmethod
    def _known_target(cls, value: str | None) -> str | None:
        if value is not None:
            profile(value)  # a TargetError (ValueError) names the profiles
        return value

    @field_validator("cmake_args")
    @classmethod
    def _defines(cls, value: list[str]) -> list[str]:
        for arg in value:
            if not arg.startswith("-D") or "=" not in arg or " " in arg:
                raise ValueError(f"cmake_args takes CMake defines like '-DNAME=VALUE' (got {arg!r})")
        return value

    def build_target(self) -> str | None:
        """`target:`, the profile its build is for (servebench/platform/targets.py)."""
        return self.target

    def describe(self) -> str:
        cpu = f"target={self.target}" if self.target else ("cpu=native" if self.source else f"cpu={self.cpu}")
        return f"{self.source_label} ({', '.join([cpu] + (['blas'] if self.blas else []) + self.cmake_args)})"

    @property
    def source_label(self) -> str:
        if self.source is None:
            return self.package
        at = self.source.commit or ",".join(self.source.commits)
        return f"git {self.source.git} @ {at}"
