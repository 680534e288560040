"""The per-block tasks of the Crammer–Singer solver (:mod:`distsvm.workers.kernels.crammer_singer`).

As in sequential DCD (:mod:`distsvm.workers.dcd`), each block's α (n_rows × K) and shrinking
state stay in the memory of the worker that owns the block; only W travels, from
task to task.  Each block also keeps a copy of its α from the start of the current round
(``tag``), so that after a worker loss the coordinator can roll the survivors back to it
(:func:`restore`), and its state goes into checkpoints (:func:`save_blocks`).

Where one worker owns every block, :func:`batch` runs the rounds on it, LIBLINEAR's outer
loop, without a task, a transfer of W or a primal pass per round (:func:`round_row`,
:func:`next_round` decide each round as the coordinator does).
"""

from __future__ import annotations

import time

import numpy as np

from distsvm.storage import BlockInfo

from . import blocks, losses, resident
from .dcd import block_seed
from .kernels import crammer_singer as kernel

# a block's state in a checkpoint: α and the shrinking state (the rows' order included)
STATE = ("alpha", "alpha_index", "y_index", "active_i", "index", "state")


def _state(run: str, info: BlockInfo, block, n_classes: int) -> dict:
    """The block's α and shrinking state, made on first use; after :func:`restore`, which
    keeps only α, the shrinking state starts afresh (every row and class active)."""
    s = blocks.run_state(run, info.name, dict)
    if "state" not in s:
        s.update({**kernel.new_state(block.n_rows, n_classes, block.y), **s})
    return s


def segment(prev, url: str, infos: list[BlockInfo], seeds: list[int], run: str, *,
            unshrink: bool, class_cost: np.ndarray, bias: float, n_features: int, cache_bytes: int,
            report_infos: list[BlockInfo] | None = None, storage_options: dict | None = None,
            tag: int = 0):
    """One pass (Algorithm 1 of Appendix E) over each block of ``infos`` in order, W carried
    from block to block; ``unshrink`` first reactivates every row and class (E.5).  Row i's
    bound is Cᵢ = ``class_cost[yᵢ]`` times its instance weight (:func:`losses.costs`),
    as LIBLINEAR's ``Solver_MCSVM_CS`` takes C of the row's class.  ``prev``
    is the initial W or the previous segment's ``(W, report)``; ``tag`` is the round (for
    :func:`resident.mark`).  Returns ``(W, report)``,
    report as :func:`report` for ``report_infos`` if given, else None."""
    W = np.array(prev[0] if isinstance(prev, tuple) else prev, dtype=np.float64)
    _passes(W, url, infos, seeds, run, unshrink=unshrink, class_cost=class_cost, bias=bias,
            n_features=n_features, cache_bytes=cache_bytes, storage_options=storage_options,
            tag=tag, ww=np.zeros(1))
    out = None
    if report_infos:
        out = report(W, url, report_infos, run, bias=bias, n_features=n_features,
                     class_cost=class_cost, cache_bytes=cache_bytes, storage_options=storage_options)
    return W, out


def _passes(W: np.ndarray, url: str, infos: list[BlockInfo], seeds: list[int], run: str, *,
            unshrink: bool, class_cost: np.ndarray, bias: float, n_features: int,
            cache_bytes: int, storage_options: dict | None, tag: int, ww: np.ndarray) -> None:
    """:func:`segment`'s passes, updating ``W`` in place (:func:`batch` keeps one W) and
    ``ww[0]`` by the change of ‖W‖²."""
    blocks.begin_reads(run)
    for info, seed, (block, sqnorm) in zip(infos, seeds,
                                           blocks.stream(url, infos, cache_bytes, storage_options)):
        s = _state(run, info, block, W.shape[1])
        resident.mark(s, tag)
        if unshrink:
            s["state"][kernel.ACTIVE] = block.n_rows
            s["active_i"][:] = W.shape[1]
        s["stopping"] = kernel.cs_pass(
            block.indptr, block.indices, block.data, block.y, sqnorm, W, bias, n_features,
            s["alpha"], s["alpha_index"], s["y_index"], s["active_i"], s["index"], s["state"],
            losses.costs(class_cost, block.y, block.weight), seed, ww)
        alpha = s["alpha"]  # the dual's linear term of the block, for report
        s["linear"] = float(alpha.sum() - alpha[np.arange(block.n_rows), block.y].sum())
        del block, sqnorm


def report(prev, url: str, infos: list[BlockInfo], run: str, *, bias: float, n_features: int,
           class_cost: np.ndarray, cache_bytes: int,
           storage_options: dict | None = None, primal: bool = True,
           ww: float | None = None) -> dict:
    """End of a round on one worker: the loss ΣCᵢξᵢ and correct rows of its blocks at the
    round's final W (only with ``primal``: a pass over the rows), the dual's linear term
    Σᵢ Σₘ eᵢᵐαᵢᵐ = Σᵢ (Σₘ αᵢᵐ − αᵢ^{yᵢ}), the largest stopping value of the round's passes
    and the active rows, summed over the blocks; ‖W‖² is ``ww`` if given, else summed."""
    W = prev[0] if isinstance(prev, tuple) else prev
    loss, correct, linear, stopping, active = 0.0, 0, 0.0, -np.inf, 0
    for info in infos:
        s = blocks.run_state(run, info.name, dict)
        linear += s["linear"]
        stopping = max(stopping, s["stopping"])
        active += int(s["state"][kernel.ACTIVE])
    out = {"linear": linear, "ww": float(np.vdot(W, W)) if ww is None else ww,
           "stopping": stopping,
           "active": active}
    if primal:
        for block, _ in blocks.stream(url, infos, cache_bytes, storage_options):
            xi, ok = kernel.cs_loss(block.indptr, block.indices, block.data, block.y, W, bias,
                                    n_features, losses.costs(class_cost, block.y, block.weight))
            loss, correct = loss + xi, correct + ok
        out.update(loss=loss, correct=correct)
    return {**out, "bytes_read": blocks.take_bytes_read()}


def round_row(r: int, reports: list[dict], n_rows: int) -> dict:
    """A round's log row from its owners' :func:`report`: the dual −(½‖W‖² + Σ eᵢᵐαᵢᵐ),
    the stopping value, the active rows and bytes read, and where the loss was measured
    the primal ½‖W‖² + Σ Cᵢξᵢ, the gap and the training accuracy."""
    dual = -(0.5 * reports[0]["ww"] + sum(p["linear"] for p in reports))
    return resident.round_row(r, reports, n_rows, dual,
                              max(0.0, max(p["stopping"] for p in reports)))


def next_round(stopping: float, row: dict, *, eps: float, eps_shrink: float,
               start_from_all: bool, gap_tol: float) -> tuple[bool, bool, bool, float]:
    """LIBLINEAR's outer test after a round (``Solver_MCSVM_CS::Solve``), or the gap
    certificate: (converged, unshrink next round, its start_from_all, its eps_shrink).
    When ``stopping`` < eps_shrink on the shrunk problem, every row and class comes back
    and eps_shrink ← max(eps_shrink/2, eps)."""
    if gap_tol > 0 and "primal" in row and row["gap"] <= gap_tol * abs(row["primal"]):
        return True, False, start_from_all, eps_shrink
    if stopping < eps_shrink:
        if stopping < eps and start_from_all:
            return True, False, start_from_all, eps_shrink
        return False, True, True, max(eps_shrink / 2, eps)
    return False, False, False, eps_shrink


def batch(W, url: str, infos: list[BlockInfo], run: str, *, first: int, rng_state: dict,
          seed: int, n_rows: int, max_rounds: int, every: int | None, seconds: float,
          eps: float, gap_tol: float, shrink: dict, class_cost: np.ndarray, bias: float,
          n_features: int, cache_bytes: int, storage_options: dict | None = None):
    """Rounds ``first``, ``first`` + 1, … on the worker that owns every block ``infos``:
    each as the coordinator's (the block order drawn from the generator of state
    ``rng_state``, :func:`segment` with the seeds of :func:`block_seed`, :func:`next_round`
    on ``shrink`` = {"eps_shrink", "unshrink", "start_from_all"}), until the run stops
    (converged, or ``max_rounds``), or after a round that ends once ``seconds`` have passed
    or that is a multiple of ``every`` (a checkpoint is due).  The primal needs a pass over
    every row, so it is measured each round only with ``gap_tol``, else for the last round;
    the other rounds' dual takes ‖W‖² as the passes kept it (:func:`kernel.cs_pass`).
    Returns ``(W, {"rows": round_row of each round with "at": seconds into the task,
    "rng": the generator's state, "shrink", "converged", "stopping"})``."""
    start = time.perf_counter()
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = rng_state
    W = np.array(W, dtype=np.float64)
    ww = np.array([np.vdot(W, W)])  # ‖W‖², kept by the passes, summed again at the end
    kw = dict(bias=bias, n_features=n_features, class_cost=class_cost, cache_bytes=cache_bytes,
              storage_options=storage_options)
    rows, converged, r = [], False, first
    while True:
        order = [int(b) for b in rng.permutation(len(infos))]
        _passes(W, url, [infos[b] for b in order], [block_seed(seed, r, b) for b in order], run,
                unshrink=shrink["unshrink"], tag=r, ww=ww, **kw)
        exact = gap_tol > 0  # the gap certificate sums ‖W‖² and measures the primal
        rep = report(W, url, infos, run, primal=exact, ww=None if exact else float(ww[0]), **kw)
        row = round_row(r, [rep], n_rows)
        converged, unshrink, start_from_all, eps_shrink = next_round(
            rep["stopping"], row, eps=eps, gap_tol=gap_tol, **{
                k: shrink[k] for k in ("eps_shrink", "start_from_all")})
        shrink = {"eps_shrink": eps_shrink, "unshrink": unshrink,
                  "start_from_all": start_from_all}
        row["at"] = time.perf_counter() - start
        rows.append(row)
        if converged or r >= max_rounds or row["at"] > seconds or (every and r % every == 0):
            break
        r += 1
    if "primal" not in rows[-1]:  # the last round's, with ‖W‖² summed
        rows[-1].update({k: v for k, v in round_row(
            r, [report(W, url, infos, run, **kw)], n_rows).items() if k != "bytes_read"})
    return W, {"rows": rows, "rng": rng.bit_generator.state, "shrink": shrink,
               "converged": converged, "stopping": rep["stopping"]}


def restore(url: str, infos: list[BlockInfo], run: str, tag: int, *, n_classes: int,
            bias: float, n_features: int, cache_bytes: int,
            storage_options: dict | None = None) -> np.ndarray:
    """After a worker loss: roll the blocks ``infos`` of this worker back to the start of
    round ``tag`` and return their part of W (n_features [+1] × K), wₘ = Σᵢ αᵢᵐ x̂ᵢ
    (:func:`resident.restore`)."""
    return resident.restore(url, infos, run, tag,
                            np.zeros((n_features + (1 if bias >= 0 else 0), n_classes)),
                            lambda block, alpha: alpha, bias=bias, n_features=n_features,
                            cache_bytes=cache_bytes, storage_options=storage_options)


def save_blocks(runs: dict[str, str], infos: list[BlockInfo], directory: str,
                storage_options: dict | None = None) -> dict[str, str]:
    """Checkpoint: write α and the shrinking state of blocks ``infos`` in the run of ``runs``
    (``{"": run id}``) into ``directory`` (:func:`resident.save_blocks`); return {file
    name: SHA-256}.  They load back with :func:`resident.load_blocks`."""
    return resident.save_blocks(runs, infos, directory, STATE, storage_options)

