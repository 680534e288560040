"""L1-regularized linear classification: LIBLINEAR's -s 5 and -s 6 over the column view.

Problems (Fan et al. 2008, 2022 revision)::

    -s 5:  min_w ‖w‖₁ + Σⱼ Cⱼ max(0, 1 − yⱼwᵀxⱼ)²     CDN, Appendix F
    -s 6:  min_w ‖w‖₁ + Σⱼ Cⱼ log(1 + e^{−yⱼwᵀxⱼ})    newGLMNET, Appendix G

Both are coordinate methods over features, so they read the store's column view
(``distsvm columnize``), as primal CD does.  Kernels: :mod:`distsvm.workers.kernels.l1`; tasks:
:mod:`distsvm.workers.l1`.  Stopping and defaults are LIBLINEAR 2.50's (``solve_l1r_l2_svc``,
``solve_l1r_lr`` in linear.cpp): stop when the 1-norm of the minimum-norm subgradient,
summed over the features, falls to eps·max(min(#pos, #neg), 1)/l of its value at the
first iteration (eps = 0.01); shrinking of zero weights with gradients inside (−1, 1).
The bias feature (``-B``) is an ordinary, L1-regularized feature, as in LIBLINEAR;
``regularize_bias=False`` (``-R``) leaves its |w| out of the objective, as LIBLINEAR's.
Row j costs Cⱼ = C × its class weight (``-wi``) × its instance weight.

Distributed (``pcd_mode``, the option primal CD has): **exact** — LIBLINEAR's sequential
algorithm on one worker, which reads every column block through its cache; per batch of
rounds (≤ ``BATCH_SECONDS``) it returns w and the shrinking state (≈ 9(n+1) bytes).
**parallel** — the column blocks are shared among the workers (their owners); each round,
every owner runs the round's work on its own features from the same w (CDN: one pass of
Appendix F, shrinking its features; newGLMNET: its features' gradient and Hessian diagonal,
then the inner CD of Appendix G on the quadratic model restricted to them — a block-diagonal
Hessian, still positive definite); the summed direction d gets a line search on the full
objective (:func:`distsvm.workers.l1.combine`: Tseng & Yun 2009's Armijo rule, β = 1, ½, …, σ = 0.01;
Appendix G's own for newGLMNET), and the next round's tasks are in flight before the report is
read.  Every round decreases F, and Tseng & Yun's CGD convergence (their Theorem 1) covers
directions from a positive definite model as newGLMNET's; CDN's summed passes are Jacobi steps
whose β ≤ 1/P step decreases F by ≥ 1/P of the parts' decreases (convexity), the argument of
primal CD's parallel mode.  Stopping: the parts' Gnorm1 summed.  Per round, P owners, l rows:
the state (w: 8(n+1), b or wᵀx: 8l, CDN's active set: n+1 bytes) to each other owner; from
each owner Δw of its features, Δb or Xd (8l), its active flags; to the coordinator w (and
the active set).  Faults (:mod:`distsvm.solvers.driver`): REBUILD — the state is a function
of w and the shrinking state, rebuilt on a survivor.  Sparsity (nnz) in every log row.
More: docs/solvers/l1.md.
"""

from __future__ import annotations

import numpy as np

import distsvm.workers.l1
from distsvm.storage import Dataset
from distsvm.workers import losses
from distsvm.workers.kernels import l1 as kernel

from .. import cluster
from ..checkpoint import Checkpointer
from ..cluster import WorkerPlan
from ..columns import training_rows
from ..progress import Progress
from . import driver

BATCH_SECONDS = 0.5  # rounds one task may run before it reports


def solve(client, dataset: Dataset, plan: WorkerPlan, p, *, positive: int = 1, cost=None,
          progress: Progress | None = None, checkpoint: Checkpointer | None = None) -> driver.Result:
    """Train -s 5 (``loss="squared_hinge"``) or -s 6 (``"logistic"``) on the cluster behind
    ``client``, ``p`` the checked parameters; rows of class index ``positive`` are +1.
    ``cost`` is C per class index (:func:`distsvm.workers.losses.class_costs`); the store's instance
    weights multiply it.  ``p.pcd_mode``: "exact" (one worker) or "parallel" (the feature
    blocks on their owners)."""
    ctx = driver.Context(client, dataset, plan, progress or Progress(quiet=True), checkpoint)
    return driver.drive(_L1(ctx, loss=p.loss, cost=cost, eps=float(p.eps), bias=float(p.bias),
                            seed=p.seed, max_rounds=p.max_rounds,
                            reg=bool(p.regularize_bias), positive=positive, mode=p.pcd_mode,
                            rows=training_rows(dataset, p)),
                        max_rounds=p.max_rounds)[0]


def scaled_eps(eps: float, class_counts, positive: int) -> float:
    """LIBLINEAR's tolerance for these solvers (``train_one``): eps·max(min(#pos, #neg), 1)/l."""
    counts = np.asarray(class_counts, dtype=np.int64)
    pos = int(counts[positive])
    neg = int(counts.sum()) - pos
    return eps * max(min(pos, neg), 1) / int(counts.sum())


class _L1(driver.Solver):
    """One step: a batch of LIBLINEAR's outer iterations on one worker (exact mode), or one
    round of the pipeline whose next round is in flight (parallel mode)."""

    name = "l1"
    policy = driver.REBUILD

    def __init__(self, ctx, *, loss, cost, eps, bias, seed, max_rounds, reg, positive, rows,
                 mode="exact"):
        super().__init__(ctx)
        self.mode = mode
        meta = ctx.dataset.meta
        self.code = losses.code(loss)
        self.cmeta, rows = rows  # (distsvm.columns.training_rows)
        self.eps = eps
        self.eps_rel = scaled_eps(eps, meta.class_counts, positive)
        self.max_rounds, self.seed = max_rounds, seed
        self.common = dict(loss=self.code, bias=bias, reg=bool(reg) or bias < 0,
                           n_features=meta.n_features,
                           class_cost=np.asarray(cost, dtype=np.float64), positive=positive,
                           storage_options=ctx.dataset.storage_options, **rows)
        self.dim = meta.n_features + (1 if bias >= 0 else 0)
        self.carry: dict = {}  # w and the shrinking state after the last round reported
        self.gnorm1_init = self.f = np.nan
        self.nnz = 0
        self.fresh = True
        self.n_items = len(self.cmeta.blocks) + (1 if bias >= 0 else 0)  # the bias: the last
        self.ahead: list = []  # parallel mode: the futures of the next round

    def workers_of(self):
        """Parallel mode: the workers the parts run on, and the owner of each item."""
        addrs = self.ctx.plan.workers[:self.n_items]
        return addrs, [addrs[k % len(addrs)] for k in range(self.n_items)]

    def parallel_round(self, prev, r):
        """Round r's tasks: one part per owner, then the combine (last, on the first owner,
        where the state future stays) that makes the next state."""
        ctx = self.ctx
        addrs, owners = self.workers_of()
        kw = dict(self.common, run=ctx.run)
        parts = [ctx.client.submit(distsvm.workers.l1.part, prev, ctx.dataset.url, self.cmeta,
                                   [k for k in range(self.n_items) if owners[k] == a], r,
                                   self.seed, cache_bytes=ctx.plan.cache_bytes[a],
                                   n_parts=len(addrs), workers=[a], pure=False, **kw)
                 for a in addrs]
        return parts + [ctx.client.submit(distsvm.workers.l1.combine, prev, parts, r,
                                          url=ctx.dataset.url, cmeta=self.cmeta,
                                          eps=self.eps_rel, workers=addrs[:1], pure=False,
                                          **kw)]

    def parallel_step(self, r):
        ctx = self.ctx
        addrs, _ = self.workers_of()
        if self.fresh:
            first = ctx.client.submit(
                distsvm.workers.l1.parallel_initial, ctx.dataset.url, self.cmeta, ctx.run,
                cache_bytes=ctx.plan.cache_bytes[addrs[0]],
                resume={**self.carry, "gnorm1_init": self.gnorm1_init} if self.carry else None,
                workers=addrs[:1], pure=False, **self.common)
            self.ahead = self.parallel_round(first, r)
        current = self.ahead  # round r + 1 is submitted before round r's report is read
        self.ahead = self.parallel_round(current[-1], r + 1) if r < self.max_rounds else []
        ctx.pending = current + self.ahead + [ctx.client.submit(
            distsvm.workers.l1.reports, current[-1], workers=addrs[:1], pure=False)]
        reps = cluster.gather(ctx.client, ctx.pending[-1:], addrs)[0]  # waits on all parts
        got = reps[-1]["resume"]  # w by its non-zeros, the active set as bits
        self.carry = {k: v for k, v in got.items() if k not in ("gnorm1_init", "w")}
        self.carry["w"] = distsvm.workers.l1.unpack_w(got["w"])
        if self.code == losses.SQUARED_HINGE:
            self.carry["active"] = distsvm.workers.l1.unpack_active(got["w"])
        if reps[-1]["done"] and self.ahead:
            ctx.client.cancel(self.ahead)
        return {"reports": reps}

    def step(self, r):
        if self.mode == "parallel":
            out = self.parallel_step(r)
            self.fresh = False
            return self.rows(r, out)
        ctx = self.ctx
        addr = ctx.plan.workers[0]
        every = ctx.checkpoint.every if ctx.checkpoint is not None else None
        ctx.pending = [ctx.client.submit(
            distsvm.workers.l1.exact_rounds, ctx.dataset.url, self.cmeta, r, self.max_rounds,
            self.seed, ctx.run, eps=self.eps_rel, gnorm1_init=self.gnorm1_init,
            seconds=self.batch_seconds(BATCH_SECONDS), stop_at=-(-r // every) * every if every else None,
            resume=(self.carry or None) if self.fresh else None,
            cache_bytes=ctx.plan.cache_bytes[addr], free_bytes=ctx.plan.free.get(addr),
            workers=[addr], pure=False, **self.common)]
        out = cluster.gather(ctx.client, ctx.pending, [addr])[0]
        self.fresh = False
        self.carry = out["resume"]
        return self.rows(r, out)

    def rows(self, r, out):
        rows = []
        for rep in out["reports"]:
            self.gnorm1_init, self.f, self.nnz = rep["gnorm1_init"], rep["f"], rep["nnz"]
            rows.append((0, {"round": r, "primal": rep["f"],
                             "gnorm1": rep["gnorm1"] / rep["gnorm1_init"],
                             "nnz": rep["nnz"], "active": int(rep["stats"][kernel.VISITED]),
                             "inner": rep.get("inner", 0), "line_search": rep.get(
                                 "line_search", int(rep["stats"][kernel.EVALS])),
                             "step": rep.get("t", 1.0),
                             "ago": out["reports"][-1].get("elapsed", 0.0)
                             - rep.get("elapsed", 0.0)}))
            self.done[0] = self.converged[0] = rep["done"]
            r += 1
        return rows

    def line(self, row):
        inner = f"  CD cycles {row['inner']:3d}" if self.code == losses.LOGISTIC else ""
        if self.mode == "parallel":
            inner += f"  step {row['step']:.3g}"
        return (f"round {row['round']:4d}  objective {row['primal']:.8e}  |subgrad|_1 "
                f"{row['gnorm1']:.2e} rel (stop at {self.eps_rel:.2e})  nnz {row['nnz']}/"
                f"{self.dim}  active {row['active']}{inner}  {row['seconds']:.2f}s")

    def limit(self, k, history):
        return (f"the 1-norm of the minimum-norm subgradient fell to {self.eps_rel:.3g} of its "
                f"first value ({history[-1]['gnorm1']:.3g})")

    def w(self, k):
        w = self.carry.get("w")
        return np.zeros(self.dim) if w is None else w

    def extra(self, k):
        return {"nnz": int(self.nnz), "n_weights": int(self.dim)}

    def state(self):
        arrays = {k: v for k, v in self.carry.items() if isinstance(v, np.ndarray)}
        scalars = {k: float(v) for k, v in self.carry.items() if not isinstance(v, np.ndarray)}
        return arrays, {**scalars, "gnorm1_init": self.gnorm1_init, "f": self.f,
                        "nnz": self.nnz}

    def resume(self, found):
        self.carry = {**dict(found.arrays), **{k: found.state[k] for k in
                                              ("gmax_old", "inner_eps") if k in found.state}}
        self.gnorm1_init, self.f = found.state["gnorm1_init"], found.state["f"]
        self.nnz = found.state["nnz"]
        self.fresh = True

    def rebuild(self):
        self.fresh, self.ahead = True, []
