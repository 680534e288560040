"""The per-worker tasks of the cutting-plane solver: one pass over a worker's blocks each.

Nothing is kept between tasks but the block cache: the solver's state (the working set)
lives on the coordinator, and each task returns one dense float64 vector of length
n_features [+1] — the worker's part of the new constraint — however many blocks it owns.
"""

from __future__ import annotations

import numpy as np

from distsvm.storage import BlockInfo

from . import blocks
from .kernels import cutting_plane as kernel


def hinge_cut(w, url: str, infos: list[BlockInfo], *, bias: float, n_features: int,
              positive: int, cache_bytes: int, storage_options: dict | None = None):
    """(Σ cᵢyᵢxᵢ, Σ cᵢ, Σ hinge loss) over ``infos`` at ``w`` (Algorithm 1 lines 5-7)."""
    out = np.zeros(w.shape[0])
    count, loss = 0, 0.0
    for info in infos:
        block, _ = blocks.load(url, info, cache_bytes, storage_options)
        c, s = kernel.hinge_cut(block.indptr, block.indices, block.data, block.y, positive, w,
                                bias, n_features, out)
        count += c
        loss += s
    return out, count, loss


def weighted_sum(coefs: list[np.ndarray], url: str, infos: list[BlockInfo], *, dim: int,
                 bias: float, n_features: int, cache_bytes: int,
                 storage_options: dict | None = None) -> np.ndarray:
    """Σ coefᵢ xᵢ over ``infos``, ``coefs[k]`` holding the coefficients of block ``infos[k]``."""
    out = np.zeros(dim)
    for coef, info in zip(coefs, infos):
        block, _ = blocks.load(url, info, cache_bytes, storage_options)
        kernel.weighted_sum(block.indptr, block.indices, block.data, coef, bias, n_features, out)
    return out


def n_loss_terms(class_counts, objective: str) -> int:
    """The number of loss terms C multiplies: rows (classification) or ranked pairs (ordinal)
    (the coordinator's, here so that :mod:`distsvm.anytime` can score a ranking model with
    :func:`pairwise_accuracy` without importing the solver)."""
    if objective == "classification":
        return int(sum(class_counts))
    below, m = 0, 0
    for c in class_counts:  # pairs (i, j) with rᵢ > rⱼ
        m += int(c) * below
        below += int(c)
    return m


def pairwise_accuracy(scores: np.ndarray, ranks: np.ndarray, n_ranks: int) -> tuple[float, int]:
    """The share of the pairs of rows of different rank whose ``scores`` are in the order of
    their ``ranks`` (NaN without such pairs), and the number of those pairs."""
    pairs = n_loss_terms(np.bincount(ranks, minlength=n_ranks), "ordinal")
    concordant = kernel.concordant_pairs(scores, ranks, np.argsort(scores, kind="stable"),
                                         n_ranks)
    return (concordant / pairs if pairs else float("nan")), pairs
