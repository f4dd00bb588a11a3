"""The store's records on disk: a kernel's ``manifest.json`` (its versions, each with its
evidence, provenance and recipe) and a model's ``model.json`` (baselines per environment),
with the file names and patterns of the layout. Pydantic models, serialized by
:mod:`pytest_kernelopt.records`; the store (:mod:`pytest_kernelopt.store`) reads and writes them.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from ..capture.launch_configs import MAX_KERNELS, MAX_NAMES
from ..capture.shapes import SHAPE_NAME_RE
from ..errors import StoreError
from ..records import SCHEMA_VERSION, ArgInfo, Environment, Record, SeedErrors, Timing
from .recipe import Recipe

MANIFEST = "manifest.json"
# 2: each version's evidence records what was verified (``fingerprint``, ``sha256``).
# 3: each version records how it was made (``recipe``, replayed by ``kernelopt refresh``), its
#    provenance whether it was refreshed (``refreshed_from``, compilers before/after), and the
#    manifest why its kernel went back to the compiler's (``retired``). Nothing is inferred:
#    a schema 2 manifest reads as it is (no recipes; refresh derives one from the files).
# 4: fingerprints cover what the compiler kernel was compiled for (capture.compile_semantics: argument
#    dtypes, constants, device), and each version's evidence the launches it was verified at
#    (``launches``). A manifest of schema 1-3 is read, but its fingerprints are of the text alone: its
#    kernels are stale until ``kernelopt refresh`` re-verifies them (FINGERPRINTS_COVER_SEMANTICS).
# Manifests of schema 1 are still read: see Manifest._from_schema_1.
# An ``inductor`` recipe may also record ``base_source`` (2026-12-04; optional: older recipes
# read without it, and are not replayed: store/recipe.py binding_error).
# A version's evidence may also record ``training``, the pass it was verified in (2026-12-05; optional:
# older evidence reads as None, and production treats it as before).
MANIFEST_SCHEMA_VERSION = 4
# The first schema whose fingerprints include capture.compile_semantics.
FINGERPRINTS_COVER_SEMANTICS = 4
ORIGINAL = "original.py"
MODEL_RECORD = "model.json"

# Model ids (problem file stems) and kernel names become folder names.
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
VERSION_FILE_RE = re.compile(r"v[1-9][0-9]*\.py")
# Fingerprints become part of a file name (original-<fingerprint>.py); ours are 16 hex digits.
FINGERPRINT_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
ORIGINAL_FILE_RE = re.compile(r"original(-[A-Za-z0-9_-]{1,64})?\.py")


def _original_name(value: str) -> str:
    if not ORIGINAL_FILE_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not an original file name (original.py or original-<fingerprint>.py)")
    return value


OriginalName = Annotated[str, AfterValidator(_original_name)]


def sha256_text(text: str) -> str:
    """The sha256 recorded for a version: of its UTF-8 bytes, exactly as written to disk."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Evidence(Record):
    """What the cascade measured when a version was accepted."""

    status: Literal["accepted", "correct"]
    speed_measured: bool
    model_timing: Timing | None = None
    kernel_timing: Timing | None = None
    errors: list[SeedErrors] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=list)
    environment: Environment | None = None
    # Stored as one of a set (``kernelopt tune``'s combine pass): the whole model with this
    # version and the ``combined_with`` kernels' versions, vs the compiler's kernels. Its own
    # ``model_timing`` may then be below the 2% a version needs alone.
    combined_timing: Timing | None = None
    combined_with: list[str] = Field(default_factory=list)
    # The verification this evidence is of: the fingerprint of the compiler kernel the cascade
    # compared the version with, and the sha256 of the bytes it verified. None: no record
    # (written outside ``accept_verdict``); the production loader does not run such a version.
    fingerprint: str | None = None
    sha256: str | None = None
    # The launches the kernel stage verified the version at, each as capture.launch_signature writes it
    # (per argument: "float16 (4, 16) (16, 1)", "int 64", "float"). Production runs the version only at
    # these; None: not recorded (written before schema 4), and the gate asks for a re-verification.
    launches: list[list[Annotated[str, Field(max_length=1000)]]] | None = None
    # The pass it was verified in: True, a training step's (a problem declaring TRAINING; its forward kernels are
    # named like inference ones but may save more for the backward); False, inference. Production tells a compile
    # of the other pass from a stale kernel by it. None: not recorded (written before 2026-12-05): a fingerprint
    # that differs is stale, as before.
    training: bool | None = None


class Provenance(Record):
    """Who or what proposed a version."""

    proposed_by: str = "human"
    agent: str | None = None
    backend: str | None = None
    llm_model: str | None = None
    cost_usd: float | None = None
    tokens: int | None = None
    # ``kernelopt refresh``: the version (and kernel, when the compiler renamed it) this one
    # replays the recipe of, and the compilers before and after ("torch 2.11.0, triton 3.6.0").
    refreshed_from: int | None = None
    refreshed_from_kernel: str | None = None
    compiler_before: str | None = None
    compiler_after: str | None = None


class VersionRecord(Record):
    version: int = Field(ge=1)
    # Always ``v<version>.py``: a manifest is read from the user's repo, so a file name
    # such as ``../../x.py`` must not lead outside the kernel's folder.
    file: str
    sha256: str
    created: datetime
    evidence: Evidence
    provenance: Provenance
    # The compiler kernel this version replaces and its original file (None in
    # manifests written before these were recorded).
    fingerprint: str | None = None
    original: OriginalName | None = None
    # How it was made, replayable on a new compiler kernel (store/recipe.py); None before schema 3. Trusted
    # only while bound to this version's bytes (``recipe.binding_error``: the store's check, refresh).
    recipe: Recipe | None = None

    @field_validator("file")
    @classmethod
    def _file_name(cls, value: str) -> str:
        if not VERSION_FILE_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a version file name (v<number>.py)")
        return value

    @model_validator(mode="after")
    def _file_matches_version(self) -> VersionRecord:
        if self.file != f"v{self.version}.py":
            raise ValueError(f"version {self.version} must be stored as v{self.version}.py, not {self.file}")
        return self

    def unverified_reason(self, fingerprint: str | None) -> str | None:
        """Why this version has no recorded passing verification against compiler kernel ``fingerprint``
        (None: it has one). Evidence only exists for passing verdicts (accepted or correct)."""
        verified = self.evidence
        if verified.fingerprint is None or verified.sha256 is None:
            return (f"v{self.version}'s manifest entry records no verification (what the cascade checked: "
                    f"fingerprint and sha256); `kernelopt accept` of its file records one")
        if verified.sha256 != self.sha256:  # accept writes both from one verdict: an edit
            return (f"v{self.version}'s evidence is of other bytes (sha256 {verified.sha256[:12]}) than its file "
                    f"(sha256 {self.sha256[:12]})")
        if verified.fingerprint != fingerprint:
            return (f"v{self.version} was verified against compiler kernel {verified.fingerprint}, not against "
                    f"{fingerprint}, which the compiler generates now")
        if not verified.launches:
            return (f"v{self.version}'s manifest entry records no launches it was verified at (shapes, strides, "
                    f"dtypes; written before kernelopt recorded them); `kernelopt refresh` or `kernelopt accept` of "
                    f"its file verifies it again and records them")
        return None


class Retirement(Record):
    """Why a kernel went back to the compiler's (``active`` is null): written by ``kernelopt refresh``."""

    version: int  # the version that was active
    reason: str
    when: datetime
    # The compiler kernel it was retired for (the one generated when it was found stale).
    fingerprint: str | None = None


class Manifest(Record):
    readable_schema_versions: ClassVar[tuple[int, ...]] = (1, 2, 3, MANIFEST_SCHEMA_VERSION)
    schema_version: int = MANIFEST_SCHEMA_VERSION
    model: str
    kernel: str
    # Fingerprint of the compiler kernel the versions replace: when the compiler
    # generates something else, the stored versions are stale.
    fingerprint: str
    # The compiler's kernel for ``fingerprint``, in candidate format. Manifests written
    # before re-accepts kept one original per fingerprint have none: original.py.
    original: OriginalName = ORIGINAL
    active: int | None = None
    args: list[ArgInfo] = Field(default_factory=list)
    environment: Environment | None = None
    versions: list[VersionRecord] = Field(default_factory=list)
    # Set when a stale active version was retired (``active`` null: the compiler's kernel runs);
    # cleared by the next stored version. The version files stay.
    retired: Retirement | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_schema_1(cls, data: Any) -> Any:
        """Schema 1 evidence has no verification record. accept wrote each version's ``fingerprint``
        from the same passing verdict as its evidence and its ``sha256`` from the same bytes, so
        they are read as that record; a version without a fingerprint (the earliest manifests)
        stays unverified."""
        if not isinstance(data, dict) or data.get("schema_version", MANIFEST_SCHEMA_VERSION) != 1:
            return data
        versions = []
        for v in data.get("versions") or []:
            if isinstance(v, dict) and v.get("fingerprint") and isinstance(v.get("evidence"), dict):
                v = {**v, "evidence": {"fingerprint": v["fingerprint"], "sha256": v.get("sha256"), **v["evidence"]}}
            versions.append(v)
        return {**data, "versions": versions}

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        numbers = [v.version for v in self.versions]
        duplicates = sorted({n for n in numbers if numbers.count(n) > 1})
        if duplicates:
            raise ValueError(f"version {duplicates[0]} is recorded twice")
        if self.active is not None and self.active not in numbers:
            raise ValueError(f"active version {self.active} is not recorded in versions")
        replaces = self.version(self.active).fingerprint if self.active is not None else None
        if replaces is not None and replaces != self.fingerprint:
            # The active version is what the gate swaps in for the compiler kernel named here.
            raise ValueError(f"active version {self.active} replaces compiler kernel {replaces}, but the manifest "
                             f"names {self.fingerprint}")
        return self

    def old_fingerprints(self) -> str | None:
        """Why this manifest's fingerprints cannot be compared with the compiler's now (None: they can):
        written before fingerprints covered the signature, so an equal text of another dtype would match."""
        if self.schema_version >= FINGERPRINTS_COVER_SEMANTICS:
            return None
        return (f"its manifest (schema {self.schema_version}) was written by an older kernelopt, whose fingerprints "
                f"did not cover the kernel's argument dtypes, constants and device; run `kernelopt refresh` to "
                f"verify it again against the compiler kernel generated now")

    def version(self, number: int) -> VersionRecord:
        for v in self.versions:
            if v.version == number:
                return v
        raise StoreError(f"{self.model}/{self.kernel}: manifest names version {number}, which it does not record")


class ModelBaseline(Record):
    environment: Environment
    measured: datetime
    kernels: dict[str, int] = Field(default_factory=dict)  # kernel -> active version measured
    timing: Timing | None = None
    worst_error_vs_fp64: float | None = None


class CompileChoice(Record):
    """The model's compile settings (``kernelopt tune``'s choice): a name from ``capture/variants.py``.

    Every compile of the model then uses them: the verifier's, the gate's and production's;
    the kernels stored beside it replace kernels of that compile. Only a name is stored (a
    dict of Inductor options could name compiler paths or custom passes).
    """

    variant: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")
    measured: datetime
    environment: Environment | None = None
    # The model compiled under it against the default compile, paired, in one run.
    timing: Timing | None = None
    # The worst output element's fraction of its allowance: float64 reference, with the default
    # compile's own error as the allowance (the model stage's rule).
    worst_ratio: float | None = None
    seeds: list[int] = Field(default_factory=list)
    # The inputs of each graph the verifier compiled under it (capture.launch_signature of what Dynamo passed
    # the backend: weights and inputs, shapes, strides, dtypes). Production compiles a graph under the
    # setting only when its inputs are one of these; None: not recorded (before 2026-12-04), used nowhere.
    graphs: list[list[Annotated[str, Field(max_length=1000)]]] | None = None
    # The pass the setting was verified in: True, a training step's (a problem declaring TRAINING); False, inference.
    # Production applies it only to graphs of that pass (a training graph: grad mode on and an input, a weight,
    # that requires grad); None, not recorded (before 2026-12-06): inference graphs only.
    training: bool | None = None
    # A setting chosen once for every declared shape of a problem with SHAPES (written 2026-12-05 to 2026-12-06;
    # ``kernelopt tune`` now chooses per shape: ``ModelRecord.compile_at``): each shape's timing against the default
    # compile, and ``graphs`` holds every shape's graphs; ``timing`` is then null. None: one shape's choice.
    shape_timings: dict[str, Timing | None] | None = None
    # The launch configuration each Triton kernel of the confirming check's compile ran (after Inductor's
    # first-call race and, under max-autotune, its coordinate descent): kernel fingerprint -> launch point
    # (block sizes, num_warps, num_stages). Every later compile under the setting (the verifier's, the gate's,
    # production's) launches these, raced no more (capture/launch_configs.py: a point Inductor itself could not
    # launch for that kernel is not used). None: not recorded (before 2026-12-06): every compile races.
    launch_configs: dict[Annotated[str, Field(max_length=128)],
                         Annotated[dict[Annotated[str, Field(max_length=32)], int], Field(max_length=MAX_NAMES)]
                         ] | None = Field(default=None, max_length=MAX_KERNELS)


class ModelRecord(Record):
    schema_version: int = SCHEMA_VERSION
    model: str
    baselines: dict[str, ModelBaseline] = Field(default_factory=dict)
    # None: the default compile (Inductor's defaults). Of a problem with SHAPES, the setting of every declared shape
    # that ``compile_at`` does not name (a store written before per-shape choices: one setting for all of them).
    compile: CompileChoice | None = None
    # A problem with SHAPES: each declared shape's own choice (None: the default compile at that shape), written by
    # ``kernelopt tune`` at that shape. It takes precedence over ``compile`` there; production applies a choice at
    # the graph inputs it lists (``graphs``: that shape's), wherever the graph comes from.
    compile_at: dict[Annotated[str, Field(pattern=f"^{SHAPE_NAME_RE.pattern}$")], CompileChoice | None] | None = (
        Field(default=None, max_length=MAX_KERNELS))


def environment_key(env: Environment) -> str:
    """Baselines are kept per GPU and software stack."""
    return f"{env.gpu or env.device}|torch {env.torch}|triton {env.triton}"


def verified_elsewhere(verified_in: Environment | None, device: str) -> str | None:
    """Why a version whose evidence records ``verified_in`` was not verified where this process runs (device type
    ``device``, this torch and triton, exactly), in words; None when it was. Production runs a version only where
    this is None (a manifest is data from a repository: a pull request that says its version was verified under
    another torch, so that a gate here skips it as stale, has it run nowhere); the gate fails, never skips, a stale
    version for which it is None (no compiler change explains it)."""
    import torch
    import triton

    if verified_in is None:
        return "its evidence records no environment it was verified in"
    here = (device, torch.__version__, triton.__version__)
    there = (verified_in.device, verified_in.torch, verified_in.triton)
    if here == there:
        return None
    return (f"it was verified on {there[0]} with torch {there[1]} and triton {there[2]}, and this process runs "
            f"{here[0]} with torch {here[1]} and triton {here[2]}")
