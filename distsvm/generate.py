"""Generate a synthetic text-like dataset straight into a store, in parallel: the job that runs
:mod:`distsvm.storage.generate` (which makes one block) a task a block and commits the store.

Each task generates one row block (:func:`distsvm.storage.generate.write_block`) and
writes it with the storage writer, so memory is bounded by a block (plus the
generator's two length-M marker tables), and the store is committed only when
every block is written (:func:`distsvm.storage.dataset.commit`).  The data are
synthetic: see :mod:`distsvm.storage.generate` for their statistics.
"""

from __future__ import annotations

import time

import numpy as np

from distsvm.storage import Dataset
from distsvm.storage import dataset as ds
from distsvm.storage import generate as gen
from distsvm.storage import ingest as ing
from distsvm.storage.errors import InputDataError

from .ingest import DEFAULT_BLOCK_MB, staging
from .params import check_settings
from .progress import Progress


def _check(name: str, value, ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(f"The '{name}' parameter of generate must be {what}. Got {value!r} instead.")


def check(*, rows, features, nnz_per_row, seed, zipf, density, noise) -> None:
    """The values of :func:`generate`, checked by the command line too before anything
    starts: ValueError in scikit-learn's words otherwise."""
    _check("rows", rows, isinstance(rows, (int, np.integer)) and rows >= 1, "an int >= 1")
    _check("features", features, isinstance(features, (int, np.integer)) and features >= 2,
           "an int >= 2")
    _check("nnz_per_row", nnz_per_row,
           isinstance(nnz_per_row, (int, np.integer)) and 1 <= nnz_per_row <= features // 2,
           f"an int in [1, features/2 = {features // 2}]")
    _check("seed", seed, isinstance(seed, (int, np.integer)) and 0 <= seed < 2**63,
           "an int in [0, 2**63)")
    _check("zipf", zipf, np.isfinite(zipf) and zipf > 0, "a float > 0")
    _check("density", density, 0 < density <= 1, "a float in (0, 1]")
    _check("noise", noise, 0 <= noise < 0.5, "a float in [0, 0.5)")


def generate(store: str, *, rows: int, features: int, nnz_per_row: int, seed: int = 0,
             zipf: float = 1.0, density: float = 0.1, noise: float = 0.05,
             block_rows: int | None = None, block_mb: float | None = DEFAULT_BLOCK_MB,
             client=None, overwrite: bool = False, storage_options: dict | None = None,
             progress: Progress | None = None, compression: str = "lz4") -> Dataset:
    """Write ``rows`` × ``features`` synthetic rows (about ``nnz_per_row`` non-zeros each)
    into a new dataset at ``store``, on ``client``'s workers (or in-process without one);
    ``compression``: the blocks' codec (ingest's).

    The result depends on the arguments only — not on the number of workers.
    """
    progress = progress or Progress(quiet=True)
    check(rows=rows, features=features, nnz_per_row=nnz_per_row, seed=seed, zipf=zipf,
          density=density, noise=noise)
    if not block_rows and not block_mb:
        raise ValueError("Give a block size: block_rows or block_mb")
    check_settings("generate", {"block_rows": block_rows,
                                "block_mb": None if block_rows else block_mb,
                                "compression": compression})
    start = time.perf_counter()
    n_blocks = ing.n_blocks_for(rows, rows * nnz_per_row, 4, block_rows, block_mb)
    edges = [(b * rows) // n_blocks for b in range(n_blocks + 1)]
    with staging(store, overwrite, storage_options, client) as (stage, run):
        for b in range(n_blocks):
            run.submit(gen.write_block, stage, b, edges[b + 1] - edges[b], n_features=features,
                       nnz_per_row=nnz_per_row, zipf=zipf, density=density, noise=noise,
                       seed=seed, storage_options=storage_options, compression=compression)
        results = run.results(progress, "generate: blocks")
        blocks = tuple(info for info, _ in results)
        counts = tuple(int(sum(c[k] for _, c in results)) for k in range(len(gen.CLASSES)))
        if min(counts) == 0:
            raise InputDataError(f"{store}: the generated labels have only one class; "
                                 "use more rows or another seed")
        meta = ds.DatasetMeta(
            n_rows=rows, n_features=features, nnz=sum(b.nnz for b in blocks), dtype="float32",
            classes=gen.CLASSES, class_counts=counts, blocks=blocks, created=ds.now_iso(),
            source={"input": "synthetic (distsvm generate)", "generator": "text-like v1",
                    "rows": rows, "features": features, "nnz_per_row": nnz_per_row,
                    "seed": seed, "zipf": zipf, "density": density, "noise": noise,
                    "block_rows": block_rows, "block_mb": block_mb})
        dataset = ds.commit(stage, store, meta, overwrite, storage_options)
    progress.note(f"generate: wrote {store}: {rows} rows, {meta.nnz} non-zeros, {n_blocks} "
                  f"blocks in {time.perf_counter() - start:.1f}s")
    return dataset
