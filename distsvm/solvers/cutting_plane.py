"""The cutting-plane algorithm for linear SVMs (Joachims, KDD 2006, "Training linear SVMs in
linear time").

Problems, in LIBLINEAR's scaling (``C`` multiplies a *sum* of hinge losses):

* ``classification`` — the L1-loss SVM ``min ½‖w‖² + C Σᵢ max(0, 1 − yᵢwᵀxᵢ)``
  (LIBLINEAR ``-s 3``; OP1 with the paper's C_OP = C·n), solved as the 1-slack
  structural problem OP2 by Algorithm 1;
* ``ordinal`` — the ordinal-regression SVM over the pairs P = {(i, j) : rᵢ > rⱼ} of
  examples of different rank, ``min ½‖w‖² + C Σ_{(i,j)∈P} max(0, 1 − wᵀ(xᵢ − xⱼ))``
  (OP4 with C_OP = C·m, m = |P|), solved as OP5 by Algorithm 2.  The ranks are the
  store's class indices; with two labels this maximizes (a hinge surrogate of) the ROC area.

Each iteration finds the most violated constraint (g, b) at w and its slack ξ′, the average
loss of w (lines 5-7 / 5-23); stops if ξ′ ≤ ξ + ε (line 9 / 24, Theorem 3 / 5: then
P(w) ≤ P* + C_OP·ε); else adds (g, b) to the working set W and solves the dual OP3 over W
(line 4, :mod:`distsvm.solvers.qp`), whose value bounds P* from below (a certified gap).
ε is the paper's, on the average loss; SVMperf's ``-c`` is C_perf = 0.01·C·n (Hsieh et al.,
ICML 2008, footnote 2), converted by :func:`c_from_c_perf`.  Ranking models get R − 1
thresholds minimizing the training absolute rank error (:func:`fit_thresholds`) and
their metrics (:func:`ranking_metrics`).

Distributed: finding the constraint is one map-reduce pass over the row blocks (two for
``ordinal``, whose scores are sorted on the coordinator), each worker returning a dense
partial sum; W and its Gram matrix stay on the coordinator.  Faults (run by
:mod:`distsvm.solvers.driver`): RERUN — the workers keep nothing between passes, so the
interrupted pass runs again on the survivors and the run takes the no-fault iterates.

C conventions, the QP, ranking models, memory limits and measurements:
docs/solvers/cutting_plane.md.
"""

from __future__ import annotations

import numpy as np

import distsvm.workers.blocks
import distsvm.workers.cutting_plane
from distsvm.storage import Dataset
from distsvm.workers.cutting_plane import n_loss_terms, pairwise_accuracy
from distsvm.workers.kernels.cutting_plane import pair_counts, rank_thresholds

from .. import cluster
from ..checkpoint import Checkpointer
from ..cluster import WorkerPlan
from ..progress import Progress
from . import driver, qp
from .driver import Result


def c_from_c_perf(c_perf: float, class_counts, objective: str = "classification") -> float:
    """LIBLINEAR's C for SVMperf's ``-c``: C = 100·C_perf / n (rows, or pairs for ordinal)."""
    return 100.0 * c_perf / n_loss_terms(class_counts, objective)


class _WorkingSet:
    """The constraints (g_c, b_c) of W, their Gram matrix H, and the last dual solution."""

    def __init__(self, dim: int):
        self.g = np.empty((8, dim))
        self.b = np.empty(8)
        self.H = np.empty((8, 8))
        self.k = 0
        self.alpha = np.zeros(0)

    def add(self, g: np.ndarray, b: float) -> None:
        k = self.k
        if k == self.g.shape[0]:  # double the capacity
            cap = 2 * k
            self.g = np.concatenate([self.g, np.empty((cap - k, self.g.shape[1]))])
            self.b = np.concatenate([self.b, np.empty(cap - k)])
            H = np.empty((cap, cap))
            H[:k, :k] = self.H[:k, :k]
            self.H = H
        self.g[k] = g
        self.b[k] = b
        row = self.g[:k + 1] @ g
        self.H[k, :k + 1] = row
        self.H[:k + 1, k] = row
        self.k = k + 1

    def arrays(self) -> dict:
        """What a checkpoint keeps: the constraints, their Gram matrix, the dual solution."""
        k = self.k
        return {"g": self.g[:k], "b": self.b[:k], "H": self.H[:k, :k], "alpha": self.alpha}

    @classmethod
    def from_arrays(cls, a: dict) -> _WorkingSet:
        ws = cls(a["g"].shape[1])
        ws.k = len(a["b"])
        ws.g, ws.b, ws.H, ws.alpha = (np.array(a[k]) for k in ("g", "b", "H", "alpha"))
        return ws

    def solve(self, C_op: float, tol: float):
        """Line 4: the optimum over W; returns (w, ξ, the QP's result with the dual value)."""
        k = self.k
        r = qp.solve(self.H[:k, :k], self.b[:k], C_op, alpha0=self.alpha, tol=tol)
        self.alpha = r.alpha
        w = self.g[:k].T @ r.alpha
        xi = max(0.0, float(np.max(self.b[:k] - self.g[:k] @ w)))
        return w, xi, r


def _classification_cut(client, dataset, plan, w, common, n, positive=1):
    """One pass: (g, b, ξ′) of Algorithm 1's most violated constraint at w."""
    meta = dataset.meta
    owners = [a for a in plan.workers if plan.blocks_of(a)]
    futures = [client.submit(distsvm.workers.cutting_plane.hinge_cut, w, dataset.url,
                             [meta.blocks[b] for b in plan.blocks_of(a)], positive=positive,
                             cache_bytes=plan.cache_bytes[a], workers=[a], pure=False, **common)
               for a in owners]
    parts = cluster.gather(client, futures, owners)
    return sum(p[0] for p in parts) / n, sum(p[1] for p in parts) / n, sum(p[2] for p in parts) / n


def _ordinal_scores(client, dataset, plan, w, common):
    """Scores wᵀxᵢ and ranks of every row, in block order (one pass)."""
    meta = dataset.meta
    futures = [client.submit(distsvm.workers.blocks.block_decisions, dataset.url, info, w,
                             common["bias"], common["n_features"],
                             plan.cache_bytes[plan.owners[b]], common["storage_options"],
                             workers=[plan.owners[b]], pure=False)
               for b, info in enumerate(meta.blocks)]
    parts = cluster.gather(client, futures, set(plan.owners))
    return (np.concatenate([p[0] for p in parts]) if parts else np.zeros(0),
            np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int32))


def _ordinal_cut(client, dataset, plan, w, common, m):
    """Algorithm 2 lines 5-23 on the coordinator: (c⁺ − c⁻, b, ξ′) of the most violated
    constraint at w; its vector g needs a second pass (:func:`_ordinal_g`), done only if
    the iteration goes on."""
    scores, ranks = _ordinal_scores(client, dataset, plan, w, common)
    order = np.argsort(-scores, kind="stable")
    cplus = np.zeros(len(scores), np.int64)
    cminus = np.zeros(len(scores), np.int64)
    violated = pair_counts(scores, ranks, order, len(dataset.meta.classes), cplus, cminus)
    coef = (cplus - cminus).astype(np.float64)
    # Σ_{violated (i,j)} (1 − sᵢ + sⱼ) = #violated − Σᵢ (c⁺ᵢ − c⁻ᵢ) sᵢ
    xi_prime = (violated - float(coef @ scores)) / m
    return coef, violated / m, max(0.0, xi_prime)


def _ordinal_g(client, dataset, plan, coef, common, m):
    """One pass: g = (1/m) Σ (c⁺ᵢ − c⁻ᵢ) xᵢ, each worker given its blocks' coefficients."""
    meta = dataset.meta
    starts = np.cumsum([0] + [info.n_rows for info in meta.blocks])
    futures, owners = [], []
    for a in plan.workers:
        mine = plan.blocks_of(a)
        if mine:
            owners.append(a)
            futures.append(client.submit(
                distsvm.workers.cutting_plane.weighted_sum, [coef[starts[b]:starts[b + 1]] for b in mine],
                dataset.url, [meta.blocks[b] for b in mine], dim=common["dim"],
                bias=common["bias"], n_features=common["n_features"],
                cache_bytes=plan.cache_bytes[a], storage_options=common["storage_options"],
                workers=[a], pure=False))
    return sum(cluster.gather(client, futures, owners)) / m


def fit_thresholds(client, dataset: Dataset, plan: WorkerPlan, w: np.ndarray,
                   bias: float, progress: Progress | None = None) -> tuple[np.ndarray, dict]:
    """A ranking model's thresholds for ``w`` — R − 1 cuts of the training scores minimizing
    the training absolute rank error (docs/solvers/cutting_plane.md, "Ranking models"); one
    pass for the scores, run again on the others if a worker leaves — and its training
    metrics (:func:`ranking_metrics`)."""
    meta = dataset.meta
    common = dict(bias=bias, n_features=meta.n_features, storage_options=dataset.storage_options)
    ctx = driver.Context(client, dataset, plan, progress or Progress(quiet=True))
    scores, ranks = driver.once(ctx, lambda: _ordinal_scores(client, dataset, ctx.plan, w,
                                                             common))
    thresholds = np.empty(len(meta.classes) - 1)
    rank_thresholds(scores, ranks, np.argsort(scores, kind="stable"), len(meta.classes),
                    thresholds)
    return thresholds, ranking_metrics(scores, ranks, thresholds, len(meta.classes))


def ranking_metrics(scores: np.ndarray, ranks: np.ndarray, thresholds: np.ndarray,
                    n_ranks: int) -> dict:
    """Rank accuracy, mean absolute rank error (in ranks) and pairwise ordering accuracy of
    ``scores`` against the true rank indices ``ranks`` (0 … n_ranks−1)."""
    predicted = np.searchsorted(thresholds, scores, side="left")
    n = max(1, len(scores))
    pairwise, pairs = pairwise_accuracy(scores, ranks, n_ranks)
    return {"rank_accuracy": int(np.sum(predicted == ranks)) / n,
            "mean_abs_rank_error": float(np.sum(np.abs(predicted - ranks))) / n,
            "pairwise_accuracy": pairwise, "n_pairs": pairs}


def solve(client, dataset: Dataset, plan: WorkerPlan, p, *, positive: int = 1, cost=None,
          progress: Progress | None = None, checkpoint: Checkpointer | None = None) -> Result:
    """Train by Algorithm 1 (``classification``) or 2 (``ordinal``); see the module docstring.

    ``positive`` (classification): the class index whose rows have yᵢ = +1 (one-vs-rest).

    ``p`` are the checked parameters: ``C`` LIBLINEAR's (per loss term; the solver takes no
    weights, so ``cost`` is not read), ``eps`` the paper's ε on the average loss, which the
    working-set QP's tolerance is a hundredth of.
    With ``checkpoint`` (:mod:`distsvm.checkpoint`) the run continues from its latest
    checkpoint and writes one every ``checkpoint.every`` rounds: all the state is the
    coordinator's (w, the working set W with its Gram matrix and dual solution, ξ).
    """
    meta = dataset.meta
    objective, eps = p.objective, float(p.eps)
    n = n_loss_terms(meta.class_counts, objective)
    if n == 0:
        what = "rows" if objective == "classification" else "pairs of examples of different rank"
        raise ValueError(f"{dataset.url}: no {what} to train on")
    ctx = driver.Context(client, dataset, plan, progress or Progress(quiet=True), checkpoint)
    return driver.drive(_CuttingPlane(ctx, C_op=float(p.C) * n, eps=eps, bias=float(p.bias),
                                      objective=objective, tol=eps / 100, n=n,
                                      positive=positive), max_rounds=p.max_rounds)[0]


class _CuttingPlane(driver.Solver):
    """One step: one iteration of Algorithm 1 or 2.  Policy RERUN: the workers keep nothing
    between passes; all the state (w, the working set, ξ) is the coordinator's."""

    name = "cutting_plane"
    policy = driver.RERUN

    def __init__(self, ctx, *, C_op, eps, bias, objective, tol, n, positive):
        super().__init__(ctx)
        meta = ctx.dataset.meta
        self.dim = meta.n_features + (1 if bias >= 0 else 0)
        self.common = dict(bias=bias, n_features=meta.n_features,
                           storage_options=ctx.dataset.storage_options)
        self.C_op, self.eps, self.objective, self.tol, self.n = C_op, eps, objective, tol, n
        self.positive = positive
        self.ws = _WorkingSet(self.dim)
        self.x, self.xi, self.dual = np.zeros(self.dim), 0.0, 0.0
        self.measured = self.x  # the w whose objective the last round measured

    def step(self, r):
        ctx, w = self.ctx, self.x
        if self.objective == "classification":
            g, b, xi_prime = _classification_cut(ctx.client, ctx.dataset, ctx.plan, w,
                                                 self.common, self.n, self.positive)
        else:
            coef, b, xi_prime = _ordinal_cut(ctx.client, ctx.dataset, ctx.plan, w, self.common,
                                             self.n)
        primal = 0.5 * float(w @ w) + self.C_op * xi_prime
        row = {"round": r, "working_set": self.ws.k, "xi": self.xi, "xi_prime": xi_prime,
               "violation": xi_prime - self.xi, "primal": primal, "dual": self.dual,
               "gap": primal - self.dual}
        if xi_prime <= self.xi + self.eps:  # line 9 / 24: none violated by more than ε
            self.done[0] = self.converged[0] = True
        else:
            if self.objective == "ordinal":
                g = _ordinal_g(ctx.client, ctx.dataset, ctx.plan, coef,
                               {**self.common, "dim": self.dim}, self.n)
            self.ws.add(g, b)
            self.x, self.xi, res = self.ws.solve(self.C_op, self.tol)
            self.dual = res.objective
            row.update(qp_iterations=res.iterations, qp_violation=res.violation)
        self.measured = w
        return [(0, row)]

    def line(self, row):
        return (f"iter {row['round']:4d}  |W| {row['working_set']:4d}  xi {row['xi']:.6f}  "
                f"xi' {row['xi_prime']:.6f}  viol {row['violation']:.2e}  "
                f"primal {row['primal']:.8e}  gap {row['gap']:.2e}  {row['seconds']:.2f}s")

    def limit(self, k, history):
        return (f"the most violated constraint's violation ({history[-1]['violation']:.3g}) "
                f"fell to eps={self.eps:g}")

    def w(self, k):
        return self.measured

    def state(self):
        return {"w": self.x, **self.ws.arrays()}, {"xi": self.xi, "dual": self.dual}

    def resume(self, found):
        self.ws = _WorkingSet.from_arrays(found.arrays)
        self.x, self.xi, self.dual = found.arrays["w"], found.state["xi"], found.state["dual"]
        self.measured = self.x
