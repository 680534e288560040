"""SVM-ALM: the augmented-Lagrangian primal solver of Nie, Huang, Wang & Huang (ICML 2014).

Problem: the Lp-primal SVM (4) with an unregularized bias b,

    min_{w,b}  obj(w, b) = ½‖w‖² + C Σᵢ max(0, 1 − yᵢ(wᵀxᵢ + b))ᵖ,   p ≥ 1,

which is LIBLINEAR's scaling ``½‖w‖² + C Σ loss`` (p = 1: ``-s 3``'s hinge,
p = 2: ``-s 1``'s squared hinge) except that LIBLINEAR's ``-B`` bias feature
is regularized; with ``bias=False`` (b = 0) the problems are identical.  With
eᵢ = yᵢ − (wᵀxᵢ + b) the problem becomes (5), whose augmented Lagrangian (8)
is minimized alternately in e (10) and in (w, b) (14), followed by the
multiplier step (9), with a nondecreasing penalty µ.

* Inexact SVM-ALM (Algorithm 2, ``method="inexact"``, the default): per
  iteration the e-update (10) — closed forms (12) for p = 1, (13) for p = 2, a
  safeguarded Newton-bisection on (11) otherwise (:mod:`workers.kernels.alm`) —
  one gradient step (16) on (w, b) with the optimal step size (18), and (9).
* Exact SVM-ALM (Algorithm 1, ``method="exact"``): the (w, b) subproblem (15)
  is solved by SciPy's LSQR on a ``LinearOperator`` whose matvec and rmatvec
  are distributed passes over the row blocks (warm-started at the current
  (w, b), i.e. LSQR solves for the correction).

Choices the paper leaves open, and what the distributed version changes:

* µ schedule: µ₁ = ``mu0``·C, µₖ₊₁ = min(``rho``·µₖ, ``mu_max``), geometric as in
  Lin et al. 2009 (which the paper cites for its Q-linear convergence), capped
  at the paper's 10⁵.  Eq. (29) only bounds µₖ₊₁ from above; we do not use it.
  Defaults ``mu0=0.01``, ``rho=1.02``: measured on a9a subsets, faster growth
  (1.05) freezes the inexact iterates 2–4·10⁻³ above the optimum (the gradient
  step cannot follow a fast-growing µ), 1.02 reaches 10⁻⁴ (see docs).  No
  default suits every dataset: the inexact step (16)+(18) is one steepest-
  descent step on (14), whose Hessian XXᵀ + µ⁻¹I has condition number about
  1 + µ·λmax(XXᵀ) where XXᵀ has directions of small curvature (rare features
  of sparse text); as µ grows those weights stop moving and the iterates stall
  (pypi-summaries: 1.5% above the optimum after 450 iterations).  There a
  constant small µ (``mu0=0.03, rho=1``) converges (3·10⁻⁴ in 300), while on
  a9a it oscillates; the log reports the dual residual µ‖[w_g; b_g]‖ =
  ‖[w + Xλ̃; 1ᵀλ̃]‖ (λ̃ the multipliers (9) would give at the current w) next to
  the constraint violation so that a stall (dual ≫ primal residual with µ
  still growing) shows; docs/solvers/alm.md has the measurements.
* Initialization: the paper's w = 1 (all ones) is not scale-free (on a9a it
  starts at an objective ~10⁵); we start from w = 0, b = 0, λ = 0, e = 0.
* Passes: the paper counts three matrix-vector products per iteration.  Here
  an iteration is two passes over the data: pass A (:func:`workers.alm.gradient_pass`)
  computes mᵢ = wᵀxᵢ + b, does the λ-update (9) of the previous iteration
  (deferred to this pass: it needs Xᵀw of the w the previous step produced),
  the objective (4) and its gradient, the e-update (10), and the Xr part of
  (16); pass B (:func:`workers.alm.direction_pass`) computes ‖Xᵀw_g + 1b_g‖²
  for (18).  The simplified numerator of (18) needs no pass.
* Memory: λ and e live on the workers with their blocks; the coordinator holds
  [w; b], the gradients and µ: O(n_features).  The exact method is the
  exception: SciPy's LSQR keeps its vectors of length n + n_features at the
  coordinator, and each LSQR iteration moves an n-vector (documented cost of
  using LSQR as the paper does).

Checkpoints and worker faults: every k iterations (:mod:`distsvm.checkpoint`) each
worker writes λ and e of its blocks (:func:`workers.alm.save_blocks`) and the coordinator
commits [w; b], µ, the previous µ (of the deferred (9)) and the history; a resumed run
takes exactly the uninterrupted run's iterates.  When a worker leaves the cluster
(:class:`distsvm.cluster.WorkerLost`) its blocks' λ and e are lost: the survivors take its
blocks (:func:`distsvm.cluster.replan`) and, if there is a checkpoint, every block (the
survivors' too: their state may be halfway through the interrupted iteration) takes λ and
e of the latest one and the run continues from its iterate, µ and iteration, so it
follows the no-fault run's iterates; without one, every block restarts from λ = 0, e = 0
at the current [w; b] and µ (the first pass skips (9)), which the log says: convergence
continues from there, not along the no-fault path.  ClusterError only when no worker of
the job is left.

Stopping (the paper's §4): ‖∇obj(w, b)‖ ≤ ``eps`` (absolute, default 0.01 as
the paper; for p = 1 obj is not differentiable and this uses the subgradient
with −yᵢxᵢ on rows with positive loss, which rarely vanishes), or the
objective changed by at most ``rtol``·obj over the last ``window`` iterations,
or ``max_iter`` with a :class:`~distsvm.errors.ConvergenceWarning`.
"""

from __future__ import annotations

import time
import uuid
import warnings

import numpy as np
import scipy.sparse.linalg

import workers.alm
import workers.blocks
from storage import Dataset

from .. import cluster
from ..checkpoint import Checkpointer
from ..cluster import WorkerPlan
from ..errors import ConvergenceWarning
from ..progress import Progress
from .driver import Result

MU_MAX = 1e5  # the paper's upper limit of µ (§3)
WINDOW = 10  # iterations over which the relative objective change is measured
# at the iteration cap, a dual residual µ‖g‖ this many times the constraint violation means
# µ outgrew the gradient step (docs/solvers/alm.md): the warning suggests a constant µ
STALL_RATIO = 10.0


def _objective(x, loss, C, n_features):
    w = x[:n_features]
    return 0.5 * float(w @ w) + C * loss


class _Passes:
    """Map-reduce passes: one task per worker over the blocks it owns, replies in worker order."""

    def __init__(self, client, dataset: Dataset, plan: WorkerPlan, bias_value: float,
                 positive: int = 1):
        self.client, self.url, self.meta = client, dataset.url, dataset.meta
        self._plan(plan)
        self.pending: list = []
        self.common = dict(bias=bias_value, n_features=dataset.meta.n_features,
                           storage_options=dataset.storage_options)
        self.positive = positive  # the class index of yᵢ = +1, for the passes that read labels
        self.count = 0

    def each(self, fn, *args, per_worker=None, threaded=False, **kw) -> list:
        """``fn(url, infos, *args, [per_worker[j]], **kw)`` on each worker j; counts one pass.
        ``threaded``: ``fn`` also takes ``threads``, the worker's (:class:`WorkerPlan`), and
        shares its blocks among them (:func:`workers.blocks.each_block`)."""
        self.count += 1
        self.pending = futures = [self.client.submit(fn, self.url, infos, *args,
                                      *((per_worker[j],) if per_worker is not None else ()),
                                      cache_bytes=self.plan.cache_bytes[a], workers=[a],
                                      pure=False, **self.common, **kw,
                                      **({"threads": self.plan.threads.get(a, 1)}
                                         if threaded else {}))
                   for j, (a, infos) in enumerate(zip(self.owners, self.infos))]
        return cluster.gather(self.client, futures, self.owners)  # WorkerLost if one leaves

    def per_owner(self, fn, run: str, *args) -> list:
        """``fn(run, infos, *args)`` on each worker that owns blocks (checkpoint files: not a
        pass over the data), replies in worker order."""
        self.pending = futures = [self.client.submit(fn, run, infos, *args, workers=[a],
                                                     pure=False)
                                  for a, infos in zip(self.owners, self.infos)]
        return cluster.gather(self.client, futures, self.owners)

    def _plan(self, plan: WorkerPlan) -> None:
        self.plan = plan
        self.owners = [a for a in plan.workers if plan.blocks_of(a)]
        self.infos = [[self.meta.blocks[b] for b in plan.blocks_of(a)] for a in self.owners]

    def replan(self, gone: list[str]) -> int:
        """After :class:`~distsvm.cluster.WorkerLost`: wait until the interrupted pass's tasks
        on the survivors have ended, then give the blocks of the workers ``gone`` to the
        survivors (:func:`distsvm.cluster.replan`; ClusterError when none is left).  Returns
        the number of blocks that changed owner."""
        cluster.settle(self.client, self.pending, self.plan.workers)
        moved = sum(a in set(gone) for a in self.plan.owners)
        self._plan(cluster.replan(self.plan, gone))
        return moved


def solve(client, dataset: Dataset, plan: WorkerPlan, *, p: float, C: float, eps: float = 0.01,
          rtol: float = 1e-6, bias: bool = True, max_iter: int = 1000, mu0: float = 0.01,
          rho: float = 1.02, mu_max: float = MU_MAX, method: str = "inexact",
          lsqr_tol: float = 1e-10, lsqr_iter: int = 1000,
          progress: Progress | None = None, positive: int = 1,
          checkpoint: Checkpointer | None = None) -> Result:
    """Train by SVM-ALM on the cluster behind ``client``; see the module docstring.  Rows
    of class index ``positive`` have yᵢ = +1, the others −1 (one-vs-rest).  With
    ``checkpoint`` the run continues from its latest checkpoint and writes one every
    ``checkpoint.every`` iterations (see "Checkpoints and worker faults")."""
    progress = progress or Progress(quiet=True)
    meta = dataset.meta
    d = meta.n_features
    x = np.zeros(d + (1 if bias else 0))
    run = uuid.uuid4().hex
    passes = _Passes(client, dataset, plan, 1.0 if bias else -1.0, positive)
    history: list[dict] = []
    start = time.perf_counter()
    converged = False
    mu, mu_prev = mu0 * C, 0.0
    obj = gnorm = np.nan
    k = 0  # the last iteration done

    def restore(found, run):
        """Everything as the checkpoint ``found`` has it; λ and e of every block loaded by
        its (present) owner into run ``run``."""
        passes.per_owner(workers.alm.load_blocks, run, found.directory, found.files,
                         checkpoint.storage_options)
        passes.count = found.state["passes"]
        return (found.arrays["x"], found.state["mu"], found.state["mu_prev"], found.round,
                found.state["history"], time.perf_counter() - found.state["seconds"])

    try:
        found = checkpoint.latest("alm") if checkpoint is not None else None
        if found is not None:
            progress.note(f"resuming from the checkpoint of iteration {found.round} "
                          f"({found.directory})")
            try:
                x, mu, mu_prev, k, history, start = restore(found, run)
            except cluster.WorkerLost as lost:
                x, mu, mu_prev, k, history, start, run = _recover(
                    client, passes, checkpoint, lost.gone, run, restore, progress,
                    x, mu, k, history, start)
        while k < max_iter:
            k += 1
            try:
                # pass A: (9) of the previous iteration, obj (4) and ∇obj, (10), Xr of (16)
                reps = passes.each(workers.alm.gradient_pass, run, x, positive=passes.positive,
                                   mu_prev=mu_prev, mu=mu, C=C, p=p, threaded=True)
                obj = _objective(x, sum(r["loss"] for r in reps), C, d)
                grad = C * sum(r["gloss"] for r in reps)
                grad[:d] += x[:d]
                gnorm = float(np.linalg.norm(grad))
                xg = sum(r["xtr"] for r in reps)  # the gradient (16): [X r; 1ᵀr] + [µ⁻¹w; 0]
                xg[:d] += x[:d] / mu
                row = {"round": k, "primal": obj, "grad_norm": gnorm,
                       "residual": float(np.sqrt(sum(r["resid_sq"] for r in reps))),
                       "dual_residual": mu * float(np.linalg.norm(xg)), "mu": mu,
                       "train_accuracy": sum(r["correct"] for r in reps) / max(1, meta.n_rows),
                       "passes": passes.count, "seconds": time.perf_counter() - start}
                history.append(row)
                progress.round(row, f"iter {k:4d}  obj {obj:.8e}  |grad| {gnorm:.2e}  "
                               f"|Xw+b-y+e| {row['residual']:.2e}  "
                               f"mu|g| {row['dual_residual']:.2e}  mu {mu:.2e}  "
                               f"{row['seconds']:.2f}s")
                if gnorm <= eps or (k > WINDOW and abs(history[-1 - WINDOW]["primal"] - obj)
                                    <= rtol * abs(obj)):
                    converged = True
                    break
                if k == max_iter:
                    break
                if method == "exact":
                    x = x + _lsqr_correction(passes, run, x, mu, d, lsqr_tol, lsqr_iter)
                else:
                    x = _gradient_step(passes, xg, x, mu, d)
            except cluster.WorkerLost as lost:
                x, mu, mu_prev, k, history, start, run = _recover(
                    client, passes, checkpoint, lost.gone, run, restore, progress,
                    x, mu, k, history, start)
                continue
            mu_prev, mu = mu, min(rho * mu, mu_max)
            if checkpoint is not None and checkpoint.due(k):
                _save(passes, checkpoint, run, k, x, mu, mu_prev, history, start, progress)
        if not converged:
            msg = (f"alm reached the iteration limit ({max_iter}) before the gradient norm "
                   f"{gnorm:.3g} fell to eps={eps:g} or the objective settled to "
                   f"rtol={rtol:g}; increase max_iter, eps or rtol")
            last = history[-1]
            if method == "inexact" and rho > 1 and last["dual_residual"] > STALL_RATIO * max(
                    last["residual"], np.finfo(float).tiny):
                msg += (f". The dual residual mu|g| {last['dual_residual']:.3g} is over "
                        f"{STALL_RATIO:g}x the constraint violation {last['residual']:.3g}: "
                        f"mu ({mu:.3g}) has outgrown one gradient step, the stall of "
                        "docs/solvers/alm.md; a constant mu (rho=1, e.g. mu0=0.03) continues")
            warnings.warn(msg, ConvergenceWarning, stacklevel=2)
    finally:
        client.run(workers.blocks.drop_run, run)
    return Result(w=x, rounds=len(history), converged=converged, primal_objective=obj,
                  dual_objective=np.nan, duality_gap=np.nan,
                  train_seconds=time.perf_counter() - start, history=history,
                  extra={"grad_norm": gnorm, "passes": passes.count},
                  options={"p": p, "method": method, "mu0": mu0, "rho": rho, "mu_max": mu_max,
                           "rtol": rtol})


def _save(passes, checkpoint, run, k, x, mu, mu_prev, history, start, progress) -> None:
    """Checkpoint the end of iteration ``k``: each owner writes λ and e of its blocks
    (:func:`workers.alm.save_blocks`), then the coordinator commits [w; b], µ, the previous
    µ (of the deferred step (9)), the history.  A worker lost meanwhile skips this
    checkpoint (the next pass notices the loss)."""
    try:
        written = passes.per_owner(workers.alm.save_blocks, run, checkpoint.directory(k),
                                   checkpoint.storage_options)
    except cluster.WorkerLost as lost:
        progress.note(f"iter {k}: worker {', '.join(lost.gone)} left while checkpointing; "
                      "no checkpoint this iteration")
        return
    checkpoint.save(k, "alm", {"x": x},
                    {"mu": mu, "mu_prev": mu_prev, "history": history, "passes": passes.count,
                     "seconds": time.perf_counter() - start},
                    {name: digest for part in written for name, digest in part.items()})


def _recover(client, passes, checkpoint, gone, run, restore, progress, x, mu, k, history,
             start):
    """After workers ``gone`` left during iteration ``k``: the survivors take their blocks,
    with the state of the latest checkpoint if there is one, else every block's λ = 0 and
    e = 0 at the iteration's [w; b] (see "Checkpoints and worker faults").  Returns the
    loop's (x, µ, µ_prev, last iteration done, history, start, run id)."""
    while True:
        moved = passes.replan(gone)
        client.run(workers.blocks.drop_run, run)
        run = uuid.uuid4().hex
        what = (f"iter {k}: worker {', '.join(gone)} left the cluster; its {moved} blocks go "
                f"to the other {len(passes.owners)} worker(s)")
        found = checkpoint.latest("alm") if checkpoint is not None else None
        if found is None:
            progress.note(f"{what}; there is no checkpoint, so every block restarts from "
                          f"lambda = 0, e = 0 at the current w and mu, and convergence "
                          f"continues from there (iteration {k} again)")
            return x, mu, 0.0, k - 1, history[:k - 1], start, run
        try:
            out = restore(found, run)
        except cluster.WorkerLost as again:
            gone = again.gone
            continue
        progress.note(f"{what}; every block's lambda and e come from the checkpoint of "
                      f"iteration {found.round}, which the run continues from")
        return (*out, run)


def _gradient_step(passes, xg, x, mu, d):
    """Algorithm 2, step 2: x − s·x_g with the gradient ``xg`` (16) and the optimal step (18)."""
    num = float(xg @ xg)  # the simplified numerator of (18)
    if num == 0.0:
        return x
    den = sum(passes.each(workers.alm.direction_pass, xg, threaded=True)) \
        + float(xg[:d] @ xg[:d]) / mu
    return x - (num / den) * xg  # (18)


def _lsqr_correction(passes, run, x, mu, d, tol, iter_lim):
    """Algorithm 1, step 2: the correction δ such that x + δ solves (15), by LSQR.

    (15) is min ‖A[w; b] − [z; 0]‖ with A = [[Xᵀ, 1], [µ^-½ I, 0]]; from the
    current x the right side of the correction's problem is [−r; −µ^-½ w] with
    r = Xᵀw + 1b − z.  Row vectors are laid out worker by worker, block by block.
    """
    parts = passes.each(workers.alm.residuals, run, x, positive=passes.positive, mu=mu)
    sizes = [[len(v) for v in part] for part in parts]
    r = np.concatenate([v for part in parts for v in part])
    n, scale = len(r), mu ** -0.5

    def matvec(v):
        v = np.ravel(v)
        rows = np.concatenate([b for part in passes.each(workers.alm.matvec, v) for b in part])
        return np.concatenate([rows, scale * v[:d]])

    def rmatvec(u):
        u = np.ravel(u)
        bounds = np.cumsum([0] + [s for ws in sizes for s in ws])
        pieces, j = [], 0
        for ws in sizes:
            pieces.append([u[bounds[j + i]:bounds[j + i + 1]] for i in range(len(ws))])
            j += len(ws)
        out = sum(passes.each(workers.alm.rmatvec, per_worker=pieces))
        out[:d] += scale * u[n:]
        return out

    A = scipy.sparse.linalg.LinearOperator((n + d, len(x)), matvec=matvec, rmatvec=rmatvec,
                                           dtype=np.float64)
    rhs = np.concatenate([-r, -scale * x[:d]])
    return scipy.sparse.linalg.lsqr(A, rhs, atol=tol, btol=tol, iter_lim=iter_lim)[0]
