"""Primal coordinate descent over a store's column blocks (Chang, Hsieh & Lin, JMLR 2008).

Problem: LIBLINEAR's ``min_w ½wᵀw + C Σⱼ ξ(w; xⱼ, yⱼ)`` in the primal, with the L2 loss
(squared hinge, the problem of LIBLINEAR ``-s 2``) or the logistic loss (``-s 0``).
Algorithm 1 with sub-problems solved by Algorithm 2 (Newton step (13), line search (12) with
the λ̄ shortcut (15)), bⱼ(w) maintained by (17), and logistic regression as in §6.2; stopping
as §5.3: max |D′ᵢ(0)| over an outer iteration ≤ eps · max |∇f(0)ᵢ|.  Kernel:
:mod:`distsvm.workers.kernels.pcd`; tasks: :mod:`distsvm.workers.pcd`.  Needs the store's column view
(``distsvm columnize``).

Distributed: the residuals b (length l) stay with the worker(s) doing the work.  In
**exact** mode one worker runs every round, visiting the column blocks in a fresh random
order and each block's features in a fresh random order — the random permutation of §3.2
restricted to keep a block's features together, a choice the paper leaves open (any order
converges, Theorem 3) — one task running rounds for up to ``BATCH_SECONDS``.  In
**parallel** mode the column blocks are split among the workers, each runs the round's inner
iterations on its own blocks from the same w and b, and a global line search on the summed
step (:func:`distsvm.workers.pcd.combine`) keeps the objective decreasing.  Faults (run by
:mod:`distsvm.solvers.driver`): REBUILD — b is a function of w, rebuilt on the survivors from
the w of the last round reported.

The modes, batching, checkpoints, faults and measurements: docs/solvers/pcd.md.
"""

from __future__ import annotations

import numpy as np

import distsvm.workers.pcd
from distsvm.storage import Dataset
from distsvm.workers import losses
from distsvm.workers.kernels import pcd as kernel

from .. import cluster
from ..checkpoint import Checkpointer
from ..cluster import WorkerPlan
from ..columns import training_rows
from ..progress import Progress
from . import driver
from .driver import Result

BATCH_SECONDS = 0.5  # exact mode: outer iterations one task may run before it reports


def solve(client, dataset: Dataset, plan: WorkerPlan, p, *, positive: int = 1, cost=None,
          progress: Progress | None = None, checkpoint: Checkpointer | None = None) -> Result:
    """Train by primal coordinate descent on the cluster behind ``client``; see the module
    docstring.  ``plan`` supplies the workers and their cache budgets; ``p`` the checked
    parameters (:class:`distsvm.params.Params`, ``pcd_mode`` the mode).  Rows of class index
    ``positive`` have yᵢ = +1, the others −1 (one-vs-rest).  ``cost`` (C per class index,
    :func:`distsvm.workers.losses.class_costs`) and the store's instance weights give row j
    its Cⱼ (the worker reads the weights from the row blocks once per run,
    :func:`distsvm.workers.pcd.initial`).

    With ``checkpoint`` (:mod:`distsvm.checkpoint`), every ``checkpoint.every`` rounds the
    coordinator writes w and the history, and a run continues from its latest checkpoint
    (docs/solvers/pcd.md, "Checkpoints and worker faults").
    """
    ctx = driver.Context(client, dataset, plan, progress or Progress(quiet=True), checkpoint)
    return driver.drive(_PCD(ctx, loss=p.loss, cost=cost, eps=float(p.eps), bias=float(p.bias),
                             max_rounds=p.max_rounds, seed=p.seed, mode=p.pcd_mode,
                             positive=positive, rows=training_rows(dataset, p)),
                        max_rounds=p.max_rounds)[0]


class _PCD(driver.Solver):
    """One step: a batch of rounds on one worker (exact mode), or one round of the pipeline
    whose next round is in flight (parallel mode).  Policy REBUILD: the workers' residuals
    are a function of w."""

    name = "pcd"
    policy = driver.REBUILD

    def __init__(self, ctx, *, loss, cost, eps, bias, max_rounds, seed, mode, positive, rows):
        super().__init__(ctx)
        meta = ctx.dataset.meta
        self.code = losses.code(loss)
        self.cmeta, rows = rows  # (distsvm.columns.training_rows)
        self.dim = meta.n_features + (1 if bias >= 0 else 0)
        self.n_items = distsvm.workers.pcd.n_items(self.cmeta, bias)
        self.class_cost = np.asarray(cost, dtype=np.float64)
        self.common = dict(bias=bias, n_features=meta.n_features, loss=self.code,
                           class_cost=self.class_cost, positive=positive,
                           storage_options=ctx.dataset.storage_options, **rows)
        self.eps, self.max_rounds, self.seed, self.mode = eps, max_rounds, seed, mode
        self.g0 = self.gnorm0 = self.f = np.nan
        self.x = None  # the w of the last round reported (None: w = 0)
        self.fresh = True  # the workers hold no state of the run: the next step makes it at w
        self.ahead: list = []  # parallel mode: the futures of the next round

    def workers_of(self):
        """The workers the rounds run on, and the owner of each item (parallel mode)."""
        plan = self.ctx.plan
        addrs = plan.workers[:1] if self.mode == "exact" else plan.workers[:self.n_items]
        return addrs, [addrs[k % len(addrs)] for k in range(self.n_items)]

    def parallel_round(self, prev, r):
        """Round r's tasks: the parts, then the combine (last) that makes the next state."""
        ctx = self.ctx
        addrs, owners = self.workers_of()
        parts = [ctx.client.submit(distsvm.workers.pcd.part, prev, ctx.dataset.url, self.cmeta,
                                   [k for k in range(self.n_items) if owners[k] == a], r,
                                   self.seed, ctx.run, cache_bytes=ctx.plan.cache_bytes[a],
                                   workers=[a], pure=False, **self.common)
                 for a in addrs]
        return parts + [ctx.client.submit(distsvm.workers.pcd.combine, prev, parts, loss=self.code,
                                          workers=addrs[:1], pure=False)]

    def step(self, r):
        ctx = self.ctx
        addrs, _ = self.workers_of()
        if self.mode == "exact":  # the state stays on the worker: reports and w come back
            every = ctx.checkpoint.every if ctx.checkpoint is not None else None
            ctx.pending = [ctx.client.submit(
                distsvm.workers.pcd.exact_rounds, ctx.dataset.url, self.cmeta, r, self.max_rounds,
                self.seed, ctx.run, eps=self.eps, g0=self.g0, seconds=self.batch_seconds(BATCH_SECONDS),
                stop_at=-(-r // every) * every if every else None,
                w0=self.x if self.fresh else None, cache_bytes=ctx.plan.cache_bytes[addrs[0]],
                free_bytes=ctx.plan.free.get(addrs[0]), workers=addrs[:1], pure=False,
                **self.common)]
            out = cluster.gather(ctx.client, ctx.pending, addrs[:1])[0]
            reps, self.x = out["reports"], out["w"]
        else:  # round r + 1 is submitted before round r's report is read
            if self.fresh:
                self.ahead = self.parallel_round(ctx.client.submit(
                    distsvm.workers.pcd.initial, ctx.dataset.url, self.cmeta, self.dim, self.code,
                    self.class_cost, self.common["row_infos"], ctx.dataset.storage_options, self.x,
                    bias=self.common["bias"], positive=self.common["positive"],
                    cache_bytes=ctx.plan.cache_bytes[addrs[0]], holdout=self.common["holdout"],
                    workers=addrs[:1], pure=False), r)
            current = self.ahead
            self.ahead = self.parallel_round(current[-1], r + 1) if r < self.max_rounds else []
            ctx.pending = current + self.ahead + [ctx.client.submit(
                distsvm.workers.pcd.reports, current[-1], workers=addrs[:1], pure=False)]
            reps = cluster.gather(ctx.client, ctx.pending[-1:], addrs)[0]  # waits on all parts
            self.x = reps[-1]["w"]
        self.fresh = False
        rows = []
        for rep in reps:
            s = rep["stats"]
            if r == 1:
                self.g0, self.gnorm0 = s[kernel.MAX_GRAD0], np.sqrt(s[kernel.SUM_GRAD0_SQ])
            self.f = rep["f"]
            inner = max(1.0, s[kernel.INNER])
            rows.append((0, {
                "round": r, "primal": self.f, "max_grad": s[kernel.MAX_GRAD] / self.g0,
                "grad_norm": np.sqrt(s[kernel.SUM_GRAD_SQ]) / self.gnorm0, "step": rep["t"],
                "full_newton": s[kernel.FULL_STEP] / inner,
                "shortcut": s[kernel.SHORTCUT] / inner, "evals": int(s[kernel.EVALS]),
                "ago": reps[-1].get("elapsed", 0.0) - rep.get("elapsed", 0.0)}))
            self.done[0] = self.converged[0] = s[kernel.MAX_GRAD] <= self.eps * self.g0  # §5.3
            r += 1
        if self.done[0] and self.ahead:
            ctx.client.cancel(self.ahead)
        return rows

    def line(self, row):
        return (f"round {row['round']:4d}  primal {row['primal']:.8e}  max|D'| "
                f"{row['max_grad']:.2e} rel  |grad| {row['grad_norm']:.2e} rel  step "
                f"{row['step']:.3g}  full Newton {100 * row['full_newton']:5.1f}%  "
                f"{row['seconds']:.2f}s")

    def limit(self, k, history):
        return (f"max|D'ᵢ(0)| fell to eps={self.eps:g} of its value at w = 0 "
                f"({history[-1]['max_grad']:.3g})")

    def w(self, k):
        return self.x

    def state(self):
        return {"w": self.x}, {"g0": self.g0, "gnorm0": self.gnorm0, "f": self.f}

    def resume(self, found):
        self.x, self.g0 = found.arrays["w"], found.state["g0"]
        self.gnorm0, self.f = found.state["gnorm0"], found.state["f"]

    def rebuild(self):
        self.fresh, self.ahead = True, []
