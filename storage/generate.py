"""A synthetic, text-like classification dataset, generated block by block.

One block; :mod:`distsvm.generate` is the job that makes a store of them in parallel.

This is **synthetic data** for scale tests and benchmarks (the issue's "large-data
generator"), not a model of any real corpus.  Its statistics imitate bag-of-words
text:

* **Zipf feature popularity** — each token of a row is feature ``j`` with
  probability ∝ ``(j + 1)^-s`` (feature 0 is the most popular), drawn by the
  inverse CDF of the continuous power law on ``[1, M + 1)`` and floored, so no
  table of size M is needed for the sampling.
* **Variable row lengths** — a row has ``L = max(1, round(K·exp(σz − σ²/2)))``
  distinct features (log-normal around the mean K, σ = 0.5, capped at M/2);
  tokens are drawn until L distinct features are seen, and a feature's value is
  its token count (a term frequency).
* **Unit-norm rows** — every row is scaled to ‖x‖ = 1 (as TF-IDF pipelines do).
* **Labels** — ``y = sign(w*ᵀx)`` for a sparse ground truth ``w*`` (each feature
  is in its support with probability ``density``, with a standard normal weight,
  both from a hash of (seed, feature) so no task needs ``w*`` in memory), then
  flipped with probability ``noise``.

Every block is generated from its own random stream, seeded by
``(seed, block index)``; the block boundaries depend only on the row count and
the block size, so the dataset is the same whatever the number of workers or
the order in which blocks are made.  A block's memory is its CSR arrays plus
two int32/int64 marker tables of length M (features seen in the current row).
"""

from __future__ import annotations

import numba
import numpy as np

from . import dataset as ds

CLASSES = (-1.0, 1.0)
LENGTH_SIGMA = 0.5


@numba.njit(cache=True, nogil=True, inline="always")
def _mix(z):
    """splitmix64's finalizer: a uint64 bijection with good avalanche."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True, nogil=True, inline="always")
def _uniform(seed, j, stream):
    """A uniform in (0, 1) from a hash of (seed, j, stream)."""
    z = _mix(np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(j) * np.uint64(4)
             + np.uint64(stream))
    return (np.float64(z >> np.uint64(11)) + 0.5) / 9007199254740992.0


@numba.njit(cache=True, nogil=True)
def truth_weight(seed, j, density):
    """w*ⱼ of the sparse ground truth: 0, or a standard normal (Box–Muller) with prob. density."""
    if _uniform(seed, j, 0) >= density:
        return 0.0
    u1, u2 = _uniform(seed, j, 1), _uniform(seed, j, 2)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


@numba.njit(cache=True, nogil=True)
def generate_rows(n_rows, n_features, nnz_per_row, zipf, density, noise, truth_seed,
                  block_seed):
    """Rows of one block: ``(indptr int64, indices int32, data float32, labels float64)``.

    Columns are sorted within a row; see the module docstring for the statistics.
    """
    np.random.seed(block_seed)
    max_len = max(1, n_features // 2)
    lengths = np.empty(n_rows, dtype=np.int64)
    for i in range(n_rows):
        z = np.random.normal()
        L = int(np.round(nnz_per_row * np.exp(LENGTH_SIGMA * z - 0.5 * LENGTH_SIGMA ** 2)))
        lengths[i] = min(max(L, 1), max_len)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    for i in range(n_rows):
        indptr[i + 1] = indptr[i] + lengths[i]
    indices = np.empty(indptr[n_rows], dtype=np.int32)
    counts = np.empty(indptr[n_rows], dtype=np.float64)
    data = np.empty(indptr[n_rows], dtype=np.float32)
    labels = np.empty(n_rows, dtype=np.float64)
    seen = np.full(n_features, -1, dtype=np.int64)  # row that last saw feature j
    slot = np.zeros(n_features, dtype=np.int32)  # its position in that row
    top = float(n_features + 1)
    for i in range(n_rows):
        a, L = indptr[i], lengths[i]
        k = 0
        while k < L:  # tokens until L distinct features (L <= M/2, so this ends fast)
            u = np.random.random()
            if zipf == 1.0:
                x = np.exp(u * np.log(top))
            else:
                e = 1.0 - zipf
                x = (u * (top ** e - 1.0) + 1.0) ** (1.0 / e)
            j = min(int(x) - 1, n_features - 1)
            if seen[j] == i:
                counts[a + slot[j]] += 1.0
            else:
                seen[j], slot[j] = i, k
                indices[a + k] = j
                counts[a + k] = 1.0
                k += 1
        order = np.argsort(indices[a:a + L])
        ind = indices[a:a + L][order].copy()
        cnt = counts[a:a + L][order].copy()
        norm = np.sqrt(np.sum(cnt * cnt))
        margin = 0.0
        for k in range(L):
            indices[a + k] = ind[k]
            v = np.float32(cnt[k] / norm)
            data[a + k] = v
            margin += truth_weight(truth_seed, ind[k], density) * v
        label = 1.0 if margin > 0.0 or (margin == 0.0 and np.random.random() < 0.5) else -1.0
        if np.random.random() < noise:
            label = -label
        labels[i] = label
    return indptr, indices, data, labels


def block_seed(seed: int, block: int) -> int:
    """The 32-bit seed of block ``block``'s random stream (independent of the worker count)."""
    return int(np.random.SeedSequence([seed, block]).generate_state(1)[0])


def write_block(stage: str, block: int, n_rows: int, *, n_features: int, nnz_per_row: int,
                zipf: float, density: float, noise: float, seed: int,
                storage_options: dict | None = None, compression: str = "lz4"):
    """Generate block ``block`` (``n_rows`` rows) and write it, compressed as ``compression``
    says; return ``(BlockInfo, counts)`` with the number of rows of each class in
    :data:`CLASSES`."""
    indptr, indices, data, labels = generate_rows(
        n_rows, n_features, nnz_per_row, float(zipf), float(density), float(noise),
        np.uint64(seed), block_seed(seed, block))
    y = (labels > 0).astype(np.int32)
    info = ds.write_row_block(stage, ds.block_name(block),
                              ds.RowBlock(indptr, indices, data, y), storage_options,
                              compression=compression)
    n_pos = int(y.sum())
    return info, (n_rows - n_pos, n_pos)
