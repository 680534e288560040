"""A model registry: immutable, numbered versions of named models and a ``current`` pointer.
(Not :mod:`distsvm.solvers.registry`, the table of solvers.)

Layout, under a registry path or fsspec URL::

    REGISTRY/NAME/v1/model.dsvm     the model (distsvm's format)
    REGISTRY/NAME/v1/version.json   metrics, lineage, the model file's SHA-256 — written last
    REGISTRY/NAME/current.json      {"version": N, "sha256": …} — replaced whole

A version is complete once its ``version.json`` exists (it is written after the model
file, and names its checksum); a directory without one (a killed publish) is skipped,
and its number is never reused.  Versions are never rewritten: :func:`publish` takes
the next number and refuses a directory that already holds a ``version.json``.  Publishes
and promotions of a model hold its lock (``REGISTRY/NAME/.publish.lock``,
:mod:`distsvm.storage.lock`), so two concurrent publishes get distinct versions.
``current.json`` is written whole (temp file + rename locally, one PUT on object
stores) and only to a complete version, so a promotion killed at any step leaves it
pointing at the old or the new version, both complete.

Lineage: the training store's URL and content fingerprint (a SHA-256 of its block
table, which holds every block's checksums), the parameters, the run directory, and
the distsvm version and git commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile

from distsvm.storage import checkpoint as files
from distsvm.storage.dataset import now_iso
from distsvm.storage.errors import shown
from distsvm.storage.lock import DEFAULT_TIMEOUT as DEFAULT_LOCK_TIMEOUT
from distsvm.storage.lock import Lock

from . import __version__
from .model import Model, load_model, save_model

MODEL_FILE = "model.dsvm"
VERSION_FILE = "version.json"
CURRENT_FILE = "current.json"
LOCK_FILE = ".publish.lock"  # the writers' lock (distsvm.storage.lock), beside the versions
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class RegistryError(ValueError):
    """A missing model, version or registry, or a damaged version."""


def _check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise RegistryError(f"invalid model name {name!r} (letters, digits, '.', '_', '-')")
    return name


def fingerprint(dataset) -> str:
    """The content fingerprint of a dataset: SHA-256 of its block table and shape."""
    m = dataset.meta.to_json()
    doc = {k: m[k] for k in ("n_rows", "n_features", "nnz", "dtype", "classes", "blocks")}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def git_commit() -> str | None:
    """The git commit of the distsvm source tree, if it is a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=os.path.dirname(os.path.abspath(__file__)))
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def lineage(dataset, params: dict, run_dir: str | None = None) -> dict:
    return {"dataset": dataset.url, "dataset_fingerprint": fingerprint(dataset),
            "dataset_rows": dataset.meta.n_rows, "params": params, "run": run_dir,
            "distsvm_version": __version__, "git_commit": git_commit()}


def versions(registry: str, name: str, storage_options: dict | None = None) -> list[int]:
    """The complete versions of model ``name``, oldest first."""
    root = files.join(str(registry), _check_name(name))
    out = []
    for d in files.listdir(root, storage_options):
        if re.fullmatch(r"v\d+", d) and VERSION_FILE in files.listdir(files.join(root, d),
                                                                      storage_options):
            out.append(int(d[1:]))
    return sorted(out)


def lock(registry: str, name: str, storage_options: dict | None = None,
         timeout: float | None = None, progress=None) -> Lock:
    """The writers' lock of model ``name`` (``REGISTRY/NAME/.publish.lock``, :mod:`distsvm.storage.lock`):
    publishes and promotions of one model take it, so two publishes get distinct versions."""
    root = files.join(str(registry), _check_name(name))
    return Lock(root, storage_options, lock_at=files.join(root, LOCK_FILE),
                what=f"{registry}/{name}", progress=progress,
                timeout=DEFAULT_LOCK_TIMEOUT if timeout is None else timeout)


def publish(registry: str, name: str, model: Model, *, metrics: dict, lineage: dict,
            storage_options: dict | None = None, lock_timeout: float | None = None) -> int:
    """Add ``model`` as the next version of ``name``; return its number (not promoted).
    Holds the model's :func:`lock` (waiting up to ``lock_timeout`` seconds)."""
    with lock(registry, name, storage_options, lock_timeout):
        return _publish(registry, name, model, metrics, lineage, storage_options)


def _publish(registry, name, model, metrics, lineage, storage_options) -> int:
    root = files.join(str(registry), _check_name(name))
    taken = [int(d[1:]) for d in files.listdir(root, storage_options) if re.fullmatch(r"v\d+", d)]
    version = max(taken, default=0) + 1
    vdir = files.join(root, f"v{version}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, MODEL_FILE)
        save_model(model, path)
        with open(path, "rb") as f:
            data = f.read()
    if VERSION_FILE in files.listdir(vdir, storage_options):  # a concurrent publisher won
        raise RegistryError(f"{vdir}: version exists already; versions are immutable")
    files.write_bytes(files.join(vdir, MODEL_FILE), data, storage_options)
    files.write_json(files.join(vdir, VERSION_FILE),
                     {"name": name, "version": version, "created": now_iso(),
                      "model_sha256": files.sha256(data), "solver": model.solver,
                      "loss": model.loss, "metrics": metrics, "lineage": lineage},
                     storage_options)
    return version


def _named(names: list) -> str:
    """At most 10 names, and how many there are in all (:func:`distsvm.storage.errors.shown`)."""
    return shown(names, 10, str) or "none"


def check_exists(registry: str, storage_options: dict | None = None) -> None:
    """RegistryError unless ``registry`` is a folder (or a remote prefix) that exists."""
    if files._is_local(str(registry)):
        found = os.path.isdir(files._local_path(str(registry)))
    else:
        fs, path = files._fs(registry, storage_options)
        found = fs.exists(path)
    if not found:
        raise RegistryError(f"{registry}: no model registry here (no such directory)")


def models(registry: str, storage_options: dict | None = None) -> list[str]:
    """The names of the models of ``registry`` that have a complete version."""
    return [n for n in files.listdir(registry, storage_options)
            if _NAME.match(n) and versions(registry, n, storage_options)]


def check_model(registry: str, name: str, storage_options: dict | None = None) -> list[int]:
    """The complete versions of ``name``; RegistryError naming the registry's models (a
    bounded list) if it has none, or the registry if it does not exist."""
    found = versions(registry, name, storage_options)
    if not found:
        check_exists(registry, storage_options)
        raise RegistryError(f"{registry}: no model {name!r} (its models: "
                            f"{_named(models(registry, storage_options))})")
    return found


def show(registry: str, name: str, version: int | None = None,
         storage_options: dict | None = None) -> dict:
    """The record of a version (default: the current one) with ``current`` marked."""
    cur = current_version(registry, name, storage_options)
    version = cur if version is None else version
    if version is None:
        found = check_model(registry, name, storage_options)
        raise RegistryError(f"{registry}/{name}: no current version (promote one first: "
                            f"versions {_named([f'v{v}' for v in found])})")
    path = files.join(str(registry), _check_name(name), f"v{version}", VERSION_FILE)
    try:
        rec = _read(path, storage_options)
    except FileNotFoundError as exc:
        found = check_model(registry, name, storage_options)
        raise RegistryError(f"{registry}/{name}: no complete version v{version} (versions "
                            f"{_named([f'v{v}' for v in found])})") from exc
    if not isinstance(rec, dict) or not {"version", "model_sha256"} <= set(rec):
        raise RegistryError(f"{path}: damaged: not a version record")
    return {**rec, "current": version == cur}


def _read(path: str, storage_options: dict | None):
    """A registry document, bounded (:func:`distsvm.storage.checkpoint.read_json`); a damaged one is
    a RegistryError naming it."""
    from distsvm.storage.errors import MalformedDocumentError

    try:
        return files.read_json(path, storage_options)
    except MalformedDocumentError as exc:
        raise RegistryError(f"{exc} (damaged)") from exc


def load(registry: str, name: str, version: int | None = None,
         storage_options: dict | None = None) -> Model:
    """The model of a version (default: the current one), checked against its checksum."""
    rec = show(registry, name, version, storage_options)
    url = files.join(str(registry), name, f"v{rec['version']}", MODEL_FILE)
    data = files.read_bytes(url, storage_options)
    if files.sha256(data) != rec["model_sha256"]:
        raise RegistryError(f"{url}: fails its SHA-256 check (damaged)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, MODEL_FILE)
        with open(path, "wb") as f:
            f.write(data)
        return load_model(path)


def listing(registry: str, name: str | None = None,
            storage_options: dict | None = None) -> tuple[dict, list]:
    """{model name: {"versions": [...], "current": version or None}} of ``name`` (None: every
    model of ``registry``), and the RegistryError of each model that could not be read: the
    sound ones are listed whatever the others."""
    check_exists(registry, storage_options)  # a mistyped path is not an empty registry
    if name:
        check_model(registry, name, storage_options)
    names = [name] if name else models(registry, storage_options)
    out, damaged = {}, []
    for n in names:
        try:
            out[n] = {"versions": versions(registry, n, storage_options),
                      "current": current_version(registry, n, storage_options)}
        except RegistryError as exc:
            damaged.append(exc)
    return out, damaged


def current_version(registry: str, name: str, storage_options: dict | None = None) -> int | None:
    """The current version of ``name``, or None if none was promoted; a damaged pointer
    is a RegistryError naming it."""
    path = files.join(str(registry), _check_name(name), CURRENT_FILE)
    try:
        doc = _read(path, storage_options)
    except FileNotFoundError:
        return None
    version = doc.get("version") if isinstance(doc, dict) else None
    if type(version) is not int or version < 1:
        raise RegistryError(f"{path}: damaged: its 'version' is {version!r}, not a version "
                            "number")
    return version


def promote(registry: str, name: str, version: int, storage_options: dict | None = None,
            lock_timeout: float | None = None) -> None:
    """Make ``version`` current: it must be complete; ``current.json`` is replaced whole
    (holding the model's :func:`lock`)."""
    rec = show(registry, name, version, storage_options)
    load(registry, name, version, storage_options)  # the model file is whole and matches
    with lock(registry, name, storage_options, lock_timeout):
        files.write_json(files.join(str(registry), name, CURRENT_FILE),
                         {"version": version, "model_sha256": rec["model_sha256"],
                          "promoted": now_iso()}, storage_options)
