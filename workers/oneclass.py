"""The per-block tasks of the one-class SVM solver (:mod:`distsvm.workers.kernels.oneclass`).

LIBLINEAR's iteration needs the whole problem at two points: the maximal violation (m, M)
over every active row decides the stop and the shrinking, and the k pairs are the k most
violating rows of the whole active set.  So an iteration here is: :func:`gradients` on
every block (G at the current w, after applying the previous iteration's α changes), the
global (m, M), :func:`select` on every block (shrinking, and its k best candidates of each
side with their rows), then :func:`merge` of the candidates — the global k best by (−G,
row id), whatever the blocks — and the pair updates on those rows, which give the changed α
and w.  Each block's α, gradient and shrinking state stay in the memory of the worker that
owns the block (:func:`blocks.run_state`), with the α of the round's start kept
(:func:`resident.mark`) for a rollback after a worker loss (:func:`restore`) and written
into checkpoints (:func:`save_blocks`).

:func:`iterate` runs one iteration through ``call(task, *args, **kw)`` — one task per
worker on the cluster, or the tasks in this process — and :func:`batch` runs iterations on
the worker that owns every block, without a task or a transfer per iteration.
"""

from __future__ import annotations

import time

import numpy as np

from distsvm.storage import BlockInfo

from . import blocks, resident
from .kernels import oneclass as kernel

STATE = ("alpha", "index", "state")  # a block's state in a checkpoint


def masses(n_rows: list[int], mass: float) -> list[tuple[int, float]]:
    """``mass`` of α spread over blocks of ``n_rows`` rows as LIBLINEAR's start (``mass`` =
    νl): 1 on each row from the first on, the fraction mass − ⌊mass⌋ on the next; per block
    (its rows at 1, the fraction on its next row or 0)."""
    whole, frac = int(mass), mass - int(mass)
    out = []
    for n in n_rows:
        k = max(0, min(n, whole))
        out.append((k, frac if 0 <= whole < n else 0.0))
        whole -= n
    return out


def _state(run: str, info: BlockInfo, n_rows: int) -> dict:
    s = blocks.run_state(run, info.name, dict)
    if "index" not in s:  # a fresh block, or one rolled back: every row active
        s.update(index=np.arange(n_rows, dtype=np.int64), state=np.array([n_rows], np.int64))
    if "G" not in s:
        s["G"] = np.zeros(n_rows)
    return s


def setup(url: str, infos: list[BlockInfo], run: str, fill: dict, *, n_features: int,
          cache_bytes: int, storage_options: dict | None = None, **_) -> np.ndarray:
    """Give the blocks of ``fill`` ({name: (whole, fraction)}) α = 1 on their first ``whole``
    rows, the fraction on the next and 0 after (every row active); returns Σ αᵢxᵢ of them."""
    blocks.begin_reads(run)
    w = np.zeros(n_features)
    for info in infos:
        if info.name not in fill:
            continue
        whole, frac = fill[info.name]
        block, _ = blocks.load(url, info, cache_bytes, storage_options)
        alpha = np.zeros(block.n_rows)
        alpha[:whole] = 1.0
        if whole < block.n_rows:
            alpha[whole] = frac
        s = blocks.run_state(run, info.name, dict)
        s.clear()
        s["alpha"] = alpha
        kernel.add_xt(block.indptr, block.indices, block.data, alpha, w)
    return w


def stateless(url: str, infos: list[BlockInfo], run: str, **_) -> list[str]:
    """The blocks of ``infos`` without α in run ``run`` on this worker (lost with a worker)."""
    return [info.name for info in infos if "alpha" not in blocks.run_state(run, info.name, dict)]


def _apply(s: dict, offset: int, updates) -> None:
    ids, values = updates
    mine = (ids >= offset) & (ids < offset + len(s["alpha"]))
    s["alpha"][ids[mine] - offset] = values[mine]


def gradients(url: str, infos: list[BlockInfo], run: str, w: np.ndarray, updates, *,
              offsets: dict, unshrink: bool, tag: int, cache_bytes: int,
              storage_options: dict | None = None, **_) -> dict:
    """Apply ``updates`` (global row ids, their new α) to the blocks' α (first keeping the α
    of round ``tag``'s start), reactivate every row with ``unshrink``, and compute Gᵢ = wᵀxᵢ
    of the active rows; returns their (m, M) and count, and the bytes read."""
    up, low, active = -np.inf, np.inf, 0
    for info in infos:
        block, _ = blocks.load(url, info, cache_bytes, storage_options)
        s = _state(run, info, block.n_rows)
        resident.mark(s, tag)
        if updates is not None and len(updates[0]):
            _apply(s, offsets[info.name], updates)
        if unshrink:
            s["state"][0] = block.n_rows
            s["index"][:] = np.arange(block.n_rows)
        u, lo = kernel.gradients(block.indptr, block.indices, block.data, w, s["alpha"], s["G"],
                                 s["index"], int(s["state"][0]))
        up, low, active = max(up, u), min(low, lo), active + int(s["state"][0])
    return {"up": up, "low": low, "active": active, "bytes_read": blocks.take_bytes_read()}


def select(url: str, infos: list[BlockInfo], run: str, up: float, low: float, k: int, *,
           offsets: dict, cache_bytes: int, storage_options: dict | None = None,
           direct: bool = False, **_) -> dict:
    """Shrink the blocks' active rows with the global (m, M) and return their active count,
    |I_up|, |I_low| and the k best candidates of each side over the blocks (global ids and
    keys: G for I_up, −G for I_low, both increasing), with the candidates' rows, α and
    squared norms — or, ``direct`` (in the process that holds the one block), the block's
    own rows, α and norms, for :func:`merge` to update in place."""
    out = {"active": 0, "n_up": 0, "n_low": 0}
    ups, lows, rows = [], [], []
    for info in infos:
        block, sqnorm = blocks.load(url, info, cache_bytes, storage_options)
        s = _state(run, info, block.n_rows)
        off = offsets[info.name]
        active = kernel.shrink(s["alpha"], s["G"], s["index"], int(s["state"][0]), up, low)
        s["state"][0] = active
        u, lo, n_up, n_low, local = kernel.candidates(s["alpha"], s["G"], s["index"], active, k)
        out["active"] += active
        out["n_up"] += n_up
        out["n_low"] += n_low
        ups.append((u + off, s["G"][u]))
        lows.append((lo + off, -s["G"][lo]))
        if direct and len(infos) == 1:
            out.update(up_ids=ups[0][0], up_keys=ups[0][1], low_ids=lows[0][0],
                       low_keys=lows[0][1], direct=dict(
                           offset=off, alpha=s["alpha"], qd=np.asarray(sqnorm, np.float64),
                           rows=(block.indptr, block.indices, block.data)))
            return out
        rows.append((local + off, s["alpha"][local], np.asarray(sqnorm, np.float64)[local],
                     _rows_of(block, local)))
    up_ids, up_keys = _cat(ups)
    low_ids, low_keys = _cat(lows)
    ids, alpha, qd = (np.concatenate([r[m] for r in rows]) if rows else np.zeros(0)
                      for m in range(3))
    out.update(up_ids=up_ids, up_keys=up_keys, low_ids=low_ids, low_keys=low_keys,
               ids=ids.astype(np.int64), alpha=alpha, qd=qd, rows=_join([r[3] for r in rows]))
    return out if len(infos) == 1 else _ordered(out)


def _ordered(part: dict) -> dict:
    """Candidates gathered from several blocks put in order: each side by (key, row id),
    the rows by id (one block's are in order already)."""
    up = np.lexsort((part["up_ids"], part["up_keys"]))
    low = np.lexsort((part["low_ids"], part["low_keys"]))
    order = np.argsort(part["ids"], kind="stable")
    return {**part, "up_ids": part["up_ids"][up], "up_keys": part["up_keys"][up],
            "low_ids": part["low_ids"][low], "low_keys": part["low_keys"][low],
            "ids": part["ids"][order], "alpha": part["alpha"][order], "qd": part["qd"][order],
            "rows": _reorder(*part["rows"], order)}


def _rows_of(block, rows: np.ndarray):
    """The CSR (indptr, indices, data) of ``rows`` of a block."""
    return kernel.take(block.indptr, block.indices, block.data, rows.astype(np.int64))


def _cat(parts):
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0)
    return (np.concatenate([p[0] for p in parts]).astype(np.int64),
            np.concatenate([p[1] for p in parts]))


def _join(csrs):
    if not csrs:
        return np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32)
    indptr = [np.zeros(1, np.int64)]
    base = 0
    for p, _, _ in csrs:
        indptr.append(p[1:] + base)
        base += p[-1]
    return (np.concatenate(indptr), np.concatenate([c[1] for c in csrs]),
            np.concatenate([c[2] for c in csrs]))


def merge(w: np.ndarray, parts: list[dict]):
    """The pair updates of one iteration from the blocks' :func:`select`: k = max(active/10,
    1) bounded by |I_up| and |I_low| (LIBLINEAR's ``max_inner_iter``), the k first of each
    side by (key, row id), paired in order and updated (:func:`kernel.pair_updates`) on w in
    place.  Returns ((ids, α) of the candidate rows, the active count, pairs updated)."""
    active = sum(p["active"] for p in parts)
    k = min(max(active // 10, 1), sum(p["n_up"] for p in parts), sum(p["n_low"] for p in parts))
    if len(parts) == 1:  # in order already (:func:`select`)
        part = parts[0]
    else:
        part = _ordered({**{key: np.concatenate([p[key] for p in parts]) for key in (
            "up_ids", "up_keys", "low_ids", "low_keys", "ids", "alpha", "qd")},
            "rows": _join([p["rows"] for p in parts])})
    pi, pj = part["up_ids"][:k], part["low_ids"][:k]
    if "direct" in part:  # the block itself: α updated in place (marked for a rollback)
        d = part["direct"]
        alpha, off = d["alpha"], d["offset"]
        done = kernel.pair_updates(pi - off, pj - off, *d["rows"], d["qd"], alpha, w)
        ids = np.concatenate((pi, pj))  # a row twice sets the same α twice
        return (ids, alpha[ids - off]), active, done
    ids, alpha, qd = part["ids"], part["alpha"].copy(), part["qd"]
    indptr, indices, data = part["rows"]
    done = kernel.pair_updates(np.searchsorted(ids, pi), np.searchsorted(ids, pj), indptr,
                               indices, data, qd, alpha, w)
    return (ids, alpha), active, done


def _reorder(indptr, indices, data, order):
    return kernel.take(indptr, indices, data, order.astype(np.int64))


def iterate(call, w: np.ndarray, updates, *, r: int, tag: int, n_rows: int, eps: float):
    """Iteration r of LIBLINEAR's loop (``solve_oneclass_svm``) through ``call`` (the tasks
    on every worker, their replies as a list): G and (m, M); if m − M < eps, the stop when
    every row is active, else every row reactivated and the test again; then shrinking, the
    candidates and the pair updates.  Returns (w, updates, log row, converged, bytes read)."""
    kw = dict(tag=tag)
    res = call(gradients, w, updates, unshrink=False, **kw)
    read = sum(p["bytes_read"] for p in res)
    up, low, active = max(p["up"] for p in res), min(p["low"] for p in res), \
        sum(p["active"] for p in res)
    if up - low < eps and active < n_rows:  # LIBLINEAR's `continue` with every row active
        res = call(gradients, w, None, unshrink=True, **kw)
        read += sum(p["bytes_read"] for p in res)
        up, low, active = max(p["up"] for p in res), min(p["low"] for p in res), n_rows
    row = {"round": r, "pg_violation": max(0.0, up - low)}
    if up - low < eps:
        row.update(active=active / max(1, n_rows), dual=-0.5 * kernel.sqnorm(w), bytes_read=read)
        return w, None, row, True
    parts = call(select, up, low, max(active // 10, 1))
    w = np.array(w, dtype=np.float64)
    updates, active, _ = merge(w, parts)
    row.update(active=active / max(1, n_rows), dual=-0.5 * kernel.sqnorm(w), bytes_read=read)
    return w, updates, row, False


def finish(url: str, infos: list[BlockInfo], run: str, w: np.ndarray, updates, *,
           offsets: dict, cache_bytes: int, storage_options: dict | None = None,
           **_) -> dict:
    """At the final w (``updates`` applied): every row's G and LIBLINEAR's ρ statistics
    (:func:`kernel.final_stats`) summed over the blocks: lb, ub, free rows and Σ G over them,
    Σα, min α, max α, rows with α > 0."""
    out = dict(lb=-np.inf, ub=np.inf, n_free=0, sum_free=0.0, alpha_sum=0.0, alpha_min=np.inf,
               alpha_max=-np.inf, n_sv=0)
    for info in infos:
        block, _ = blocks.load(url, info, cache_bytes, storage_options)
        s = _state(run, info, block.n_rows)
        if updates is not None and len(updates[0]):
            _apply(s, offsets[info.name], updates)
        lb, ub, n_free, sum_free, total, lo, hi, n_sv = kernel.final_stats(
            block.indptr, block.indices, block.data, w, s["alpha"], s["G"])
        out.update(lb=max(out["lb"], lb), ub=min(out["ub"], ub), n_free=out["n_free"] + n_free,
                   sum_free=out["sum_free"] + sum_free, alpha_sum=out["alpha_sum"] + total,
                   alpha_min=min(out["alpha_min"], lo), alpha_max=max(out["alpha_max"], hi),
                   n_sv=out["n_sv"] + n_sv)
    return out


def losses(url: str, infos: list[BlockInfo], run: str, rho: float, **_) -> tuple[float, int]:
    """After :func:`finish`: Σᵢ max(0, ρ − Gᵢ) and the rows with Gᵢ > ρ, over the blocks."""
    loss, inside = 0.0, 0
    for info in infos:
        lo, n = kernel.hinge_sum(blocks.run_state(run, info.name, dict)["G"], rho)
        loss, inside = loss + lo, inside + n
    return loss, inside


def combine(parts: list[dict]) -> dict:
    """The :func:`finish` statistics of every worker, and ρ from them as LIBLINEAR's: the
    mean G over the free rows, else the middle of [max G over α = 1, min G over α = 0]."""
    out = dict(lb=max(p["lb"] for p in parts), ub=min(p["ub"] for p in parts),
               n_free=sum(p["n_free"] for p in parts),
               sum_free=sum(p["sum_free"] for p in parts),
               alpha_sum=sum(p["alpha_sum"] for p in parts),
               alpha_min=min(p["alpha_min"] for p in parts),
               alpha_max=max(p["alpha_max"] for p in parts), n_sv=sum(p["n_sv"] for p in parts))
    out["rho"] = (out["sum_free"] / out["n_free"] if out["n_free"] > 0
                  else (out["ub"] + out["lb"]) / 2)
    # where the primal is measured: ρ, or for ρ = ±inf (ν = 1: no row at 0) the finite end
    # of the interval, where the primal in ρ is already flat
    out["rho_primal"] = out["rho"] if np.isfinite(out["rho"]) else (
        out["lb"] if out["rho"] > 0 else out["ub"])
    return out


def local(url: str, infos: list[BlockInfo], run: str, common: dict):
    """``call`` for :func:`iterate` in this process, on the blocks ``infos``."""
    def call(task, *args, **kw):
        return [task(url, infos, run, *args, **common, **kw)]
    return call


def batch(w, url: str, infos: list[BlockInfo], run: str, updates, *, first: int,
          max_rounds: int, every: int | None, seconds: float, eps: float, n_rows: int,
          common: dict, fill: dict | None = None):
    """Iterations ``first``, ``first`` + 1, … on the worker that owns every block ``infos``
    (:func:`iterate` with the tasks in this process; the α of round ``first``'s start kept for
    a rollback), until the run stops (converged, or ``max_rounds``), or after an iteration
    that ends once ``seconds`` have passed or that is a multiple of ``every`` (a checkpoint
    is due).  With ``fill``, the blocks first start as :func:`setup` (w is then theirs).
    Returns ``(w, pending updates, {"rows": their log rows with "at": seconds into the task,
    "converged", and at the run's end "final": :func:`combine` of :func:`finish` with the
    "loss" and "inside" of :func:`losses`})``: one task, no transfer per iteration."""
    start = time.perf_counter()
    call = local(url, infos, run, {**common, "direct": True})
    w = np.array(w, dtype=np.float64)
    if fill is not None:
        w = setup(url, infos, run, fill, n_features=len(w), **common)
    rows, r = [], first
    while True:
        w, updates, row, converged = iterate(call, w, updates, r=r, tag=first, n_rows=n_rows,
                                             eps=eps)
        row["at"] = time.perf_counter() - start
        rows.append(row)
        if converged or r >= max_rounds or row["at"] > seconds or (every and r % every == 0):
            break
        r += 1
    out = {"rows": rows, "converged": converged}
    if converged or r >= max_rounds:
        out["final"] = combine(call(finish, w, updates))
        out["final"]["loss"], out["final"]["inside"] = call(losses,
                                                            out["final"]["rho_primal"])[0]
        updates = None
    return w, updates, out


def restore(url: str, infos: list[BlockInfo], run: str, tag: int, *, n_features: int,
            cache_bytes: int, storage_options: dict | None = None) -> np.ndarray:
    """After a worker loss: roll the blocks ``infos`` of this worker back to the start of
    round ``tag`` (:func:`resident.roll_back`); returns their Σ αᵢxᵢ with Σ αᵢ appended (the
    coordinator gives the lost blocks the rest of νl)."""
    out = np.zeros(n_features + 1)
    for info in infos:
        alpha = resident.roll_back(run, info, tag)
        if alpha is not None:
            block, _ = blocks.load(url, info, cache_bytes, storage_options)
            kernel.add_xt(block.indptr, block.indices, block.data, alpha, out)
            out[-1] += alpha.sum()
    return out


def save_blocks(runs: dict[str, str], infos: list[BlockInfo], directory: str,
                storage_options: dict | None = None) -> dict[str, str]:
    """Checkpoint: α and the shrinking state of blocks ``infos`` (:func:`resident.save_blocks`);
    they load back with :func:`resident.load_blocks`."""
    return resident.save_blocks(runs, infos, directory, STATE, storage_options)
