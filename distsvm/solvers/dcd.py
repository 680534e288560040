"""Dual coordinate descent (LIBLINEAR ``-s 1``, ``-s 3``, ``-s 7``) by block minimization.

Problem: LIBLINEAR's ``min_w ½wᵀw + C Σᵢ ξ(w; xᵢ, yᵢ)`` with the L1 (hinge, ``-s 3``) or
L2 (squared hinge, ``-s 1``) loss, solved through its dual (4) of Hsieh, Chang, Lin, Keerthi
& Sundararajan (ICML 2008, "A dual coordinate descent method for large-scale linear SVM"),
Algorithm 1 with the random permutation of §3.1 and the shrinking of §3.2, stopping on
LIBLINEAR's rule (17) or, with ``gap_tol``, on a certified duality gap.  Kernel:
:mod:`distsvm.workers.kernels.dcd`.  With the logistic loss (``-s 7``) the same coordinator runs the
dual CD of Yu, Huang & Lin 2011 on each block (:mod:`distsvm.workers.kernels.dcd_lr`: no shrinking,
stopping on max |g′| < eps, sequential mode only).  With the SVR losses (``-s 13``, ``-s 12``,
``epsilon`` the tube's p) it runs the dual CD of Fan et al. 2008, Appendix A.6, on β
(:mod:`distsvm.workers.kernels.svr_dual`; sequential mode only), stopping on LIBLINEAR's Σ-violation
rule (docs/solvers/svr.md).

Distributed: the rows are split into blocks whose α and shrinking state stay on the worker
that owns them; only w moves.  A round visits every block in a fresh random order, running
``inner_passes`` DCD passes on each (the block minimization of Yu, Hsieh, Chang & Lin, KDD
2010, "Large linear classification when data cannot fit in memory"), w chained from owner to
owner with LIBLINEAR's global shrinking thresholds (16) (:class:`_Chained`).  A store one
worker's cache holds is joined into one block (:func:`distsvm.solvers.resident.held_by_one`)
whose rounds run on that worker in batches, as one-vs-rest's do (:func:`solve_ovr`).
``parallel="average"`` / ``"add"`` runs the workers side by side from a broadcast w
(:class:`_Parallel`): CoCoA (Jaggi, Smith, Takáč, Terhorst, Krishnan, Hofmann & Jordan,
NIPS 2014, "Communication-efficient distributed dual coordinate ascent", Algorithm 1) and
CoCoA+ (Ma, Smith, Jaggi, Jordan, Richtárik & Takáč, ICML 2015, "Adding vs. averaging in
distributed primal-dual optimization", Algorithm 1), with H DCD passes as the local solver.

Faults (run by :mod:`distsvm.solvers.driver`): chained and parallel DCD ROLLBACK (lost blocks
restart at α = 0, the others roll back to the round's start, the round runs again); the
batched path RELOADs a lost worker's problems elsewhere from the latest checkpoint, or α = 0.

Design, shrinking, checkpoints, faults and measurements: docs/solvers/dcd.md.
"""

from __future__ import annotations

import uuid

import numpy as np

import distsvm.workers.blocks
import distsvm.workers.dcd
from distsvm.storage import Dataset
from distsvm.workers import losses

from .. import cluster
from ..checkpoint import Checkpoint, Checkpointer
from ..cluster import WorkerPlan
from ..progress import Progress
from . import driver, resident
from .driver import Result
from .ovr import tagged

BATCH_SECONDS = 0.5  # one-vs-rest: rounds one task may run before it reports
PARALLEL_GAP = 1e-3  # the parallel modes' default stop: duality gap / primal objective
START_SHARE = 0.1  # the SGD starts' w and AdaGrad sums may take this share of a worker's budget
BATCHED = "dcd-batched"  # the checkpoints of solve_ovr (its state differs from solve's)


def streamed(meta, budget: int) -> bool:
    """Whether the store's blocks are read again each round (a worker's ``budget`` cannot
    hold them decoded): only there does dual CD run its SGD start.  The start's pass shares
    the block reads there; in memory another dual round costs less than the start's pass
    and scores better (pypi-summaries ``-s 3`` in one process: round 2 reaches 79.83% in
    0.15 s, the start's pass takes 0.36 s for 78.64%, and early stopping takes 0.46× the
    converged run's time without the start against 0.76× with it; docs/anytime.md)."""
    return sum(cluster.block_sizes(meta)) > budget


def _problem(loss: str, bias: float, meta) -> tuple[int, int]:
    """The loss code and the dimension of w."""
    return losses.code(loss), meta.n_features + (1 if bias >= 0 else 0)


def solve(client, dataset: Dataset, plan: WorkerPlan, p, *, positive: int = 1, cost,
          progress: Progress | None = None, checkpoint: Checkpointer | None = None) -> Result:
    """Train by block-wise DCD on the cluster behind ``client`` (chained, or ``p.parallel``
    ``"average"``/``"add"``; a plan with one owner runs on the batched path, :func:`solve_ovr`).
    ``p`` are the checked parameters (:class:`distsvm.params.Params`; ``epsilon`` is the p of
    the SVR losses, LIBLINEAR's ``-p``).  ``positive`` is the class index whose rows have
    yᵢ = +1 (the others −1): the binary problem of one class against the rest (one-vs-rest,
    :mod:`distsvm.solvers.ovr`).  ``cost`` (C per class index,
    :func:`distsvm.workers.losses.class_costs`) and the store's instance weights give each row its
    Cᵢ (:func:`distsvm.workers.losses.costs`).

    With ``checkpoint``, the run continues from its latest checkpoint if there is one, and
    writes one every ``checkpoint.every`` rounds (docs/solvers/dcd.md, "Checkpoints").
    """
    if p.parallel is None and len(resident.owners(plan)) == 1:  # its rounds on its worker
        return solve_ovr(client, dataset, plan, p, costs=[cost], positives=[positive],
                         progress=progress, checkpoint=checkpoint)[0]
    ctx = driver.Context(client, dataset, plan, progress or Progress(quiet=True), checkpoint)
    kind = _Chained if p.parallel is None else _Parallel
    max_rounds = _max_rounds(p)
    return driver.drive(kind(ctx, loss=p.loss, cost=cost, eps=float(p.eps),
                             bias=float(p.bias), max_rounds=max_rounds, seed=p.seed,
                             inner_passes=p.inner_passes, gap_tol=float(p.gap_tol),
                             parallel=p.parallel, positive=positive,
                             epsilon=float(p.epsilon)),
                        max_rounds=max_rounds)[0]


def _max_rounds(p) -> int:
    """The round limit: ``max_rounds``, or ``primal_switch``'s where LIBLINEAR switches to
    the primal solver before it."""
    return min(p.primal_switch or p.max_rounds, p.max_rounds)


class _Blocks(driver.Solver):
    """What sequential and parallel DCD share: one binary problem, α resident on the blocks'
    owners (policy ROLLBACK: :func:`distsvm.workers.dcd.restore`), w at the coordinator between
    rounds."""

    name = "dcd"
    policy = driver.ROLLBACK
    restore = staticmethod(distsvm.workers.dcd.restore)

    def __init__(self, ctx, *, loss, cost, eps, bias, max_rounds, seed, inner_passes, gap_tol,
                 parallel, positive, epsilon):
        super().__init__(ctx)
        meta = ctx.dataset.meta
        code, dim = _problem(loss, bias, meta)
        class_cost = np.asarray(cost, dtype=np.float64)
        self.common = dict(bias=bias, n_features=meta.n_features, loss=code, positive=positive,
                           class_cost=class_cost, storage_options=ctx.dataset.storage_options,
                           epsilon=epsilon)
        self.restore_kw = dict(bias=bias, n_features=meta.n_features, positive=positive,
                               regression=bool(losses.is_regression.py_func(code)))
        self.eps, self.max_rounds, self.seed, self.gap_tol = eps, max_rounds, seed, gap_tol
        self.inner_passes, self.parallel = inner_passes, parallel
        self.x = np.zeros(dim)

    def limit(self, k, history):
        return _limit(history, self.eps)

    def w(self, k):
        return self.x

    def save_workers(self, directory):
        return resident.write(self.ctx, distsvm.workers.dcd.save_blocks,
                              resident.held(self.ctx, {"": self.ctx.run}), directory)

    def state(self):
        return {"w": self.x}, {}

    def resume(self, found):
        resident.load(self.ctx, distsvm.workers.dcd.load_blocks,
                      resident.held(self.ctx, {"": self.ctx.run}), found)
        self.x = found.arrays["w"]

    def rolled_back(self, w):
        self.x = w


class _Chained(_Blocks):
    """Sequential DCD: one step is one round, w chained from block to block
    (:func:`resident.chained_round`), with LIBLINEAR's global shrinking thresholds."""

    def __init__(self, ctx, **kw):
        super().__init__(ctx, **kw)
        self.shrink = None  # (M̄, m̄) of (16) from the previous round; None: unshrink

    def step(self, r):
        meta = self.ctx.dataset.meta
        order = distsvm.workers.dcd.block_order(self.seed, r, len(meta.blocks))
        # the next round starts from the gathered w, not from a future: a worker lost
        # between rounds then cannot make Dask re-run an old segment
        self.x, reports = resident.chained_round(
            self.ctx, distsvm.workers.dcd, self.x, order, r, self.seed,
            segment_kw=dict(eps=self.eps, n_passes=self.inner_passes, shrink=self.shrink,
                            deadline=self.settings.deadline, **self.common),
            report_kw=self.common)
        row = distsvm.workers.dcd.round_row(r, reports, meta.n_rows)
        row["stale_blocks"] = sum(p["stale"] for p in reports)  # skipped: loss not exact
        self.converged[0], self.shrink = distsvm.workers.dcd.stopping(
            row, reports, self.eps,
            distsvm.workers.dcd.certified(row, self.gap_tol) and not row["stale_blocks"],
            distsvm.workers.dcd.first_gnorm1(self.histories[0]))
        self.done[0] = self.converged[0]
        if self.settings.expired():  # the round may have been cut (workers.dcd.segment)
            self.shrink = None
        return [(0, row)]

    def state(self):
        return {"w": self.x}, {"shrink": self.shrink}

    def resume(self, found):
        super().resume(found)
        self.shrink = found.state["shrink"]

    def rolled_back(self, w):
        self.x, self.shrink = w, None


class _Parallel(_Blocks):
    """CoCoA (``average``) or CoCoA+ (``add``): one step is one round of K local solvers
    from the broadcast w.  Without ``gap_tol`` it stops on (17) or a duality gap of
    ``PARALLEL_GAP`` relative: the projected gradients at the broadcast w rarely meet (17)
    (a9a, K = 2: their spread stays near 5 for 1000 rounds with the hinge loss), the gap
    certificate does."""

    def __init__(self, ctx, **kw):
        super().__init__(ctx, **kw)
        self.gap_tol = self.gap_tol or PARALLEL_GAP
        self.common.update(eps=self.eps, n_passes=self.inner_passes)

    def step(self, r):
        ctx = self.ctx
        meta, plan = ctx.dataset.meta, ctx.plan
        order = distsvm.workers.dcd.block_order(self.seed, r, len(meta.blocks))
        owners = resident.owners(plan)
        K = len(owners)  # γ and σ′ for the workers left; the line mode's γ is its step t
        gamma, sigma = {"average": (1.0 / K, 1.0), "add": (1.0, float(K)),
                        "line": (None, 1.0)}[self.parallel]
        ctx.pending = []
        for a in owners:
            mine = [b for b in order if plan.owners[b] == a]
            ctx.pending.append(ctx.client.submit(
                distsvm.workers.dcd.local_round, self.x, ctx.dataset.url, [meta.blocks[b] for b in mine],
                [distsvm.workers.dcd.block_seed(self.seed, r, b) for b in mine], ctx.run,
                gamma=gamma, sigma=sigma, cache_bytes=plan.cache_bytes[a], tag=r, workers=[a],
                pure=False, deadline=self.settings.deadline, **self.common))
        results = cluster.gather(ctx.client, ctx.pending, owners)
        row = distsvm.workers.dcd.round_row(r, [rep for _, rep in results], meta.n_rows)
        # (17) at the broadcast w, or certified by the gap: keep that w
        self.done[0] = self.converged[0] = row["pg_violation"] <= self.eps or \
            distsvm.workers.dcd.certified(row, self.gap_tol)
        if not self.done[0] and r < self.max_rounds:  # else the w whose objectives were measured
            dw = np.sum([dw for dw, _ in results], axis=0)
            if gamma is None:
                gamma = row["step"] = self.line_step(dw, [rep for _, rep in results], owners)
            self.x = self.x + gamma * dw
        return [(0, row)]

    def line_step(self, dw, reports, owners) -> float:
        """The line mode's step t (:func:`distsvm.workers.dcd.line_step`); the owners' α then move
        by t (:func:`distsvm.workers.dcd.apply_step`)."""
        ctx, plan = self.ctx, self.ctx.plan
        t = distsvm.workers.dcd.line_step(self.x, dw, reports)
        ctx.pending = [ctx.client.submit(distsvm.workers.dcd.apply_step,
                                         [ctx.dataset.meta.blocks[b] for b in plan.blocks_of(a)],
                                         ctx.run, t, workers=[a], pure=False)
                       for a in owners]
        cluster.gather(ctx.client, ctx.pending, owners)
        return t


def solve_ovr(client, dataset: Dataset, plan: WorkerPlan, p, *, costs: list,
              positives: list[int] | None = None, progress: Progress | None = None,
              checkpoint: Checkpointer | None = None) -> list[Result]:
    """One-vs-rest for K classes by sequential DCD, problem k the rows of class index
    ``positives[k]`` (default k) against the rest at C per class index ``costs[k]``
    (:func:`distsvm.workers.losses.class_costs`); or one binary problem (:func:`solve` on a plan
    whose blocks one worker holds).  Returns the results in problem order.

    Problem k goes to slot k mod (number of slots), a slot being one thread of one worker
    (``plan.threads``); the slot's worker keeps its α and shrinking state for every block,
    and its task (:func:`distsvm.workers.dcd.ovr_batch`) runs the problems' rounds over the whole
    store in batches of up to ``BATCH_SECONDS``, sharing each block read among them and
    testing the stopping rule on the worker.  So a round costs no task, no transfer of W and
    no primal pass, and each problem takes the path of its binary run (block orders and
    seeds are functions of (seed, round)).
    Checkpoints and the RELOAD recovery of a lost worker's problems: docs/solvers/dcd.md
    and docs/solvers/multiclass.md.
    """
    ctx = driver.Context(client, dataset, plan, progress or Progress(quiet=True), checkpoint)
    max_rounds = _max_rounds(p)
    return driver.drive(_Batched(ctx, loss=p.loss, costs=costs, eps=float(p.eps),
                                 bias=float(p.bias), max_rounds=max_rounds, seed=p.seed,
                                 inner_passes=p.inner_passes, gap_tol=float(p.gap_tol),
                                 positives=positives, epsilon=float(p.epsilon)),
                        max_rounds=max_rounds)


class _Batched(driver.Solver):
    """K problems dealt to the workers' slots, each slot's task running its problems'
    rounds in batches (:func:`distsvm.workers.dcd.ovr_batch`).  Policy RELOAD: a problem's state is
    on its slot's worker only; a lost worker's problems restart elsewhere from the latest
    checkpoint, or from α = 0."""

    name = BATCHED
    title = "dcd"
    policy = driver.RELOAD

    def __init__(self, ctx, *, loss, costs, eps, bias, max_rounds, seed, inner_passes, gap_tol,
                 positives, epsilon):
        meta = ctx.dataset.meta
        self.problems = K = len(costs)
        self.positives = list(range(K)) if positives is None else positives
        super().__init__(ctx)
        code, dim = _problem(loss, bias, meta)
        self.costs = [np.asarray(c, dtype=np.float64) for c in costs]
        self.runs = [uuid.uuid4().hex for _ in range(K)]
        ctx.runs.extend(self.runs)  # every run id, to drop at the end
        self.prefixes = [f"class{k}-" for k in range(K)]  # of the problems' checkpoint files
        self.where = [self.slots()[k % len(self.slots())] for k in range(K)]  # problem k's slot
        self.W = np.zeros((K, dim))
        self.shrink = [None] * K
        self.tagged = [ctx.progress] if positives is not None else \
            tagged(ctx.progress, meta.classes)
        self.infos = list(meta.blocks)
        self.eps, self.gap_tol = eps, gap_tol
        self.common = dict(
            seed=seed, n_rows=meta.n_rows, max_rounds=max_rounds,
            every=ctx.checkpoint.every if ctx.checkpoint is not None else None,
            seconds=BATCH_SECONDS, eps=eps, gap_tol=gap_tol, n_passes=inner_passes, bias=bias,
            n_features=meta.n_features, loss=code, epsilon=epsilon,
            informative=distsvm.workers.dcd.cache_rows(self.infos, code, ctx.plan.budget(), K),
            storage_options=ctx.dataset.storage_options)
        self.reload_from: dict[int, Checkpoint] = {}  # problems to load from a checkpoint
        # the SGD start (distsvm.workers.kernels.adaptive): where a validation set can score it,
        # a classifier's problems whose two vectors a worker's cache spares, on a store the
        # cache cannot hold (:func:`streamed`); each its last w
        budget = ctx.plan.budget()
        self.starting = [not losses.is_regression.py_func(code) and streamed(meta, budget)
                         and 16 * dim * K <= START_SHARE * budget] * K
        self.started: list[np.ndarray | None] = [None] * K

    def slots(self) -> list[tuple[str, int]]:
        """(worker, thread): each thread of each worker runs a group of problems, the
        blocks' owners first (a binary problem runs next to its blocks)."""
        plan = self.ctx.plan
        owners = resident.owners(plan)
        return [(a, t) for a in owners + [a for a in plan.workers if a not in owners]
                for t in range(plan.threads.get(a, 1))]

    def holders(self, ks) -> dict:
        """{worker: ({file prefix: run id} of its problems among ``ks``, all blocks)}."""
        return {a: ({self.prefixes[k]: self.runs[k] for k in ks if self.where[k][0] == a},
                    self.infos)
                for a in self.ctx.plan.workers if any(self.where[k][0] == a for k in ks)}

    def from_checkpoint(self, g: list[int]) -> dict | None:
        """What ``ovr_batch`` loads first for the group ``g``: its problems to reload."""
        ks = [k for k in g if k in self.reload_from]
        if not ks:
            return None
        found = self.reload_from[ks[0]]
        return {"runs": {self.prefixes[k]: self.runs[k] for k in ks},
                "directory": found.directory, "files": found.files,
                "storage_options": self.ctx.checkpoint.storage_options}

    def step(self, r):
        ctx, W, h = self.ctx, self.W, self.histories
        groups = {slot: [k for k in range(self.problems) if self.where[k] == slot
                         and not self.done[k]] for slot in self.slots()}
        groups = {slot: g for slot, g in groups.items() if g}
        ctx.pending = [ctx.client.submit(
            distsvm.workers.dcd.ovr_batch, W[g], ctx.dataset.url, self.infos,
            [self.runs[k] for k in g], [self.positives[k] for k in g],
            [self.costs[k] for k in g], [len(h[k]) for k in g], [self.shrink[k] for k in g],
            inits=[distsvm.workers.dcd.first_gnorm1(h[k]) for k in g],
            from_checkpoint=self.from_checkpoint(g), cache_bytes=ctx.plan.cache_bytes[a],
            starts=[self.starting[k] and self.settings.validation is not None for k in g],
            workers=[a], pure=False, **{**self.common, **self.anytime_kw()})
            for (a, t), g in groups.items()]
        results, gone = cluster.gather_each(ctx.client, ctx.pending, [a for a, _ in groups])
        rows = []
        for g, out in zip(groups.values(), results):
            if out is None:  # its worker left
                continue
            Wg, outcomes = out
            last = max(row["at"] for o in outcomes for row in o["rows"])
            W[g] = Wg
            for k, o in zip(g, outcomes):
                self.reload_from.pop(k, None)
                for row in o["rows"]:  # its time: when the task had done it
                    row["ago"] = last - row.pop("at")
                    rows.append((k, row))
                self.shrink[k], self.done[k], self.converged[k] = \
                    o["shrink"], o["done"], o["converged"]
                self.started[k] = o.get("start")
        if gone:
            raise cluster.WorkerLost(gone, rows)
        return rows

    def anytime_kw(self) -> dict:
        """The batch's deadline, and one round a batch where each round is scored (the
        driver scores the w a step ends with)."""
        return {"deadline": self.settings.deadline,
                "seconds": self.batch_seconds(BATCH_SECONDS)}

    def start(self, k):
        return self.started[k]

    def drop_start(self, k):
        self.starting[k], self.started[k] = False, None

    def progress_of(self, k):
        return self.tagged[k]

    def limit(self, k, history):
        return _limit(history, self.eps)

    def w(self, k):
        return self.W[k]

    def live(self) -> list[int]:
        return [k for k in range(self.problems) if not self.done[k]]

    def save_workers(self, directory):
        return resident.write(self.ctx, distsvm.workers.dcd.save_blocks, self.holders(self.live()),
                              directory)

    def state(self):
        return {"w": self.W}, {"shrink": self.shrink, "done": self.done,
                               "converged": self.converged}

    def resume(self, found):
        resident.load(self.ctx, distsvm.workers.dcd.load_blocks, self.holders(range(self.problems)),
                      found)
        self.W, self.shrink = found.arrays["w"], found.state["shrink"]
        self.done, self.converged = found.state["done"], found.state["converged"]
        for k in range(self.problems):  # its start is not checkpointed: w goes on alone
            self.drop_start(k)

    def reload(self, found, lost, histories):
        """The lost workers' running problems restart on the other slots (round-robin, fresh
        run ids) from ``found`` (a problem running now was running at every checkpoint of
        this run), else from α = 0; the other workers' problems go on."""
        ks = [k for k in self.live() if self.where[k][0] in lost.gone]
        left = self.slots()
        for i, k in enumerate(ks):
            self.drop_start(k)  # it was on the lost worker
            self.runs[k] = uuid.uuid4().hex
            self.ctx.runs.append(self.runs[k])
            self.where[k] = left[i % len(left)]
            if found is None:
                self.W[k], histories[k][:], self.shrink[k] = 0.0, [], None
            else:
                self.reload_from[k] = found
                self.W[k] = found.arrays["w"][k]
                histories[k][:] = found.state["histories"][k]
                self.shrink[k] = found.state["shrink"][k]
        classes = self.ctx.dataset.meta.classes
        since = "alpha = 0" if found is None else f"the checkpoint of round {found.round}"
        if not classes:  # a regression store (SVR): one problem, no classes
            return f"the problem restarts from {since} there"
        return (f"the problems of class {', '.join(f'{classes[self.positives[k]]:g}' for k in ks)}"
                f" restart from {since} there")


def _limit(history: list[dict], eps: float) -> str:
    """The round-limit warning's reason: (17)'s projected-gradient spread, or SVR's summed
    violation relative to its first round's (its ``pg_violation``) had not fallen to eps."""
    what = "the summed violation (relative to round 1)" if "gnorm1" in history[-1] else \
        "the projected-gradient violation"
    return f"{what} {history[-1]['pg_violation']:.3g} fell to eps={eps:g}"
