"""Checkpoints of a training run, for ``distsvm resume``: the one interface every solver's
coordinator uses.  (:mod:`distsvm.storage.checkpoint` is the layer below: the files a checkpoint
is made of — whole-file writes, checksummed array bundles, JSON documents.)

A checkpoint of round r lives in ``RUN/checkpoints/<r>/``: the coordinator's arrays
(``w``: O(n_features)) in ``coordinator.npz``, the per-block solver state in files the
workers that own the blocks write themselves (for DCD, ``block-<name>.npz`` with α and
the shrinking state), and ``manifest.json`` — the round, the solver, its JSON state (RNG
state, history, …), the job's parameters and the SHA-256 of every file — written last.
The manifest is the commit: a checkpoint without one, or with a file that fails its
checksum, is torn and never loaded; :meth:`Checkpointer.latest` falls back to the
previous one.  Every file is written whole or not at all (:mod:`distsvm.storage.checkpoint`).

A solver coordinator calls, every round, ``if ckpt and ckpt.due(r): ckpt.save(r, …)``
after asking its workers to write their blocks' state into ``ckpt.directory(r)``, and at
its start ``ckpt.latest()`` to continue from the newest complete checkpoint.  A one-vs-rest
run whose K binary problems each run their own solver gives problem k the checkpoints of
``RUN/problems/<k>/`` (:meth:`Checkpointer.problem`).  What the
solver keeps must make the continued run take the same choices as an uninterrupted one
(its RNG state, its shrinking thresholds), so that a resumed run reaches the same
optimum.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import numpy as np

from distsvm.storage import checkpoint as files
from distsvm.storage.dataset import DIGEST, check_metadata_digest, seal_metadata
from distsvm.storage.errors import CorruptStoreError
from distsvm.storage.paths import resolve

from .progress import Progress

FORMAT = "distsvm-checkpoint"
FORMAT_VERSION = 3  # 2: one history per problem ("histories"), by the round driver; 3: sealed
READ_VERSIONS = (2, 3)  # 3's manifest carries a SHA-256 of itself ("digest"), 2's has none
# tests: seconds to sleep between writing a checkpoint's data and committing its manifest
PAUSE_ENV = "DISTSVM_TEST_CHECKPOINT_PAUSE"
COORDINATOR = "coordinator.npz"
MANIFEST = "manifest.json"


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: round, solver state (JSON), the coordinator's arrays, and the
    digests of the files the workers wrote (to hand back to them on restore)."""

    round: int
    directory: str
    state: dict
    arrays: dict
    files: dict


class Checkpointer:
    """Write and find the checkpoints of the run in ``run_dir``, every ``every`` rounds.

    ``params`` (JSON) identify the job: a checkpoint written with other parameters is
    refused on restore, with the first key that differs.
    """

    def __init__(self, run_dir: str, every: int | None, params: dict | None = None, *,
                 keep: int = 2, storage_options: dict | None = None,
                 progress: Progress | None = None):
        self.run_dir = resolve(run_dir)  # the workers write their blocks' state under it
        self.every = every
        self.params = json.loads(json.dumps(params or {}))  # as the manifest holds them
        self.keep = keep
        self.storage_options = storage_options
        self.progress = progress or Progress(quiet=True)

    def due(self, r: int) -> bool:
        return bool(self.every) and r % self.every == 0

    def problem(self, k: int, progress: Progress | None = None) -> Checkpointer:
        """The checkpoints of problem k of a one-vs-rest run that trains its K binary
        problems each by its own solver (:func:`distsvm.solvers.ovr.solve`): a Checkpointer
        of ``RUN/problems/<k>/``, with the same policy and the parameters and ``problem=k``."""
        return Checkpointer(files.join(self.run_dir, "problems", str(k)), self.every,
                            {**self.params, "problem": k}, keep=self.keep,
                            storage_options=self.storage_options,
                            progress=progress or self.progress)

    def directory(self, r: int) -> str:
        return files.join(self.run_dir, "checkpoints", f"{r:08d}")

    def save(self, r: int, solver: str, arrays: dict[str, np.ndarray], state: dict,
             worker_files: dict[str, str] | None = None) -> None:
        """Commit the checkpoint of round ``r``: ``arrays`` and the manifest, after the files
        ``worker_files`` ({name: SHA-256}) the workers already wrote into
        :meth:`directory`; then drop all but the newest ``keep`` checkpoints."""
        d = self.directory(r)
        digests = dict(worker_files or {})
        digests[COORDINATOR] = files.write_arrays(files.join(d, COORDINATOR), arrays,
                                                  self.storage_options)
        pause = float(os.environ.get(PAUSE_ENV) or 0)
        if pause:
            time.sleep(pause)
        manifest = json.loads(json.dumps(
            {"format": FORMAT, "format_version": FORMAT_VERSION, "round": r, "solver": solver,
             "params": self.params, "state": state, "files": digests},
            allow_nan=True, default=files.json_default))  # as a reader will see it
        files.write_json(files.join(d, MANIFEST), seal_metadata(manifest),
                         self.storage_options)
        self.progress.note(f"round {r}: checkpoint written to {d}")
        names = files.listdir(files.join(self.run_dir, "checkpoints"), self.storage_options)
        for old in [n for n in names if n.isdigit() and int(n) < r][: -self.keep + 1 or None]:
            files.remove(files.join(self.run_dir, "checkpoints", old), self.storage_options)

    def latest(self, solver: str) -> Checkpoint | None:
        """The newest complete checkpoint (every file present and matching its checksum),
        or None; ValueError if it belongs to another solver or other parameters."""
        root = files.join(self.run_dir, "checkpoints")
        for name in reversed(files.listdir(root, self.storage_options)):
            if not name.isdigit():
                continue
            d = files.join(root, name)
            try:
                m = files.read_json(files.join(d, MANIFEST), self.storage_options)
                check_manifest(d, name, m)
                for f, digest in m["files"].items():
                    if f != COORDINATOR:  # read, check and forget: memory of one file
                        files.read_arrays(files.join(d, f), digest, self.storage_options)
                arrays = files.read_arrays(files.join(d, COORDINATOR), m["files"][COORDINATOR],
                                           self.storage_options)
            except (FileNotFoundError, CorruptStoreError, ValueError, KeyError) as exc:
                self.progress.note(f"checkpoint {d} is incomplete or damaged, not used: {exc}")
                continue
            self._check(d, m, solver)
            return Checkpoint(int(m["round"]), d, m["state"], arrays, m["files"])
        return None

    def _check(self, where: str, m: dict, solver: str) -> None:
        if m["solver"] != solver:
            raise ValueError(f"{where}: the checkpoint is of solver {m['solver']!r}, "
                             f"this job runs {solver!r}")
        for k in sorted(set(self.params) | set(m["params"])):
            if self.params.get(k) != m["params"].get(k):
                raise ValueError(f"{where}: the checkpoint was written with {k}="
                                 f"{m['params'].get(k)!r}, this job has {k}="
                                 f"{self.params.get(k)!r}; it cannot continue this run")



def check_manifest(where: str, name: str, m) -> None:
    """Refuse (CorruptStoreError) a manifest that is not one this version reads, whose
    SHA-256 (``digest``, format 3) does not match its content — a manifest edited by hand,
    e.g. its round, is never resumed from —, whose round is not its directory's ``name``,
    or whose file names leave its directory."""
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise CorruptStoreError(f"{where}: not a {FORMAT} manifest")
    version = m.get("format_version")
    if version not in READ_VERSIONS:
        raise CorruptStoreError(f"{where}: checkpoint format version {version!r} is not one "
                                f"of {list(READ_VERSIONS)}")
    if version >= 3 and DIGEST not in m:
        raise CorruptStoreError(f"{where}: the manifest has no digest (format {version} "
                                "manifests are sealed)")
    check_metadata_digest(where, m, "checkpoint manifest")
    if not isinstance(m.get("round"), int) or m["round"] != int(name):
        raise CorruptStoreError(f"{where}: the manifest's round {m.get('round')!r} is not its "
                                f"directory's ({int(name)})")
    names = m.get("files")
    if not isinstance(names, dict) or COORDINATOR not in names or any(
            not isinstance(f, str) or "/" in f or "\\" in f or f.startswith(".")
            for f in names):
        raise CorruptStoreError(f"{where}: the manifest's file list is malformed")
