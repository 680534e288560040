"""Crammer–Singer multi-class SVM (LIBLINEAR ``-s 4``) by the sequential dual method over
row blocks.

Problem and algorithm: Appendix E of the LIBLINEAR paper (Fan et al. 2008), after
Keerthi, Sundararajan, Chang, Hsieh & Lin (KDD 2008): the dual (15) of (14), one
row's K variables at a time by the exact sub-problem solver of E.3, with
LIBLINEAR's shrinking (E.5) and stopping rule (E.4); kernel
:mod:`distsvm.workers.kernels.crammer_singer`, per-block tasks :mod:`distsvm.workers.crammer_singer`.

Distribution, as sequential DCD (:mod:`distsvm.solvers.dcd`): each round visits all
blocks in a fresh random order, one pass over the active rows of each, with
W (K × n [+1]) carried from task to task and never through the coordinator inside
a round; a block's α and shrinking state stay on its owner.  The shrinking
tolerance and the stopping rule are LIBLINEAR's, applied to the round (one
LIBLINEAR outer iteration when the store has one block): with ``stopping`` the
largest ``max G − min G`` of the round's passes, if ``stopping < eps_shrink``
then the run stops when also ``stopping < eps`` on a round that started with every
row and class active, and otherwise every block reactivates everything next
round and ``eps_shrink ← max(eps_shrink/2, eps)``; ``eps_shrink`` starts at
max(10·eps, 1); or, with ``gap_tol``, on the duality gap.  Each round reports the
primal objective
½‖W‖² + C Σ ξᵢ, the dual −(½‖W‖² + Σ eᵢᵐαᵢᵐ) (the negated minimum of (15): a
lower bound of the primal optimum) and their gap.

Where one worker owns every block (the joined store, by default), its rounds run on it in
batches (:func:`distsvm.workers.crammer_singer.batch`): the same block orders, seeds and decisions,
with no task, no transfer of W and no primal pass per round.  A round over one block is one
LIBLINEAR outer iteration over the active set; LIBLINEAR allows 100000 of them for ``-s 4``,
the registry's default ``max_rounds`` here (news20 takes ~20,000).

Worker faults: the round driver's ROLLBACK (:mod:`distsvm.solvers.driver`) — the lost
blocks restart at α = 0 (feasible for (15)), the others roll back to the round's start
(:func:`distsvm.workers.crammer_singer.restore`), W = Σ_b X̂_bᵀα_b is summed from them and the
round runs again with every row and class active; checkpoints hold each block's α and
shrinking state, W, the block orders' RNG state and the stopping rule's state.
docs/solvers/multiclass.md has the details and measurements.

Not done (unlike DCD): skipping blocks whose rows are all shrunk.
"""

from __future__ import annotations

import numpy as np

import distsvm.workers.crammer_singer
import distsvm.workers.dcd
import distsvm.workers.resident
from distsvm.storage import Dataset

from .. import cluster
from ..checkpoint import Checkpointer
from ..cluster import WorkerPlan
from ..progress import Progress
from . import dcd, driver, resident
from .driver import Result


def solve(client, dataset: Dataset, plan: WorkerPlan, p, *, positive: int = 1, cost=None,
          progress: Progress | None = None, checkpoint: Checkpointer | None = None) -> Result:
    """Train W (K × n [+1]) on the cluster behind ``client``; see the module docstring.
    ``p`` are the checked parameters; ``positive`` is not read (the K classes are one
    problem).  ``cost`` (C per class index, :func:`distsvm.workers.losses.class_costs`) and the
    store's instance weights give row i its bound Cᵢ (:func:`distsvm.workers.losses.costs`); the
    primal is then ½‖W‖² + Σ Cᵢξᵢ.  ``p.gap_tol`` > 0 also stops once the duality gap is
    ≤ gap_tol·P(W), which bounds P(W) − P* by the same amount (LIBLINEAR's rule gives no
    such bound).
    With ``checkpoint``, the run continues from its latest checkpoint if there is one, and
    writes one every ``checkpoint.every`` rounds."""
    ctx = driver.Context(client, dataset, plan, progress or Progress(quiet=True), checkpoint)
    return driver.drive(_CrammerSinger(ctx, cost=cost, eps=float(p.eps), bias=float(p.bias),
                                       seed=p.seed, gap_tol=float(p.gap_tol),
                                       max_rounds=p.max_rounds),
                        max_rounds=p.max_rounds)[0]


class _CrammerSinger(driver.Solver):
    """One step: one round over all blocks, W chained from block to block.  Policy
    ROLLBACK: α resident on the blocks' owners (:func:`distsvm.workers.crammer_singer.restore`)."""

    name = "crammer_singer"
    policy = driver.ROLLBACK
    restore = staticmethod(distsvm.workers.crammer_singer.restore)

    def __init__(self, ctx, *, cost, eps, bias, seed, gap_tol, max_rounds):
        super().__init__(ctx)
        meta = ctx.dataset.meta
        K = len(meta.classes)
        self.W = np.zeros((meta.n_features + (1 if bias >= 0 else 0), K))  # as LIBLINEAR's w
        class_cost = np.asarray(cost, np.float64)
        self.common = dict(class_cost=class_cost, bias=bias, n_features=meta.n_features,
                           storage_options=ctx.dataset.storage_options)
        self.restore_kw = dict(n_classes=K, bias=bias, n_features=meta.n_features)
        self.eps, self.seed, self.gap_tol, self.max_rounds = eps, seed, gap_tol, max_rounds
        self.rng = np.random.default_rng(seed)
        self.order = (0, None)  # (round, its block order): a round run again keeps its order
        self.eps_shrink = max(10.0 * eps, 1.0)
        self.start_from_all, self.unshrink = True, True

    def step(self, r):
        ctx, meta = self.ctx, self.ctx.dataset.meta
        owners = resident.owners(ctx.plan)
        if len(owners) == 1:  # its rounds on its worker, in batches
            return self.batch(r, owners)
        if self.order[0] != r:
            self.order = (r, [int(b) for b in self.rng.permutation(len(meta.blocks))])
        self.W, reports = resident.chained_round(
            ctx, distsvm.workers.crammer_singer, self.W, self.order[1], r, self.seed,
            segment_kw=dict(unshrink=self.unshrink, **self.common), report_kw=self.common)
        row = distsvm.workers.crammer_singer.round_row(r, reports, meta.n_rows)
        converged, self.unshrink, self.start_from_all, self.eps_shrink = \
            distsvm.workers.crammer_singer.next_round(
                max(p["stopping"] for p in reports), row, eps=self.eps, gap_tol=self.gap_tol,
                eps_shrink=self.eps_shrink, start_from_all=self.start_from_all)
        self.done[0] = self.converged[0] = converged
        return [(0, row)]

    def batch(self, r, owners):
        """Rounds from r on the one owner (:func:`distsvm.workers.crammer_singer.batch`): the same
        block orders (the generator's state goes with the batch and comes back), seeds and
        decisions as the chained rounds, with no task, no transfer of W and no primal pass
        per round."""
        ctx, meta = self.ctx, self.ctx.dataset.meta
        shrink = {"eps_shrink": self.eps_shrink, "unshrink": self.unshrink,
                  "start_from_all": self.start_from_all}
        ctx.pending = [ctx.client.submit(
            distsvm.workers.crammer_singer.batch, self.W, ctx.dataset.url, list(meta.blocks), ctx.run,
            first=r, rng_state=self.rng.bit_generator.state, seed=self.seed,
            n_rows=meta.n_rows, max_rounds=self.max_rounds,
            every=ctx.checkpoint.every if ctx.checkpoint is not None else None,
            seconds=self.batch_seconds(dcd.BATCH_SECONDS), eps=self.eps, gap_tol=self.gap_tol, shrink=shrink,
            cache_bytes=ctx.plan.cache_bytes[owners[0]], workers=owners, pure=False,
            **self.common)]
        self.W, out = cluster.gather(ctx.client, ctx.pending, owners)[0]
        self.rng.bit_generator.state = out["rng"]
        self.eps_shrink, self.unshrink, self.start_from_all = (
            out["shrink"][k] for k in ("eps_shrink", "unshrink", "start_from_all"))
        self.done[0] = self.converged[0] = out["converged"]
        last = out["rows"][-1]["at"]
        for row in out["rows"]:  # its time: when the task had done it
            row["ago"] = last - row.pop("at")
        return [(0, row) for row in out["rows"]]

    def limit(self, k, history):
        return (f"the stopping value {history[-1]['pg_violation']:.3g} fell to "
                f"eps={self.eps:g}")

    def w(self, k):
        return np.ascontiguousarray(self.W.T)

    def save_workers(self, directory):
        return resident.write(self.ctx, distsvm.workers.crammer_singer.save_blocks,
                              resident.held(self.ctx, {"": self.ctx.run}), directory)

    def state(self):
        return {"w": self.W}, {"rng": self.rng.bit_generator.state,
                               "eps_shrink": self.eps_shrink, "unshrink": self.unshrink,
                               "start_from_all": self.start_from_all}

    def resume(self, found):
        resident.load(self.ctx, distsvm.workers.resident.load_blocks,
                      resident.held(self.ctx, {"": self.ctx.run}), found)
        self.W, self.rng.bit_generator.state = found.arrays["w"], found.state["rng"]
        self.eps_shrink = found.state["eps_shrink"]
        self.unshrink = found.state["unshrink"]
        self.start_from_all = found.state["start_from_all"]

    def rolled_back(self, w):
        """The rolled-back blocks' shrinking state is dropped: the round runs again with
        every row and class active, and counts as one started from all."""
        self.W, self.unshrink, self.start_from_all = w, True, True
