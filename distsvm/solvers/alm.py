"""SVM-ALM: the augmented-Lagrangian primal solver of Nie, Huang, Wang & Huang (ICML 2014,
"New primal SVM solver with linear computational cost for big data classifications").

Problem: the Lp-primal SVM (4) with an unregularized bias b,

    min_{w,b}  obj(w, b) = ½‖w‖² + C Σᵢ max(0, 1 − yᵢ(wᵀxᵢ + b))ᵖ,   p ≥ 1,

which is LIBLINEAR's scaling ``½‖w‖² + C Σ loss`` (p = 1: ``-s 3``'s hinge, p = 2: ``-s 1``'s
squared hinge) except that LIBLINEAR's ``-B`` bias feature is regularized; with
``bias=False`` (b = 0) the problems are identical.  With eᵢ = yᵢ − (wᵀxᵢ + b) the problem
becomes (5), whose augmented Lagrangian (8) is minimized alternately in e (10) and in (w, b)
(14), followed by the multiplier step (9), with a nondecreasing penalty µ (µₖ₊₁ =
min(``rho``·µₖ, ``MU_MAX``), geometric as in Lin et al. 2009; (29) only bounds it):

* inexact SVM-ALM (Algorithm 2, ``method="inexact"``, the default): the e-update (10) —
  closed forms (12) for p = 1, (13) for p = 2, a safeguarded Newton–bisection on (11)
  otherwise (:mod:`distsvm.workers.kernels.alm`) — one gradient step (16) on (w, b) with the optimal
  step size (18), and (9);
* exact SVM-ALM (Algorithm 1, ``method="exact"``): the (w, b) subproblem (15) solved by
  SciPy's LSQR on a ``LinearOperator`` whose products are distributed passes.

Stopping (§4): ‖∇obj(w, b)‖ ≤ ``eps``, obj changing by at most ``rtol``·obj over ``WINDOW``
iterations, or ``max_iter``.

Distributed: λ and e live on the workers with their row blocks; the coordinator holds [w; b],
the gradients and µ (O(n_features)).  An inexact iteration is two passes over the data
(:func:`distsvm.workers.alm.gradient_pass`, :func:`distsvm.workers.alm.direction_pass`) where the paper counts
three matrix-vector products; we start from w = 0, not the paper's w = 1.  Faults (run by
:mod:`distsvm.solvers.driver`): RELOAD — every block takes λ and e of the latest checkpoint
and the run continues from its iterate, else λ = e = 0 at the current w and µ.

The µ schedule and its stall on sparse text, passes, memory, checkpoints: docs/solvers/alm.md.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse.linalg

import distsvm.workers.alm
from distsvm.storage import Dataset

from ..checkpoint import Checkpointer
from ..cluster import WorkerPlan
from ..progress import Progress
from . import driver, resident
from .driver import Result

MU_MAX = 1e5  # the paper's upper limit of µ (§3)
LSQR = (1e-10, 1000)  # exact SVM-ALM's LSQR: its tolerance and iteration limit
WINDOW = 10  # iterations over which the relative objective change is measured
# at the iteration cap, a dual residual µ‖g‖ this many times the constraint violation means
# µ outgrew the gradient step (docs/solvers/alm.md): the warning suggests a constant µ
STALL_RATIO = 10.0


def _objective(x, loss, C, n_features):
    w = x[:n_features]
    return 0.5 * float(w @ w) + C * loss


def solve(client, dataset: Dataset, plan: WorkerPlan, p, *, positive: int = 1, cost=None,
          progress: Progress | None = None, checkpoint: Checkpointer | None = None) -> Result:
    """Train by SVM-ALM on the cluster behind ``client``; see the module docstring.  Rows
    of class index ``positive`` have yᵢ = +1, the others −1 (one-vs-rest).  With
    ``checkpoint`` the run continues from its latest checkpoint and writes one every
    ``checkpoint.every`` iterations (docs/solvers/alm.md, "Checkpoints and worker faults")."""
    ctx = driver.Context(client, dataset, plan, progress or Progress(quiet=True), checkpoint)
    return driver.drive(_ALM(ctx, p=float(p.p), C=float(p.C), eps=float(p.eps),
                             rtol=float(p.rtol), bias=p.bias >= 0, max_iter=p.max_rounds,
                             mu0=float(p.mu0), rho=float(p.rho), method=p.method,
                             positive=positive),
                        max_rounds=p.max_rounds)[0]


class _ALM(driver.Solver):
    """One step: one iteration of Algorithm 2 (or 1).  Policy RELOAD: λ and e live on the
    workers and are functions of neither w nor the data."""

    name = "alm"
    policy = driver.RELOAD

    def __init__(self, ctx, *, p, C, eps, rtol, bias, max_iter, mu0, rho, method, positive):
        super().__init__(ctx)
        self.d = ctx.dataset.meta.n_features
        self.x = np.zeros(self.d + (1 if bias else 0))
        self.passes = driver.Passes(ctx, 1.0 if bias else -1.0)
        self.p, self.C, self.eps, self.rtol, self.max_iter = p, C, eps, rtol, max_iter
        self.rho, self.method = rho, method
        self.positive = positive
        self.mu, self.mu_prev = mu0 * C, 0.0
        self.options = {"p": p, "method": method, "mu0": mu0, "rho": rho, "mu_max": MU_MAX,
                        "rtol": rtol}

    def step(self, k):
        ctx, d, x, mu = self.ctx, self.d, self.x, self.mu
        # pass A: (9) of the previous iteration, obj (4) and ∇obj, (10), Xr of (16)
        reps = self.passes.each(distsvm.workers.alm.gradient_pass, ctx.run, x, positive=self.positive,
                                mu_prev=self.mu_prev, mu=mu, C=self.C, p=self.p, threaded=True)
        obj = _objective(x, sum(r["loss"] for r in reps), self.C, d)
        grad = self.C * sum(r["gloss"] for r in reps)
        grad[:d] += x[:d]
        gnorm = float(np.linalg.norm(grad))
        xg = sum(r["xtr"] for r in reps)  # the gradient (16): [X r; 1ᵀr] + [µ⁻¹w; 0]
        xg[:d] += x[:d] / mu
        row = {"round": k, "primal": obj, "grad_norm": gnorm,
               "residual": float(np.sqrt(sum(r["resid_sq"] for r in reps))),
               "dual_residual": mu * float(np.linalg.norm(xg)), "mu": mu,
               "train_accuracy": sum(r["correct"] for r in reps) / max(1, ctx.dataset.meta.n_rows),
               "passes": self.passes.count}
        history = self.histories[0]
        if gnorm <= self.eps or (k > WINDOW and abs(history[-WINDOW]["primal"] - obj)
                                 <= self.rtol * abs(obj)):
            self.done[0] = self.converged[0] = True
        elif k < self.max_iter:  # the last iteration's w is the one measured
            if self.method == "exact":
                self.x = x + _lsqr_correction(self.passes, ctx.run, x, mu, d, *LSQR,
                                                  self.positive)
            else:
                self.x = _gradient_step(self.passes, xg, x, mu, d)
            self.mu_prev, self.mu = mu, min(self.rho * mu, MU_MAX)
        self.measured = x
        return [(0, row)]

    def line(self, row):
        return (f"iter {row['round']:4d}  obj {row['primal']:.8e}  |grad| {row['grad_norm']:.2e}"
                f"  |Xw+b-y+e| {row['residual']:.2e}  mu|g| {row['dual_residual']:.2e}  "
                f"mu {row['mu']:.2e}  {row['seconds']:.2f}s")

    def limit(self, k, history):
        last = history[-1]
        msg = (f"the gradient norm {last['grad_norm']:.3g} fell to eps={self.eps:g} or the "
               f"objective settled to rtol={self.rtol:g}")
        if self.method == "inexact" and self.rho > 1 and last["dual_residual"] > STALL_RATIO * max(
                last["residual"], np.finfo(float).tiny):
            msg += (f" (the dual residual mu|g| {last['dual_residual']:.3g} is over "
                    f"{STALL_RATIO:g}x the constraint violation {last['residual']:.3g}: mu "
                    f"({last['mu']:.3g}) has outgrown one gradient step, the stall of "
                    "docs/solvers/alm.md; a constant mu (rho=1, e.g. mu0=0.03) continues)")
        return msg

    def w(self, k):
        return self.measured

    def extra(self, k):
        return {"grad_norm": self.histories[0][-1]["grad_norm"], "passes": self.passes.count}

    def save_workers(self, directory):
        return resident.write(self.ctx, distsvm.workers.alm.save_blocks,
                              resident.held(self.ctx, self.ctx.run), directory)

    def state(self):
        return {"x": self.x}, {"mu": self.mu, "mu_prev": self.mu_prev,
                               "passes": self.passes.count}

    def resume(self, found):
        """Everything as checkpoint ``found`` has it; λ and e of every block loaded by its
        (present) owner."""
        resident.load(self.ctx, distsvm.workers.alm.load_blocks, resident.held(self.ctx, self.ctx.run),
                      found)
        self.x, self.mu, self.mu_prev = found.arrays["x"], found.state["mu"], found.state["mu_prev"]
        self.passes.count = found.state["passes"]

    def reload(self, found, lost, histories):
        if found is None:
            self.mu_prev = 0.0  # the first pass skips (9): λ = 0
            return ("there is no checkpoint, so every block restarts from lambda = 0, e = 0 at "
                    "the current w and mu, and convergence continues from there")
        self.resume(found)
        histories[0][:] = found.state["histories"][0]
        return (f"every block's lambda and e come from the checkpoint of round "
                f"{found.round}, which the run continues from")


def _gradient_step(passes, xg, x, mu, d):
    """Algorithm 2, step 2: x − s·x_g with the gradient ``xg`` (16) and the optimal step (18)."""
    num = float(xg @ xg)  # the simplified numerator of (18)
    if num == 0.0:
        return x
    den = sum(passes.each(distsvm.workers.alm.direction_pass, xg, threaded=True)) \
        + float(xg[:d] @ xg[:d]) / mu
    return x - (num / den) * xg  # (18)


def _lsqr_correction(passes, run, x, mu, d, tol, iter_lim, positive):
    """Algorithm 1, step 2: the correction δ such that x + δ solves (15), by LSQR.

    (15) is min ‖A[w; b] − [z; 0]‖ with A = [[Xᵀ, 1], [µ^-½ I, 0]]; from the
    current x the right side of the correction's problem is [−r; −µ^-½ w] with
    r = Xᵀw + 1b − z.  Row vectors are laid out worker by worker, block by block.
    """
    parts = passes.each(distsvm.workers.alm.residuals, run, x, positive=positive, mu=mu)
    sizes = [[len(v) for v in part] for part in parts]
    r = np.concatenate([v for part in parts for v in part])
    n, scale = len(r), mu ** -0.5

    def matvec(v):
        v = np.ravel(v)
        rows = np.concatenate([b for part in passes.each(distsvm.workers.alm.matvec, v) for b in part])
        return np.concatenate([rows, scale * v[:d]])

    def rmatvec(u):
        u = np.ravel(u)
        bounds = np.cumsum([0] + [s for ws in sizes for s in ws])
        pieces, j = [], 0
        for ws in sizes:
            pieces.append([u[bounds[j + i]:bounds[j + i + 1]] for i in range(len(ws))])
            j += len(ws)
        out = sum(passes.each(distsvm.workers.alm.rmatvec, per_worker=pieces))
        out[:d] += scale * u[n:]
        return out

    A = scipy.sparse.linalg.LinearOperator((n + d, len(x)), matvec=matvec, rmatvec=rmatvec,
                                           dtype=np.float64)
    rhs = np.concatenate([-r, -scale * x[:d]])
    return scipy.sparse.linalg.lsqr(A, rhs, atol=tol, btol=tol, iter_lim=iter_lim)[0]
