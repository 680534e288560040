"""What a worker process keeps between tasks: a byte-bounded block cache and per-run solver state.

Nothing here talks to Dask: the coordinator decides which worker runs which
block and passes the cache budget in; these are plain process-level tables.
Blocks not in the cache are re-read from the store, so a worker's memory is
bounded by its cache budget plus one block, whatever the dataset's size.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from storage import BlockInfo, RowBlock, read_row_block

from .kernels.linear import decision_values, loss_sum, row_sqnorms

_lock = threading.Lock()
_cache: collections.OrderedDict = collections.OrderedDict()  # key -> (entry, nbytes)
_cache_bytes = 0
_runs: dict[str, dict] = {}  # run id -> {block name: solver state}


def load(url: str, info: BlockInfo, cache_bytes: int, storage_options: dict | None = None):
    """Return ``(block, sqnorm)`` for a row block, from the cache or the store.

    The block is kept if it fits in ``cache_bytes``; least recently used blocks
    are evicted to make room.
    """
    def read():
        block = read_row_block(url, info, storage_options)
        sqnorm = np.empty(block.n_rows)
        row_sqnorms(block.indptr, block.data, sqnorm)
        return (block, sqnorm), block.nbytes + sqnorm.nbytes

    # keyed by content too, so a store overwritten at the same URL is never served stale
    return cached((url, info.name, tuple(sorted(info.crc32.items()))), read, cache_bytes)


def cached(key, read, cache_bytes: int):
    """The cache entry ``key``, or ``read()``'s ``(entry, nbytes)``, kept if it fits (LRU)."""
    global _cache_bytes
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key][0]
    entry, size = read()
    with _lock:
        if size <= cache_bytes and key not in _cache:
            while _cache and _cache_bytes + size > cache_bytes:
                _, (_, old_size) = _cache.popitem(last=False)
                _cache_bytes -= old_size
            _cache[key] = (entry, size)
            _cache_bytes += size
    return entry


def cached_bytes() -> int:
    """Bytes of block data this process holds in its cache."""
    return _cache_bytes


def run_state(run: str, name: str, make):
    """The state of block ``name`` in run ``run``, created by ``make()`` on first use."""
    with _lock:
        blocks = _runs.setdefault(run, {})
        if name not in blocks:
            blocks[name] = make()
        return blocks[name]


def drop_run(run: str) -> int:
    """Forget a run's state; return how many blocks it held."""
    with _lock:
        return len(_runs.pop(run, {}))


def clear_cache() -> None:
    """Empty the block cache (tests and benchmarks that measure cold reads)."""
    global _cache_bytes
    with _lock:
        _cache.clear()
        _cache_bytes = 0


def block_loss(url: str, infos: list[BlockInfo], w: np.ndarray, bias: float, n_features: int,
               loss: int, positive: int, cache_bytes: int,
               storage_options: dict | None = None) -> tuple[float, int, int]:
    """Σ loss and the number of correctly classified rows over some blocks: (loss, correct, rows)."""
    total, correct, rows = 0.0, 0, 0
    for info in infos:
        block, _ = load(url, info, cache_bytes, storage_options)
        t, c = loss_sum(block.indptr, block.indices, block.data, block.y, positive, w, bias,
                        n_features, loss)
        total += t
        correct += c
        rows += block.n_rows
    return total, correct, rows


def block_decisions(url: str, info: BlockInfo, w: np.ndarray, bias: float, n_features: int,
                    cache_bytes: int, storage_options: dict | None = None):
    """Decision values wᵀxᵢ of one block and its class indices: (float64 array, int32 array)."""
    block, _ = load(url, info, cache_bytes, storage_options)
    out = np.empty(block.n_rows)
    decision_values(block.indptr, block.indices, block.data, w, bias, n_features, out)
    return out, block.y


__all__ = ["RowBlock", "load", "cached", "cached_bytes", "run_state", "drop_run", "clear_cache",
           "block_loss", "block_decisions"]
