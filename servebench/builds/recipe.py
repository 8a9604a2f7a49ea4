"""What an engine asks the build stage for: a recipe, engine-neutral data.

Three kinds, each naming its builder (`builder`: `builders.py` dispatches on that name alone);
engines only return recipes:
- `venv-pip`: a Python venv filled by pip: vLLM's CPU wheel and Ray, or llama.cpp's tools
  compiled by CMake from the llama-cpp-python sdist (`pip_options` and `build_env` carry its
  CMake flags); with a `wheel` recipe inside, the venv installs the wheel that recipe builds;
  with a `platform`, the venv is for another architecture (servebench/builds/target_venv.py):
  wheels resolved for its platform tags, its python a CPython of that architecture;
- `wheel`: a Python sdist compiled into a wheel on this host for this CPU (vLLM from source), or
  with `cross` for a target profile of another architecture (vLLM from source for Graviton);
- `cmake`: a CMake project from a pinned sdist or a git commit, compiled for a named target CPU,
  by a cross compiler when the target is another architecture (llama.cpp for Graviton on x86).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class VenvRecipe(BaseModel):
    """A venv created with pip, its packages pinned; reused while nothing that goes into it changes."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["venv-pip"] = "venv-pip"
    engine: str                                            # the engine kind, the first part of the build key
    packages: list[str] = Field(default_factory=list)      # pinned requirements, installed in one pip call
    remove: list[str] = Field(default_factory=list)        # uninstalled afterwards (broken companions)
    post_install: list[list[str]] = Field(default_factory=list)  # argument lists for the venv's python
    version_distribution: str | None = None                # whose version is the engine version (None: Python's)
    engine_package: bool = True                            # install servebench's engine-side package (engine/)
    pip_options: list[str] = Field(default_factory=list)   # before the packages (--no-binary X, --config-settings)
    build_env: dict[str, str] = Field(default_factory=dict)  # for the install step (CMAKE_ARGS)
    host_cpu_flags: list[str] = Field(default_factory=list)  # part of the key when the build is for this CPU
    version_command: list[str] = Field(default_factory=list)  # relative to the venv: what was built, by what
    wheel: "WheelRecipe | None" = None                     # built first (wheel.py), then installed here
    local_wheels: list[str] = Field(default_factory=list)  # wheel files installed --no-deps after `packages`
    built_from: dict = Field(default_factory=dict)         # the wheel build's key parts (the builds row traces to them)
    platform: "TargetPlatform | None" = None               # a venv for another architecture (target_venv.py)

    @property
    def builder(self) -> str:
        """Which builder makes it (servebench/builds/builders.py `BUILDERS`): for another architecture (with
        a wheel cross-compiled first, or not), a wheel built first, or a plain venv."""
        if self.platform is not None:
            return "target-wheel-venv" if self.wheel is not None else "target-venv"
        return "wheel-venv" if self.wheel is not None else "venv"


class TargetPlatform(BaseModel):
    """A venv for another architecture than this host's, made here: pip resolves wheels for the
    platform's tags (it evaluates environment markers for *this* host and takes only the tags it is
    given, so the requirements are read from the main wheel's METADATA with markers evaluated for
    the target), and the venv's python is a CPython of that architecture (target_venv.py)."""

    model_config = ConfigDict(frozen=True)

    arch: str                                              # aarch64 (platform.machine() spelling)
    python_minor: str = "3.11"                             # the target CPython (its ABI tag: cp311)
    glibc: tuple[int, int] = (17, 36)                      # manylinux_2_X tags accepted, X in this range
    requirements_from: str                                 # the pinned package whose wheel's METADATA lists the rest
    pins: dict[str, str] = Field(default_factory=dict)     # a requirement's name -> what is installed instead
    constraints_from: VenvRecipe | None = None             # this host's venv of the same packages: its versions
    lazy_binding: bool = False                             # extension modules load with RTLD_LAZY

    def tags(self) -> list[str]:
        """The platform tags pip accepts, newest glibc first (pip takes each tag only as given)."""
        low, high = self.glibc
        tags = [f"manylinux_2_{minor}_{self.arch}" for minor in range(high, low - 1, -1)]
        return tags + [f"manylinux2014_{self.arch}"]


class CrossCompile(BaseModel):
    """A wheel compiled here for a target profile of another architecture (servebench/builds/cross.py):
    Debian's cross compiler, a sysroot of the target's Debian packages with the build's headers and
    libraries, torch from a venv of the target's architecture, the profile's flags."""

    model_config = ConfigDict(frozen=True)

    target: str                                            # a profile of servebench/platform/targets.py
    torch_venv: "VenvRecipe"                               # the target venv whose torch it compiles against
    sysroot_packages: list[str] = Field(default_factory=list)  # Debian packages added to the sysroot's closure
    python_minor: str = "3.11"                             # the target CPython (headers from the sysroot)
    compile_env: dict[str, str] = Field(default_factory=dict)  # the compile step's variables; {files},
    #                                         {sysroot}, {torch_site}, {python_minor} are filled in (cross.expand)


class WheelRecipe(BaseModel):
    """A pinned sdist compiled into a wheel by `pip wheel --no-build-isolation` in a build venv
    (servebench/builds/wheel.py). The key covers the sdist's sha256, the build requirements and
    environment, the patches' and staged trees' contents, the compiler, Python, the architecture
    and this CPU's flags."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["wheel"] = "wheel"
    engine: str
    sdist: str                                             # pinned requirement ('vllm==0.32.0')
    build_requirements: list[str] = Field(default_factory=list)  # pins, or '-r FILE' relative to the sdist's root
    build_env: dict[str, str] = Field(default_factory=dict)      # VLLM_TARGET_DEVICE=cpu, MAX_JOBS
    staged_sources: dict[str, str] = Field(default_factory=dict)  # variable -> a local source tree
    patches: list[str] = Field(default_factory=list)      # patch files applied with `patch -p1`, in order
    cross: CrossCompile | None = None                      # cross-compiled for another architecture


class GitSource(BaseModel):
    """A commit of a git repository (servebench/builds/git_source.py)."""

    model_config = ConfigDict(frozen=True)

    repo: str                                              # a local repository or a URL git can clone
    commit: str                                            # any revision; the build keys on its full hash


class CMakeRecipe(BaseModel):
    """A CMake project taken from a pinned PyPI sdist or a git commit, built for a target profile; its
    binaries (static, no Python) are the artifact. The key covers the sdist's sha256 (or the commit
    hash), the compiler's id and version, the target's flags, the options and the architecture."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["cmake"] = "cmake"
    engine: str
    source: str | None = None                              # pinned sdist requirement ('llama-cpp-python==0.3.36')
    git: GitSource | None = None                           # or a commit of a repository
    source_subdir: str = ""                                # the CMake project inside it ('vendor/llama.cpp')
    target: str                                            # a profile of servebench/platform/targets.py
    cmake_args: list[str] = Field(default_factory=list)    # options (the target's are added by the builder)
    build_targets: list[str] = Field(min_length=1)         # CMake targets whose binaries make the artifact
    version_command: list[str] = Field(default_factory=list)  # relative to the artifact, run for the record

    @property
    def builder(self) -> str:
        """Which builder makes it (servebench/builds/builders.py `BUILDERS`)."""
        return "cmake"

    @model_validator(mode="after")
    def _one_source(self) -> "CMakeRecipe":
        if (self.source is None) == (self.git is None):
            raise ValueError("a cmake recipe takes one source: an sdist requirement or a git commit")
        return self


VenvRecipe.model_rebuild()
TargetPlatform.model_rebuild()
CrossCompile.model_rebuild()
WheelRecipe.model_rebuild()
BuildRecipe = VenvRecipe | CMakeRecipe
