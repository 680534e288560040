"""Dual coordinate descent by block minimization over a row-blocked store.

Problem: LIBLINEAR's ``min_w ½wᵀw + C Σᵢ ξ(w; xᵢ, yᵢ)`` with the L1 (hinge,
``-s 3``) or L2 (squared hinge, ``-s 1``) loss, solved through its dual (4) of
Hsieh et al. 2008 (ICML), Algorithm 1 with the random permutation of §3.1 and
the shrinking of §3.2.  Kernel: :mod:`workers.kernels.dcd`.

Distribution (what differs from the paper): the rows are split into blocks
held by workers, and every round visits all blocks in a fresh random order
(the block minimization of Yu, Hsieh, Chang & Lin, KDD 2010, "Large linear
classification when data cannot fit in memory"), running ``inner_passes`` DCD
outer iterations on the block with ``w`` carried from block to block.  With
one block and one inner pass a round is exactly one LIBLINEAR outer
iteration.  Each block's α and shrinking state stay on the worker that owns
the block; only ``w`` moves, from task to task, never through the coordinator
inside a round.  The choice left open by Yu et al. — how long to work on a
block per visit — is one pass by default, so shrinking and the stopping rule
see every row once per round as in LIBLINEAR.

Shrinking (§3.2) is global, as in LIBLINEAR: the thresholds M̄, m̄ of (16) are
the extremes of the projected gradients over the previous round's visits of
all blocks, and when the shrunken problem meets (17) every block reactivates
all its rows.  (Per-block thresholds would shrink more aggressively than
LIBLINEAR: a block's own extremes lie inside the global ones.)

Stopping: LIBLINEAR's rule (17): the spread of projected gradients over a
round whose passes covered every row, max PG − min PG ≤ eps; or, with
``gap_tol`` > 0, a duality gap ≤ gap_tol·P(w), which bounds P(w) − P* by the
same amount (the certificate LIBLINEAR does not offer); or ``max_rounds``
with a :class:`~distsvm.errors.ConvergenceWarning`.  Each round also reports
the primal and dual objectives and the duality gap, which certifies the
solution's quality independently of the stopping rule.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
import warnings

import numpy as np

import workers.blocks
import workers.dcd
from storage import Dataset
from workers import losses

from .. import cluster
from ..cluster import WorkerPlan
from ..errors import ConvergenceWarning
from ..progress import Progress


@dataclasses.dataclass
class Result:
    """What a solver returns: the weights and how it got there."""

    w: np.ndarray
    rounds: int
    converged: bool
    primal_objective: float
    dual_objective: float
    duality_gap: float
    train_seconds: float
    history: list[dict]


def _segments(order: list[int], owners: tuple[str, ...]) -> list[tuple[str, list[int]]]:
    """Split a round's block order into runs of consecutive blocks with the same owner;
    each run is one task, so a worker that owns every block does a round in one task."""
    out: list[tuple[str, list[int]]] = []
    for b in order:
        if out and out[-1][0] == owners[b]:
            out[-1][1].append(b)
        else:
            out.append((owners[b], [b]))
    return out


def _seed(seed: int, round_: int, block: int) -> int:
    return int(np.random.SeedSequence([seed, round_, block]).generate_state(1)[0])


def solve(client, dataset: Dataset, plan: WorkerPlan, *, loss: str, C: float, eps: float,
          bias: float, max_rounds: int, seed: int, inner_passes: int = 1, gap_tol: float = 0.0,
          progress: Progress | None = None) -> Result:
    """Train by block-wise DCD on the cluster behind ``client``; see the module docstring."""
    progress = progress or Progress(quiet=True)
    code = losses.code(loss)
    meta = dataset.meta
    dim = meta.n_features + (1 if bias >= 0 else 0)
    diag = 0.0 if code == losses.HINGE else 0.5 / C
    run = uuid.uuid4().hex
    rng = np.random.default_rng(seed)
    prev = np.zeros(dim)
    history: list[dict] = []
    start = time.perf_counter()
    converged = False
    primal = dual = np.nan
    owners = [a for a in plan.workers if plan.blocks_of(a)]
    common = dict(bias=bias, n_features=meta.n_features, loss=code, positive=1,
                  storage_options=dataset.storage_options)
    shrink = None  # (M̄, m̄) of (16) from the previous round over all blocks; None: unshrink
    try:
        for r in range(1, max_rounds + 1):
            order = [int(b) for b in rng.permutation(len(meta.blocks))]
            segments = _segments(order, plan.owners)
            for k, (a, blocks) in enumerate(segments):
                last = k == len(segments) - 1
                prev = client.submit(
                    workers.dcd.segment, prev, dataset.url, [meta.blocks[b] for b in blocks],
                    [_seed(seed, r, b) for b in blocks], run,
                    report_infos=[meta.blocks[b] for b in plan.blocks_of(a)] if last else None,
                    C=C, eps=eps, n_passes=inner_passes, shrink=shrink,
                    cache_bytes=plan.cache_bytes[a],
                    workers=[a], pure=False, **common)
            last_owner = segments[-1][0]
            others = [client.submit(workers.dcd.report, prev, dataset.url,
                                    [meta.blocks[b] for b in plan.blocks_of(a)], run,
                                    cache_bytes=plan.cache_bytes[a], workers=[a], pure=False,
                                    **common)
                      for a in owners if a != last_owner]
            (w, own), *rest = cluster.gather(client, [prev] + others, owners)
            reports = [own] + rest
            ww = reports[0]["ww"]
            primal = 0.5 * ww + C * sum(p["loss"] for p in reports)
            dual = sum(p["sum_alpha"] for p in reports) - 0.5 * ww \
                - 0.5 * diag * sum(p["sum_alpha_sq"] for p in reports)
            pg_max, pg_min = max(p["pg_max"] for p in reports), min(p["pg_min"] for p in reports)
            pg = pg_max - pg_min
            row = {"round": r, "primal": primal, "dual": dual, "gap": primal - dual,
                   "pg_violation": pg,
                   "active": sum(p["active"] for p in reports) / max(1, meta.n_rows),
                   "train_accuracy": sum(p["correct"] for p in reports) / max(1, meta.n_rows),
                   "seconds": time.perf_counter() - start}
            history.append(row)
            progress.round(row)
            full = all(p["full"] for p in reports)
            if (pg <= eps and full) or (gap_tol > 0 and primal - dual <= gap_tol * abs(primal)):
                converged = True  # (17) on a pass over every row, or certified by the gap
                break
            if pg <= eps:  # the shrunken problem is solved: reactivate every row, check again
                shrink = None
            else:
                shrink = (pg_max if pg_max > 0 else np.inf, pg_min if pg_min < 0 else -np.inf)
        else:
            msg = (f"dcd reached the round limit ({max_rounds}) before the projected-gradient "
                   f"violation {pg:.3g} fell to eps={eps:g}; increase max_rounds or eps")
            warnings.warn(msg, ConvergenceWarning, stacklevel=2)
    finally:
        client.run(workers.blocks.drop_run, run)
    return Result(w=w, rounds=len(history), converged=converged, primal_objective=primal,
                  dual_objective=dual, duality_gap=primal - dual,
                  train_seconds=time.perf_counter() - start, history=history)
