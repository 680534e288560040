"""The per-worker tasks of SVM-ALM: map-reduce passes over the row blocks a worker owns.

Each task covers all the blocks of one worker and returns one small reply (a
few n_features-vectors and scalars), which the coordinator sums over workers.
The per-row vectors λ and e stay in the memory of the worker that owns the
block (:func:`distsvm.workers.blocks.run_state`) for the whole run; they are never
gathered.  The vector ``x`` passed around is ``[w; b]`` when ``bias >= 0``
(b as the weight of a constant-1 feature) and ``w`` otherwise.
"""

from __future__ import annotations

import numpy as np

from distsvm.storage import BlockInfo, CorruptStoreError

from . import blocks
from .kernels import alm as kernel
from .kernels.linear import decision_values


def _state(run, info):
    return blocks.run_state(run, info.name, lambda: {"lam": np.zeros(info.n_rows),
                                                      "e": np.zeros(info.n_rows)})


def save_blocks(run: str, infos: list[BlockInfo], directory: str,
                storage_options: dict | None = None) -> dict[str, str]:
    """Checkpoint: write λ and e of blocks ``infos`` into ``directory``
    (:func:`blocks.write_states`); return {file name: SHA-256}."""
    def arrays(s, info):
        return {k: s.get(k, np.zeros(info.n_rows)) for k in ("lam", "e")}

    return blocks.write_states(run, infos, directory, arrays, storage_options)


def load_blocks(run: str, infos: list[BlockInfo], directory: str, digests: dict[str, str],
                storage_options: dict | None = None) -> int:
    """Resume or recover: set λ and e of blocks ``infos`` from a checkpoint written by
    :func:`save_blocks`, each file checked against its digest; return the blocks loaded."""
    for info, (s, a) in zip(infos, blocks.read_states(run, infos, directory, digests,
                                                      storage_options)):
        for k in ("lam", "e"):  # never trust a block state: one value per row (kernels index)
            if k not in a or a[k].shape != (info.n_rows,) or a[k].dtype.kind != "f":
                raise CorruptStoreError(f"{directory}/block-{info.name}.npz: array {k} is "
                                        f"not {info.n_rows} floats; refused")
        s.update(lam=a["lam"].copy(), e=a["e"].copy())
    return len(infos)


def gradient_pass(url: str, infos: list[BlockInfo], run: str, x: np.ndarray, *, bias: float,
                  n_features: int, positive: int, mu_prev: float, mu: float, C: float,
                  p: float, cache_bytes: int, storage_options: dict | None = None,
                  threads: int = 1) -> dict:
    """Steps (9), objective (4), (10) and the Xr of (16) at ``x``, in one pass over the blocks
    (shared among ``threads`` threads, :func:`blocks.each_block`).

    See :func:`distsvm.workers.kernels.alm.alm_pass`.  Returns the sums over this worker's blocks:
    ``loss`` = Σ ξᵢᵖ, ``gloss`` = Σ ∂ξᵢᵖ/∂x (n_features [+1]), ``xtr`` = [Xᵀr; Σ r],
    ``resid_sq`` = ‖Xᵀw + 1b − y + e‖² of the previous iteration, ``correct`` rows.
    """
    dim = n_features + (bias >= 0)

    def make():
        return {"loss": 0.0, "gloss": np.zeros(dim), "xtr": np.zeros(dim), "resid_sq": 0.0,
                "correct": 0, "gb": 0.0, "rs": 0.0}

    def visit(info, block, acc, rows):
        s, part = _state(run, info), blocks.rows_of(block, rows)
        out = kernel.alm_pass(part.indptr, part.indices, part.data, part.y, positive, x,
                              bias, n_features, s["lam"][rows], s["e"][rows], mu_prev, mu, C,
                              p, acc["xtr"], acc["gloss"])
        for k, v in zip(("loss", "gb", "rs", "resid_sq", "correct"), out):
            acc[k] += v

    total = blocks.each_block(url, infos, cache_bytes, storage_options, threads, visit, make)
    if bias >= 0:
        total["gloss"][n_features] = total["gb"]
        total["xtr"][n_features] = total["rs"]
    return {k: total[k] for k in ("loss", "gloss", "xtr", "resid_sq", "correct")}


def direction_pass(url: str, infos: list[BlockInfo], xg: np.ndarray, *, bias: float,
                   n_features: int, cache_bytes: int, storage_options: dict | None = None,
                   threads: int = 1) -> float:
    """‖Xᵀw_g + 1b_g‖² over this worker's blocks (shared among ``threads`` threads): the
    denominator of the step size (18)."""
    def visit(info, block, acc, rows):
        part = blocks.rows_of(block, rows)
        v = np.empty(part.n_rows)
        decision_values(part.indptr, part.indices, part.data, xg, bias, n_features, v)
        acc["sq"] += float(v @ v)

    return blocks.each_block(url, infos, cache_bytes, storage_options, threads, visit,
                             lambda: {"sq": 0.0})["sq"]


def residuals(url: str, infos: list[BlockInfo], run: str, x: np.ndarray, *, bias: float,
              n_features: int, positive: int, mu: float, cache_bytes: int,
              storage_options: dict | None = None) -> list[np.ndarray]:
    """rᵢ = wᵀxᵢ + b − zᵢ with z = y − e − λ/µ (14), per block: the right side of (15)
    relative to the current ``x`` (exact SVM-ALM only; uses e and λ as left by
    :func:`gradient_pass`)."""
    out = []
    for info in infos:
        block, _ = blocks.load(url, info, cache_bytes, storage_options)
        s = _state(run, info)
        m = np.empty(block.n_rows)
        decision_values(block.indptr, block.indices, block.data, x, bias, n_features, m)
        y = np.where(block.y == positive, 1.0, -1.0)
        out.append(m - y + s["e"] + s["lam"] / mu)
    return out


def matvec(url: str, infos: list[BlockInfo], x: np.ndarray, *, bias: float, n_features: int,
           cache_bytes: int, storage_options: dict | None = None) -> list[np.ndarray]:
    """[X 1]·x per block (the row part of the operator of (15))."""
    out = []
    for info in infos:
        block, _ = blocks.load(url, info, cache_bytes, storage_options)
        v = np.empty(block.n_rows)
        decision_values(block.indptr, block.indices, block.data, x, bias, n_features, v)
        out.append(v)
    return out


def rmatvec(url: str, infos: list[BlockInfo], vs: list[np.ndarray], *, bias: float,
            n_features: int, cache_bytes: int, storage_options: dict | None = None) -> np.ndarray:
    """[X 1]ᵀ·v summed over this worker's blocks (``vs`` holds one slice of v per block)."""
    out = np.zeros(n_features + (bias >= 0))
    total = 0.0
    for info, v in zip(infos, vs):
        block, _ = blocks.load(url, info, cache_bytes, storage_options)
        total += kernel.transpose_dot(block.indptr, block.indices, block.data, v, out)
    if bias >= 0:
        out[n_features] = total
    return out
