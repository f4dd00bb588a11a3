"""The versioned kernel store in the user's repo.

Layout (a contract, documented in docs/store.md)::

    kernels/<model id>/model.json                      model-level baselines per environment
    kernels/<model id>/<kernel>/original.py            the compiler's kernel (candidate format) at the first accept
    kernels/<model id>/<kernel>/original-<fp>.py       the compiler's kernel at the first accept after it changed
                                                       to fingerprint <fp> (original.py is never overwritten)
    kernels/<model id>/<kernel>/v1.py, v2.py           accepted versions, never overwritten or renumbered
    kernels/<model id>/<kernel>/manifest.json          fingerprint, original file, active version, evidence, provenance
    kernels/<model id>/<kernel>@<shape>/...            the same, per declared shape of a problem with SHAPES

Every inconsistency is a :class:`StoreError` naming the file: a folder with version
files but no manifest, a manifest or model record that does not parse, a version
file whose bytes differ from the sha256 recorded at accept, a name that would leave
the store. Writes are atomic (temp file + rename); version numbers are allocated
under an exclusive lock on the kernel's folder and version files are created with
O_EXCL, so concurrent accepts into the same kernel get distinct versions and lose
nothing; a failed accept removes the files it created. Nothing read from the store
is trusted as a result: the gate re-verifies every active version.

The records on disk (manifest.json, model.json) are in manifest.py, atomic and exclusive
writes in files.py; this module is the store itself and the accept of a verdict.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from ..candidate.format import render_dump
from ..capture.shapes import SHAPE_NAME_RE, split_name, store_name
from ..capture.variants import unknown_variant
from ..errors import StoreError
from ..records import ArgInfo, Environment, Timing, Verdict, dump_json, worst_error
from ..verify.limits import CANDIDATE_BYTES
from .files import atomic_write, create_exclusive, load_record, read_plain, why
from .manifest import (
    FINGERPRINT_RE, MANIFEST, MANIFEST_SCHEMA_VERSION, MODEL_RECORD, NAME_RE, ORIGINAL, ORIGINAL_FILE_RE,
    VERSION_FILE_RE, CompileChoice, Evidence, Manifest, ModelBaseline, ModelRecord, Provenance, Retirement,
    VersionRecord, environment_key, sha256_text,
)
from .recipe import Recipe, check_recipe, derive_recipe

__all__ = ["AcceptOutcome", "ActiveVersion", "KernelStore", "accept_verdict", "baseline_key", "model_baseline"]


@dataclass(frozen=True)
class ActiveVersion:
    """The active version of a kernel, read once and checked against its recorded sha256.

    ``source`` is exactly the text that was checked: run and verify it, do not read
    ``path`` again (it may have changed since).
    """

    manifest: Manifest
    record: VersionRecord
    path: Path
    source: str


@dataclass(frozen=True)
class AcceptOutcome:
    """What an accept did. ``stored``: a new version file was written. ``active``: ``record``
    is the kernel's active version. ``message``: one line for the user."""

    record: VersionRecord | None
    stored: bool
    active: bool
    message: str


class KernelStore:
    """``kernels/`` of one repo."""

    def __init__(self, root: Path):
        self.root = Path(root).absolute()

    # --- paths -----------------------------------------------------------------------

    def _inside(self, path: Path, what: str) -> Path:
        root = self.root.resolve()
        if not path.resolve().is_relative_to(root):
            raise StoreError(f"{path}: {what} resolves to {path.resolve()}, outside the kernel store {root}")
        return path

    def model_dir(self, model: str) -> Path:
        """``kernels/<model>``; a model id that is not a plain folder name is a StoreError naming it."""
        _check_name(model, "model id")
        return self._inside(self.root / model, f"model {model!r}")

    def kernel_dir(self, model: str, kernel: str) -> Path:
        """``kernels/<model>/<kernel>`` (``<kernel>`` may be ``<name>@<shape>``, capture/shapes.py); names that are
        not plain folder names are a StoreError naming them."""
        name, shape = split_name(kernel)
        _check_name(name, "kernel name")
        if shape is not None and not SHAPE_NAME_RE.fullmatch(shape):
            raise StoreError(f"kernel name {kernel!r}: shape {shape!r} is not an identifier (letters, digits, _)")
        return self._inside(self.model_dir(model) / kernel, f"kernel {model}/{kernel}")

    # --- reading ---------------------------------------------------------------------

    def _plain_folder(self, model: str, kernel: str) -> Path:
        """``kernels/<model>/<kernel>``, refused (StoreError) where it or the model's folder is a symbolic link: a
        store holds plain folders and files (a link would make what is read depend on what it points to)."""
        folder = self.kernel_dir(model, kernel)
        for path in (folder.parent, folder):
            if path.is_symlink():
                raise StoreError(f"{path}: is a symbolic link; a kernel store holds plain folders and files "
                                 "(commit the folder itself)")
        return folder

    def manifest(self, model: str, kernel: str) -> Manifest | None:
        """The manifest; None when nothing is committed for the kernel.

        A broken manifest, or a folder with version or original files but no manifest,
        raises StoreError naming the file or folder.
        """
        folder = self._plain_folder(model, kernel)
        if not folder.is_dir():
            return None
        with self._locked(folder, shared=True):
            return self._read_manifest(model, kernel)

    def active_file(self, model: str, kernel: str) -> ActiveVersion | None:
        """The active version, read once and checked against the sha256 recorded at accept.

        None when nothing is committed or no version is active. A missing file, or one
        whose bytes differ from the recorded sha256, raises StoreError naming it.
        """
        folder = self._plain_folder(model, kernel)
        if not folder.is_dir():
            return None
        with self._locked(folder, shared=True):
            manifest = self._read_manifest(model, kernel)
            if manifest is None or manifest.active is None:
                return None
            record = manifest.version(manifest.active)
            path, source = self._read_version(folder, record, active=True)
        return ActiveVersion(manifest=manifest, record=record, path=path, source=source)

    def check(self, model: str, kernel: str) -> Manifest | None:
        """Check the whole kernel folder: the manifest, every recorded version file against
        its sha256, the original file of the current fingerprint. Returns the manifest
        (None when nothing is committed); the first inconsistency raises StoreError."""
        folder = self._plain_folder(model, kernel)
        if not folder.is_dir():
            return None
        with self._locked(folder, shared=True):
            manifest = self._read_manifest(model, kernel)
            if manifest is None:
                return None
            sources = {record.version: self._read_version(folder, record, active=record.version == manifest.active)[1]
                       for record in manifest.versions}
            originals = {manifest.original} | {v.original for v in manifest.versions if v.original}
            links = sorted(p.name for p in folder.iterdir() if p.is_symlink())
            if links:  # never followed (read_plain); a committed store holds plain files
                raise StoreError(f"{folder}: {', '.join(links[:5])} {'is a symbolic link' if len(links) == 1 else 'are symbolic links'}"
                                 "; a kernel store holds plain files (commit the file itself)")
            for name in sorted(originals):
                if not (folder / name).is_file():
                    raise StoreError(f"{folder / name}: original file recorded in {folder / MANIFEST} is missing")
            for record in manifest.versions:  # a recipe refresh would replay must be the one that made the file
                check_recipe(folder, manifest, record, sources[record.version])
            known = {MANIFEST, *originals, *(v.file for v in manifest.versions)}
            stray = sorted(p.name for p in folder.iterdir() if p.name not in known)
            if stray:  # nothing reads them, but nobody verified them either: a committed store says what it holds
                raise StoreError(f"{folder}: {', '.join(stray[:5])}{' ...' if len(stray) > 5 else ''} not recorded "
                                 f"in {MANIFEST} (remove, or store a version through kernelopt accept)")
        return manifest

    def already_stored(self, model: str, kernel: str, source: str) -> AcceptOutcome | None:
        """What ``accept`` would answer without verifying: these exact bytes are a stored version
        whose file still holds them and whose entry records a passing verification of them
        (``accept`` stores nothing for them whatever the cascade says). None otherwise: no such
        version, or one whose verification is not recorded (accept verifies and records it)."""
        folder = self.kernel_dir(model, kernel)
        if not folder.is_dir():
            return None
        digest = sha256_text(source)
        with self._locked(folder, shared=True):
            manifest = self._read_manifest(model, kernel)
            existing = next((v for v in (manifest.versions if manifest else []) if v.sha256 == digest), None)
            if manifest is None or existing is None or existing.unverified_reason(existing.fingerprint) is not None:
                return None
            self._read_version(folder, existing, active=existing.version == manifest.active)
        active = existing.version == manifest.active
        return AcceptOutcome(record=existing, stored=False, active=active, message=(
            f"already stored as v{existing.version} ({'active' if active else 'not active'}) in "
            f"{folder / existing.file}; nothing stored (same sha256, not verified again)"))

    def kernel_names(self, model: str) -> list[str]:
        """The kernels ``kernels/<model>/`` holds a folder with a manifest for, sorted."""
        folder = self.model_dir(model)
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and (p / MANIFEST).is_file())

    def model_record(self, model: str) -> ModelRecord:
        """``kernels/<model>/model.json`` (empty when absent); a broken one raises StoreError naming it."""
        path = self.model_dir(model) / MODEL_RECORD
        if not path.exists():
            return ModelRecord(model=model)
        record = load_record(ModelRecord, path)
        if record.model != model:
            raise StoreError(f"{path}: records model {record.model}, not {model}")
        return record

    def _read_manifest(self, model: str, kernel: str) -> Manifest | None:
        """The manifest, read without locking (the caller holds the folder's lock)."""
        folder = self.kernel_dir(model, kernel)
        path = folder / MANIFEST
        if not path.exists():
            stored = sorted(p.name for p in folder.glob("*.py")
                            if VERSION_FILE_RE.fullmatch(p.name) or ORIGINAL_FILE_RE.fullmatch(p.name))
            if stored:
                raise StoreError(f"{folder}: {MANIFEST} is missing but the folder holds {', '.join(stored)}; "
                                 f"restore {MANIFEST} (e.g. from git) or remove the folder")
            return None
        manifest = load_record(Manifest, path)
        if (manifest.model, manifest.kernel) != (model, kernel):
            raise StoreError(f"{path}: records {manifest.model}/{manifest.kernel}, not {model}/{kernel}")
        return manifest

    def _read_version(self, folder: Path, record: VersionRecord, *, active: bool) -> tuple[Path, str]:
        path = folder / record.file
        what = "active version file" if active else "version file"
        try:
            data = read_plain(path, CANDIDATE_BYTES, what)
        except FileNotFoundError as exc:
            raise StoreError(f"{path}: {what} is missing (recorded in {folder / MANIFEST})") from exc
        if hashlib.sha256(data).hexdigest() != record.sha256:
            raise StoreError(f"{path}: contents differ from the sha256 recorded at accept (edited by hand?); "
                             f"restore it (e.g. from git) or accept the edited file as a new version")
        try:
            return path, data.decode("utf-8")
        except UnicodeDecodeError as exc:  # only if the recorded sha256 was of non-UTF-8 bytes
            raise StoreError(f"{path}: not UTF-8 text") from exc

    @contextlib.contextmanager
    def _locked(self, folder: Path, *, shared: bool = False) -> Iterator[None]:
        # Lock the folder itself (Linux/macOS allow flock on a directory) so that no
        # lock file ends up in the user's repo. Readers take it shared so that they never
        # see an accept half done (a version file whose manifest is not written yet).
        try:
            if not shared:
                folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(folder, os.O_RDONLY)
        except OSError as exc:
            raise StoreError(f"cannot {'open' if shared else 'create'} {folder}: {why(exc)}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # --- writing ---------------------------------------------------------------------

    def add_version(
        self, *, model: str, kernel: str, fingerprint: str, args: list[ArgInfo], original_source: str, source: str,
        evidence: Evidence, provenance: Provenance, environment: Environment | None, recipe: Recipe | None = None,
    ) -> AcceptOutcome:
        """Store ``source`` as the next version and make it active.

        Bytes already stored as a version are not stored again (``stored`` is False and
        the existing record is returned, active or not). When ``fingerprint`` differs
        from the manifest's (the compiler kernel changed), the new compiler kernel is
        kept as ``original-<fingerprint>.py``; no original file is ever overwritten. On
        any failure the files this call created are removed and StoreError is raised.
        """
        if not FINGERPRINT_RE.fullmatch(fingerprint):
            raise StoreError(f"{model}/{kernel}: fingerprint {fingerprint!r} cannot be stored (letters, digits, _ and -)")
        folder = self.kernel_dir(model, kernel)
        digest = sha256_text(source)
        created: list[Path] = []
        with self._locked(folder):
            manifest = self._read_manifest(model, kernel)
            if manifest is None:
                manifest = Manifest(model=model, kernel=kernel, fingerprint=fingerprint, args=args)
            for existing in manifest.versions:
                if existing.sha256 == digest:
                    self._read_version(folder, existing, active=False)  # still those bytes, or a StoreError
                    active = existing.version == manifest.active
                    current = manifest.old_fingerprints() is None and existing.fingerprint == fingerprint
                    if (evidence.fingerprint == fingerprint and evidence.sha256 == digest
                            and (not current or existing.unverified_reason(fingerprint) is not None)):
                        return self._reverified(folder, manifest, existing, fingerprint, args, original_source,
                                                evidence, environment, created)
                    return AcceptOutcome(
                        record=existing, stored=False, active=active,
                        message=f"already stored as v{existing.version} ({'active' if active else 'not active'}) "
                                f"in {folder / existing.file}; nothing stored",
                    )
            try:
                original = self._original_for(folder, manifest, fingerprint, original_source, created)
                number = max([v.version for v in manifest.versions] + [0]) + 1
                while True:  # O_EXCL: a version file is never overwritten, even by a hand-made one
                    path = folder / f"v{number}.py"
                    try:
                        create_exclusive(path, source)
                        created.append(path)
                        break
                    except FileExistsError:
                        number += 1
                record = VersionRecord(
                    version=number, file=path.name, sha256=digest, created=datetime.now(timezone.utc),
                    evidence=evidence, provenance=provenance, fingerprint=fingerprint, original=original,
                    recipe=recipe,
                )
                updated = Manifest(
                    model=model, kernel=kernel, fingerprint=fingerprint, original=original,
                    # A changed compiler kernel may take other arguments.
                    args=manifest.args if manifest.fingerprint == fingerprint else args,
                    active=number, environment=environment, versions=[*manifest.versions, record],
                )
                atomic_write(folder / MANIFEST, dump_json(updated))
            except BaseException:
                for leftover in reversed(created):
                    with contextlib.suppress(OSError):
                        leftover.unlink()
                raise
        return AcceptOutcome(record=record, stored=True, active=True,
                             message=f"stored as {path} (v{number}, active)")

    def _reverified(self, folder: Path, manifest: Manifest, existing: VersionRecord, fingerprint: str,
                    args: list[ArgInfo], original_source: str, evidence: Evidence, environment: Environment | None,
                    created: list[Path]) -> AcceptOutcome:
        """Bytes already stored, verified now against compiler kernel ``fingerprint``: record that verification
        on their entry (one that lacked it, a manifest written before fingerprints covered the signature,
        or a compiler kernel that changed only in what its text does not say, e.g. its dtypes). When the
        compiler kernel changed, the entry now replaces the new one and is the active version; its file
        is not written again, and keeps its ``original``."""
        changed = manifest.fingerprint != fingerprint or manifest.old_fingerprints() is not None
        try:
            # The entry keeps its own original (what its recipe was derived from); the manifest names the new one.
            original = self._original_for(folder, manifest, fingerprint, original_source, created) if changed else None
            existing = existing.model_copy(update={"evidence": evidence, "fingerprint": fingerprint})
            versions = [existing if v.version == existing.version else v for v in manifest.versions]
            update: dict[str, object] = {"versions": versions, "schema_version": MANIFEST_SCHEMA_VERSION}
            if changed:
                update.update(fingerprint=fingerprint, original=original, args=args, active=existing.version,
                              retired=None, environment=environment)
            updated = manifest.model_copy(update=update)
            atomic_write(folder / MANIFEST, dump_json(Manifest.model_validate(updated.model_dump())))
        except BaseException:
            for leftover in reversed(created):
                with contextlib.suppress(OSError):
                    leftover.unlink()
            raise
        active = updated.active == existing.version
        return AcceptOutcome(record=existing, stored=False, active=active, message=(
            f"already stored as v{existing.version} ({'active' if active else 'not active'}) in "
            f"{folder / existing.file}; its verification against {fingerprint} is now recorded"))

    def _original_for(self, folder: Path, manifest: Manifest, fingerprint: str, source: str,
                      created: list[Path]) -> str:
        """The original file for ``fingerprint``, created if there is none yet (never overwritten)."""
        if manifest.versions and manifest.fingerprint == fingerprint:
            name = manifest.original
            if not (folder / name).is_file():
                raise StoreError(f"{folder / name}: original file recorded in {folder / MANIFEST} is missing; "
                                 f"restore it (e.g. from git) before accepting")
            return name
        earlier = [v.original for v in manifest.versions if v.fingerprint == fingerprint and v.original]
        if earlier and (folder / earlier[-1]).is_file():
            return earlier[-1]  # the compiler went back to a kernel it generated before
        name = ORIGINAL if not manifest.versions and not (folder / ORIGINAL).exists() else f"original-{fingerprint}.py"
        try:
            create_exclusive(folder / name, source)
            created.append(folder / name)
        except FileExistsError:
            pass  # kept from an earlier accept of this fingerprint: the compiler's kernel at that first accept
        return name

    def retire(self, model: str, kernel: str, reason: str, *, fingerprint: str | None = None) -> Manifest | None:
        """Make the compiler's kernel the one used: no active version (``active`` null), ``retired`` saying
        why. Every version file stays; None when nothing was active (then nothing is written)."""
        folder = self.kernel_dir(model, kernel)
        if not folder.is_dir():
            return None
        with self._locked(folder):
            manifest = self._read_manifest(model, kernel)
            if manifest is None or manifest.active is None:
                return None
            updated = manifest.model_copy(update={
                "active": None, "schema_version": MANIFEST_SCHEMA_VERSION,
                "retired": Retirement(version=manifest.active, reason=reason, when=datetime.now(timezone.utc),
                                      fingerprint=fingerprint)})
            atomic_write(folder / MANIFEST, dump_json(updated))
        return updated

    def compile_choice(self, model: str, shape: str | None = None) -> CompileChoice | None:
        """``model.json``'s compile setting at declared shape ``shape`` (``compile_at``'s entry there, else the one
        ``compile`` names for every shape; None: the defaults); StoreError when this version does not know it."""
        record = self.model_record(model)
        at = record.compile_at or {}
        choice = at[shape] if shape is not None and shape in at else record.compile
        if choice is not None and (why := unknown_variant(choice.variant)):
            raise StoreError(f"{self.model_dir(model) / MODEL_RECORD}: {why}")
        return choice

    def compile_choices(self, model: str) -> list[CompileChoice]:
        """Every compile setting ``model.json`` records (each shape's, then the one for every shape): production
        applies the one whose graphs a compiled graph's inputs are among."""
        record = self.model_record(model)
        choices = [c for c in [*(record.compile_at or {}).values(), record.compile] if c is not None]
        for choice in choices:
            if why := unknown_variant(choice.variant):
                raise StoreError(f"{self.model_dir(model) / MODEL_RECORD}: {why}")
        return choices

    def compile_variant(self, model: str, shape: str | None = None) -> str | None:
        """The compile variant recorded in ``model.json`` at ``shape`` (:meth:`compile_choice`; None: the
        defaults); StoreError when this version does not know it."""
        choice = self.compile_choice(model, shape)
        return None if choice is None else choice.variant

    def launch_configs(self, model: str, shape: str | None = None) -> dict[str, dict[str, int]] | None:
        """The launch configurations recorded with ``model.json``'s compile setting at ``shape`` (kernel
        fingerprint -> launch point; None: no setting, or none recorded): what every compile under it launches."""
        choice = self.compile_choice(model, shape)
        return None if choice is None else choice.launch_configs

    def save_compile(self, model: str, choice: CompileChoice | None, shape: str | None = None,
                     graphs: list[list[str]] | None = None) -> None:
        """Record the model's compile settings (None: back to the defaults); at declared shape ``shape``, that
        shape's alone (``compile_at``). A setting ``compile`` names for every shape (a store written before
        per-shape choices) then no longer applies at ``shape``: the shape's graphs (``graphs``, default
        ``choice.graphs``) leave its list, since production matches a setting to a graph by the graph's inputs; one
        left with none is removed."""
        folder = self.model_dir(model)
        with self._locked(folder):
            record = self.model_record(model)
            if shape is None:
                record.compile = choice
            else:
                record.compile_at = {**(record.compile_at or {}), shape: choice}
                # Signatures as capture writes them (capture.launch_signature): equal inputs, equal text.
                here = {tuple(g) for g in (graphs if graphs is not None else
                                           choice.graphs if choice is not None else None) or []}
                shared = record.compile
                if shared is not None and shared.graphs is not None and here:
                    shared.graphs = [g for g in shared.graphs if tuple(g) not in here]
                    if not shared.graphs:  # it applies at no graph any more
                        record.compile = None
            atomic_write(folder / MODEL_RECORD, dump_json(record))

    def save_baseline(self, model: str, baseline: ModelBaseline, shape: str | None = None) -> None:
        """Record ``baseline`` for its environment (and ``shape``, of a problem with SHAPES: :func:`baseline_key`)."""
        folder = self.model_dir(model)
        with self._locked(folder):
            record = self.model_record(model)
            record.baselines[baseline_key(baseline.environment, shape)] = baseline
            atomic_write(folder / MODEL_RECORD, dump_json(record))


def baseline_key(env: Environment, shape: str | None = None) -> str:
    """``model.json``'s key of a baseline: the environment, and for a problem with SHAPES the shape
    (``...|shape b64``): a model timed at batch 8 says nothing about batch 64."""
    return environment_key(env) + (f"|shape {shape}" if shape else "")


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise StoreError(f"{what} {name!r} cannot name a folder in the kernel store "
                         f"(letters, digits, _ . + -, not starting with . or -)")


def model_baseline(verdict: Verdict, kernels: dict[str, int], measured: datetime) -> ModelBaseline:
    """``model.json``'s record of ``verdict``: the model's timing and worst error with ``kernels`` (name -> version)."""
    assert verdict.environment is not None
    return ModelBaseline(environment=verdict.environment, measured=measured, kernels=kernels,
                         timing=verdict.model_timing, worst_error_vs_fp64=worst_error(verdict.errors))


def accept_verdict(store: KernelStore, model: str, kernel: str, source: str, verdict: Verdict, *,
                   allow_no_gain: bool = False, provenance: Provenance | None = None,
                   combined_timing: Timing | None = None, combined_with: list[str] | None = None,
                   recipe: Recipe | None = None, alternatives: list[tuple[str, str]] | None = None,
                   shape: str | None = None) -> AcceptOutcome:
    """Store ``source``, the candidate ``verdict`` judged, as the next active version of ``model``/``kernel``.

    ``source`` is the text that was verified (never read again from disk); when the
    verdict records a sha256 of the candidate, ``source`` must match it. Rejected
    candidates, and on a GPU candidates that are correct but not faster (unless
    ``allow_no_gain``), are not stored; bytes already stored are not stored twice.
    ``combined_timing``/``combined_with``: the model measured with this version and those
    kernels' versions together, recorded in the evidence (the caller judged it).
    ``recipe``: how ``source`` was made (default: derived from the compiler kernel and ``source``,
    with ``alternatives``, (variant, source) of other Inductor compiles of the kernel, as bases).
    ``shape``: the declared shape the verdict was judged at (a problem with SHAPES): stored in
    ``<kernel>@<shape>/``, its baseline under that shape.
    """

    if verdict.status == "rejected":
        return AcceptOutcome(None, stored=False, active=False,
                             message=f"not stored: rejected{f' at {verdict.reason}' if verdict.reason else ''}")
    if verdict.speed_measured and verdict.status != "accepted" and not allow_no_gain:
        return AcceptOutcome(None, stored=False, active=False, message=(
            "not stored: correct but not faster beyond noise (use --allow-no-gain to store it anyway)"))
    if (verdict.model, verdict.kernel) != (model, kernel):
        raise StoreError(f"{model}/{kernel}: the verdict is for {verdict.model}/{verdict.kernel}; not stored")
    info = verdict.kernel_info
    if info is None:
        raise StoreError(f"{model}/{kernel}: the verdict carries no kernel record; not stored")
    if info.name != kernel or (verdict.fingerprint is not None and verdict.fingerprint != info.fingerprint):
        raise StoreError(f"{model}/{kernel}: the verdict's kernel record is for {info.name} "
                         f"(fingerprint {info.fingerprint}), not {kernel} (fingerprint {verdict.fingerprint}); not stored")
    if verdict.candidate_sha256 and sha256_text(source) != verdict.candidate_sha256:
        raise StoreError(f"{verdict.candidate or f'{model}/{kernel}'}: the source to store is not the one that was "
                         f"verified (sha256 differs); not stored")
    store.model_record(model)  # a broken model.json fails before anything is written
    evidence = Evidence(
        status="accepted" if verdict.status == "accepted" else "correct", speed_measured=verdict.speed_measured,
        model_timing=verdict.model_timing, kernel_timing=verdict.kernel_timing, errors=verdict.errors,
        seeds=verdict.seeds, environment=verdict.environment, combined_timing=combined_timing,
        combined_with=combined_with or [], fingerprint=info.fingerprint, sha256=sha256_text(source),
        launches=verdict.launches, training=info.training,
    )
    original = render_dump(info, model)
    if recipe is None:
        recipe = derive_recipe(original, source, fingerprint=info.fingerprint, alternatives=alternatives or ())
    folder = store_name(kernel, shape)
    outcome = store.add_version(
        model=model, kernel=folder, fingerprint=info.fingerprint, args=info.args,
        original_source=original, source=source, evidence=evidence,
        provenance=provenance or Provenance(), environment=verdict.environment, recipe=recipe,
    )
    if outcome.stored and outcome.record is not None and verdict.environment is not None:
        try:
            baseline = model_baseline(verdict, {folder: outcome.record.version}, outcome.record.created)
            store.save_baseline(model, baseline, shape)
        except StoreError as exc:
            raise StoreError(f"{exc} ({outcome.message}, but its model baseline was not recorded)") from exc
    return outcome
