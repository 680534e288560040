"""Dual variables resident on the worker that owns their block: the parts the per-block tasks
of the dual block solvers (DCD, :mod:`distsvm.workers.dcd`; Crammer–Singer,
:mod:`distsvm.workers.crammer_singer`) share to survive a worker loss and a checkpoint.

A block's state is a dict of arrays in :func:`blocks.run_state`, its dual variables under
``"alpha"``, with w = X̂ᵀV for coefficients V that the solver derives from α (X̂: the rows
with the bias feature).  Before a block's first change in a round, :func:`mark` keeps a
copy of its α; after a worker loss :func:`restore` rolls the survivors back to it
(:func:`roll_back`) and sums their part of w (:func:`add_xt`); :func:`save_blocks` and
:func:`load_blocks` write a checkpoint's block files and read them back.
"""

from __future__ import annotations

import json

import numpy as np

from distsvm.storage import BlockInfo, CorruptStoreError

from . import blocks


def mark(s: dict, tag: int) -> None:
    """Before a block's first change in round ``tag``, keep its α as the round found it."""
    if s.get("tag") != tag:
        s["tag"], s["saved"] = tag, s["alpha"].copy()


def add_xt(out: np.ndarray, block, V: np.ndarray, bias: float, n_features: int) -> None:
    """``out += X̂ᵀV`` for one block: V is (n_rows,) or (n_rows, K), out (n_features [+1],)
    or (n_features [+1], K) float64, its last row the bias feature's when ``bias`` ≥ 0."""
    V2 = V.reshape(len(V), -1)
    out2 = out.reshape(len(out), -1)
    weighted = np.repeat(V2, np.diff(block.indptr), axis=0) * block.data[:, None]
    for m in range(V2.shape[1]):
        out2[:n_features, m] += np.bincount(block.indices, weights=weighted[:, m],
                                            minlength=n_features)
    if bias >= 0:
        out2[-1] += bias * V2.sum(axis=0)


def roll_back(run: str, info: BlockInfo, tag: int) -> np.ndarray | None:
    """After a worker loss: roll block ``info``'s state in run ``run`` back to the start of
    round ``tag`` and return its α, or None if this worker has no state for it (never
    visited here: α = 0).  A block changed in round ``tag`` gets back the α it had before
    (:func:`mark`); its other state (shrinking, statistics) is dropped, for the task of its
    next visit to rebuild.  Idempotent: a second loss during the recovery may run it again."""
    s = blocks.run_state(run, info.name, dict)
    if "alpha" not in s:
        return None
    if s.get("tag") == tag:
        s["alpha"][:] = s["saved"]
    alpha = s["alpha"]
    s.clear()
    s.update(alpha=alpha, tag=tag, saved=alpha.copy())
    return alpha


def restore(url: str, infos: list[BlockInfo], run: str, tag: int, out: np.ndarray,
            coefficients, *, bias: float, n_features: int, cache_bytes: int,
            storage_options: dict | None = None) -> np.ndarray:
    """After a worker loss: roll the blocks ``infos`` of this worker back to the start of
    round ``tag`` (:func:`roll_back`) and add their part of w, X̂ᵀ ``coefficients(block,
    α)``, to ``out``; a block without state adds nothing.  Returns ``out``."""
    for info in infos:
        alpha = roll_back(run, info, tag)
        if alpha is not None:
            block, _ = blocks.load(url, info, cache_bytes, storage_options)
            add_xt(out, block, coefficients(block, alpha), bias, n_features)
    return out


def save_blocks(runs: dict[str, str], infos: list[BlockInfo], directory: str,
                keys: tuple[str, ...], storage_options: dict | None = None,
                json_keys: tuple[str, ...] = ()) -> dict[str, str]:
    """Checkpoint: write the entries ``keys`` of each block's state that it has (arrays;
    those of ``json_keys`` as JSON) in each run of ``runs`` ({file prefix: run id}, one
    entry per problem of a one-vs-rest job, ``{"": run}`` otherwise) into ``directory``
    (:func:`blocks.write_states`); return {file name: SHA-256}.  A block without state yet
    is written empty and starts afresh."""
    def arrays(s, info):
        return {k: np.frombuffer(json.dumps(s[k]).encode(), np.uint8) if k in json_keys
                else s[k] for k in keys if k in s}

    return {name: digest for prefix, run in runs.items()
            for name, digest in blocks.write_states(run, infos, directory, arrays,
                                                    storage_options, prefix).items()}


def load_blocks(runs: dict[str, str], infos: list[BlockInfo], directory: str,
                digests: dict[str, str], storage_options: dict | None = None,
                json_keys: tuple[str, ...] = ()) -> int:
    """Resume: set the state of blocks ``infos`` in each run of ``runs`` ({file prefix: run
    id}) that the checkpoint holds (a one-vs-rest checkpoint holds the problems still
    running) from the files :func:`save_blocks` wrote, each checked against its digest;
    return the blocks loaded."""
    held = {prefix: run for prefix, run in runs.items()
            if any(name.startswith(f"{prefix}block-") for name in digests)}
    for prefix, run in held.items():
        for info, (s, a) in zip(infos, blocks.read_states(run, infos, directory, digests,
                                                          storage_options, prefix)):
            check_state(f"{directory}/{prefix}block-{info.name}.npz", a, info.n_rows)
            s.update({k: json.loads(v.tobytes()) if k in json_keys else v.copy()
                      for k, v in a.items()})
    return len(infos) * len(held)


def check_state(where: str, a: dict, n_rows: int) -> None:
    """Never trust a checkpoint's block state either (its SHA-256 proves it is the file the
    sealed manifest names, not that its contents are sound): what the kernels index with is
    checked before a block's state is set — ``alpha`` one row per row of the block, the
    row permutations and lists (``index``, ``cached``) and the active count (``state[0]``)
    within the block, Crammer–Singer's class positions (``alpha_index``, ``y_index``,
    ``active_i``) within its classes.  CorruptStoreError naming the file otherwise."""
    def bad(key, why):
        return CorruptStoreError(f"{where}: array {key} {why}: the checkpoint's block state "
                                 "is not sound; refused (resume from another run directory "
                                 "or train afresh)")

    def ints_in(key, stop, shape=None):
        v = a.get(key)
        if v is None:
            return
        if v.dtype.kind not in "iu" or (shape is not None and v.shape != shape):
            raise bad(key, f"has dtype {v.dtype} and shape {v.shape}")
        if v.size and (v.min() < 0 or v.max() >= stop):
            raise bad(key, f"holds values outside [0, {stop})")

    alpha = a.get("alpha")
    if alpha is not None and (alpha.ndim not in (1, 2) or alpha.shape[0] != n_rows):
        raise bad("alpha", f"has shape {alpha.shape} for a block of {n_rows} rows")
    ints_in("index", n_rows, (n_rows,))
    ints_in("cached", n_rows)
    state = a.get("state")
    if state is not None and state.size and not 0 <= state.flat[0] <= n_rows:
        raise bad("state", f"counts {state.flat[0]} active rows of {n_rows}")
    k = alpha.shape[1] if alpha is not None and alpha.ndim == 2 else None
    if k is not None:
        ints_in("alpha_index", k, (n_rows, k))
        ints_in("y_index", k, (n_rows,))
        ints_in("active_i", k + 1, (n_rows,))


def round_row(r: int, reports: list[dict], n_rows: int, dual: float, pg: float) -> dict:
    """A dual block solver's log row of round r from its blocks' owners' reports: the
    ``dual`` objective and the stopping value ``pg`` it computed, the active rows and the
    bytes read, and where every report has its loss (the primal was measured) the primal
    ½‖w‖² + Σ Cᵢξᵢ, the gap and the training accuracy."""
    row = {"round": r, "dual": dual, "pg_violation": pg,
           "active": sum(p["active"] for p in reports) / max(1, n_rows),
           "bytes_read": sum(p["bytes_read"] for p in reports)}
    if all("loss" in p for p in reports):
        primal = 0.5 * reports[0]["ww"] + sum(p["loss"] for p in reports)
        row.update(primal=primal, gap=primal - dual,
                   train_accuracy=sum(p["correct"] for p in reports) / max(1, n_rows))
    return row
