"""Line-search Newton with preconditioned conjugate gradient: LIBLINEAR's primal solver for
L2-regularized logistic regression (``-s 0``), the L2-loss SVM (``-s 2``) and the L2-loss SVR
(``-s 11``).

Problem: ``min_w f(w) = ½wᵀw + Σᵢ Cᵢ ξ(yᵢwᵀxᵢ)`` with ξ the logistic loss or the squared
hinge (:mod:`distsvm.workers.kernels.newton`) and Cᵢ = C times the class weight of yᵢ; for SVR
(Fan et al. 2008, A.6 (9)) ``½wᵀw + Σᵢ Cᵢ max(0, |wᵀxᵢ − yᵢ| − p)²`` on a regression store
(real targets yᵢ; Cᵢ = C times the instance weight), LIBLINEAR's ``l2r_l2_svr_fun``.  With
``bias >= 0`` the last coordinate of w weighs a constant feature of that value (``-B``);
``regularize_bias=False`` leaves it out of ½wᵀw, of the Hessian's identity part and of the
preconditioner (LIBLINEAR's ``-R``).

Algorithm: the line-search truncated Newton method of Galli & Lin (2021, "A study on
truncated Newton methods for linear classification", IEEE TNNLS), which replaced the
trust-region method TRON (Lin, Weng & Keerthi 2008; Fan et al. 2008, Appendix) in LIBLINEAR
2.40; we follow LIBLINEAR's ``newton.cpp``: the Newton direction by preconditioned CG
(:func:`distsvm.workers.newton.pcg`) with LIBLINEAR's diagonal preconditioner (Hsia, Chiang &
Lin 2018) and the quadratic-model stopping rule of Galli & Lin (2021, §4); a backtracking line search from
α = 1 (η = 0.01, at most 20 halvings); stop when ‖∇f(w)‖ ≤ eps'·‖∇f(0)‖ with LIBLINEAR's eps'
(:func:`stopping_tolerance`, ``train_one()`` of linear.cpp: eps' = eps for SVR), when the
line search fails or f no longer decreases, or after ``max_rounds`` iterations.

Distributed: the data are touched only through map-reduce passes over the row blocks
(:mod:`distsvm.workers.newton`), each returning a vector of n_features[+1]; the workers keep z = Xw and
the Hessian's weights D, and a direction's pass also evaluates f, ∇f and D at w + s, so an
iteration with k CG steps reads the data k + 1 times when α = 1 where LIBLINEAR reads it
k + 2 times, with the same iterates.  On up to ``driver.TREE_MIN`` workers an iteration is one
call on each owner at once (:func:`distsvm.workers.newton.iteration`,
:meth:`driver.Passes.together`), the owners adding up each pass's parts among themselves and
running the same CG, so that no vector goes through the coordinator; over more, the
coordinator runs CG and each pass's replies are added up a tree on the workers
(:meth:`driver.Passes.total`).  Faults (run by :mod:`distsvm.solvers.driver`): REBUILD —
z and D are functions of w, recomputed on the survivors from the coordinator's w.

The passes, memory, checkpoints and measurements: docs/solvers/newton.md.
"""

from __future__ import annotations

import numpy as np

import distsvm.workers.newton
from distsvm.storage import Dataset
from distsvm.workers import losses
from distsvm.workers.newton import dot_once

from ..checkpoint import Checkpointer
from ..cluster import WorkerPlan
from ..progress import Progress
from . import driver
from .driver import Result


def stopping_tolerance(eps: float, class_counts) -> float:
    """LIBLINEAR's eps' = eps·max(min(#pos, #neg), 1)/l for its primal solvers."""
    return eps * max(min(class_counts), 1) / max(1, sum(class_counts))


def solve(client, dataset: Dataset, plan: WorkerPlan, p, *, positive: int = 1, cost=None,
          progress: Progress | None = None, checkpoint: Checkpointer | None = None) -> Result:
    """Train by line-search Newton on the cluster behind ``client``; see the module docstring.

    ``p`` are the checked parameters (:class:`distsvm.params.Params`): ``warm_start`` an
    initial w of n_features (+1 with a bias) entries, ``epsilon`` the SVR loss's p
    (LIBLINEAR's ``-p``).  ``cost`` is C per class index (:func:`distsvm.workers.losses.class_costs`);
    rows of class index ``positive`` have yᵢ = +1, the others −1 (one-vs-rest).  With ``checkpoint`` the run
    continues from its latest checkpoint and writes one every ``checkpoint.every``
    iterations (docs/solvers/newton.md, "Checkpoints and worker faults").
    """
    ctx = driver.Context(client, dataset, plan, progress or Progress(quiet=True), checkpoint)
    return driver.drive(_Newton(ctx, loss=p.loss, cost=cost, eps=float(p.eps),
                                bias=float(p.bias), regularize_bias=bool(p.regularize_bias),
                                warm_start=p.warm_start, positive=positive,
                                epsilon=float(p.epsilon)),
                        max_rounds=p.max_rounds)[0]


class _Newton(driver.Solver):
    """One step: one Newton iteration (the first also evaluates w and logs iteration 0).
    Policy REBUILD: the workers' z = Xw and D are functions of w."""

    name = "newton"
    policy = driver.REBUILD

    def __init__(self, ctx, *, loss, cost, eps, bias, regularize_bias, warm_start,
                 positive, epsilon=0.0):
        super().__init__(ctx)
        meta = ctx.dataset.meta
        d = meta.n_features
        self.reg = np.ones(d + (1 if bias >= 0 else 0))
        if bias >= 0 and not regularize_bias:
            self.reg[d] = 0.0
        self.class_cost = np.asarray(cost, np.float64)
        self.passes = driver.Passes(ctx, bias)
        self.kw = dict(loss=losses.code(loss), positive=positive, epsilon=float(epsilon))
        self.regression = meta.regression
        if self.regression:  # LIBLINEAR's train_one: the primal tolerance is eps itself
            self.eps = eps
        else:
            n_pos = meta.class_counts[positive]  # one-vs-rest: this class against the rest
            self.eps = stopping_tolerance(eps, (meta.n_rows - n_pos, n_pos))
        self.x = np.zeros(len(self.reg)) if warm_start is None else \
            np.array(warm_start, dtype=np.float64)
        self.gnorm0 = None  # ‖∇f(0)‖, the stopping rule's reference; None: not started
        self.fresh = True  # whether the workers' z and D must be computed from w first
        # whether the owners hold the iterate they start the next iteration from (f, ∇f and
        # diag(∇²f) at x: distsvm.workers.newton.iteration), which the coordinator then lacks
        self.kept = False
        self.f = self.g = self.M = None

    def evaluate(self, w):
        """(f, ∇f, diag(∇²f), rows right) at w, computing the workers' z and D."""
        reps = self.passes.total(distsvm.workers.newton.evaluate, self.ctx.run, w,
                                 class_cost=self.class_cost, threaded=True, **self.kw)
        self.fresh = self.kept = False
        return self.totals(w, reps)

    def totals(self, w, reps):
        """(f, ∇f, diag(∇²f), rows right) at w from the workers' replies of an evaluation."""
        return distsvm.workers.newton.totals(w, reps, self.reg)

    def row(self, k, gnorm, cg, step, correct) -> tuple[int, dict]:
        return 0, {"round": k, "primal": self.f, "grad_norm": gnorm,
                   "rel_grad_norm": gnorm / self.gnorm0, "cg_iterations": cg, "step": step,
                   # SVR: the share of rows in the tube |wᵀxᵢ − yᵢ| ≤ p
                   "train_in_tube" if self.regression else "train_accuracy":
                       correct / max(1, self.ctx.dataset.meta.n_rows),
                   "passes": self.passes.count}

    def step(self, r):
        rows = []
        if self.gnorm0 is None:  # ‖∇f(0)‖ (from w = 0 even with a warm start), iteration 0
            gnorm0 = None
            if np.any(self.x):
                g0 = self.evaluate(np.zeros(len(self.x)))[1]
                gnorm0 = np.sqrt(dot_once(g0, g0))
            self.f, self.g, self.M, correct = self.evaluate(self.x)
            gnorm = np.sqrt(dot_once(self.g, self.g))
            self.gnorm0 = (gnorm if gnorm0 is None else gnorm0) or 1.0  # ∇f(0) = 0: stop
            rows.append(self.row(0, gnorm, 0, 0.0, correct))
            if gnorm <= self.eps * self.gnorm0:
                self.done[0] = self.converged[0] = True
                return rows
        if self.fresh:  # a resumed or recovered run: z and D at w first
            self.f, self.g, self.M, _ = self.evaluate(self.x)
        passes = self.passes
        start = None if self.kept else (self.x, self.g, self.M, self.f, self.reg)
        if len(passes.owned()) <= driver.TREE_MIN:  # on the owners, adding up among them
            s, cg, warning, alpha, f, gnorm, correct, count = passes.together(
                distsvm.workers.newton.iteration, self.ctx.run, start,
                class_cost=self.class_cost, threaded=True, **self.kw)[0]
            passes.count += count
            self.kept, self.g, self.M = True, None, None
        else:
            s, cg, warning, alpha, reps = distsvm.workers.newton.advance(
                passes.total, self.ctx.run, self.kw, self.class_cost, self.x, self.g, self.M,
                self.f, self.reg)
        if warning:
            self.ctx.progress.note(f"WARNING: {warning}")
        if alpha == 0.0:
            self.ctx.progress.note("WARNING: line search fails")
            self.done[0] = True
            return rows
        f_old, x = self.f, self.x + alpha * s
        if not self.kept:
            f, self.g, self.M, correct = self.totals(x, reps)
            gnorm = np.sqrt(dot_once(self.g, self.g))
        self.f, self.x = f, x
        rows.append(self.row(r, gnorm, cg, alpha, correct))
        self.done[0] = self.converged[0] = gnorm <= self.eps * self.gnorm0
        if not self.converged[0] and abs(f_old - self.f) <= 1e-12 * abs(self.f):
            self.ctx.progress.note("WARNING: actred too small")
            self.done[0] = True
        return rows

    def line(self, row):
        return (f"iter {row['round']:4d}  f {row['primal']:.8e}  |grad| {row['grad_norm']:.3e} "
                f"({row['rel_grad_norm']:.1e} rel)  CG {row['cg_iterations']:3d}  "
                f"step {row['step']:.3g}  {row['seconds']:.2f}s")

    def limit(self, k, history):
        return (f"‖∇f‖ fell to eps'={self.eps:.3g} of ‖∇f(0)‖ "
                f"({history[-1]['rel_grad_norm']:.3g})")

    def w(self, k):
        return self.x

    def state(self):
        return {"w": self.x}, {"gnorm0": self.gnorm0, "passes": self.passes.count}

    def resume(self, found):
        self.x, self.gnorm0 = found.arrays["w"], found.state["gnorm0"]
        self.passes.count, self.fresh = found.state["passes"], True

    def rebuild(self):
        self.fresh = True
