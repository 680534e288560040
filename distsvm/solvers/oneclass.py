"""One-class SVM (LIBLINEAR ``-s 21``) over row blocks.

Problem: Schölkopf, Platt, Shawe-Taylor, Smola & Williamson (2001)'s ν one-class SVM,
linear, scaled as LIBLINEAR ≥ 2.40 (``solve_oneclass_svm`` in linear.cpp; README ``-s 21``,
``-n nu``): the dual ``min ½αᵀQα s.t. 0 ≤ αᵢ ≤ 1, eᵀα = νl`` (Qᵢⱼ = xᵢᵀxⱼ; the labels are
not used), whose primal is ``min_{w,ρ} ½‖w‖² − νlρ + Σᵢ max(0, ρ − wᵀxᵢ)``; the model is
w = Σαᵢxᵢ and ρ, a row is +1 (an inlier) if wᵀx − ρ > 0, else −1.  No bias feature (LIBLINEAR
refuses ``-B`` with ``-s 21``).

Algorithm: LIBLINEAR's — Algorithm 7 of the supplement of Chou, Lin, Lin & Lin (SDM 2020):
from α = 1 on the first ⌊νl⌋ rows, each iteration computes G = Xw on the active rows, stops
when the maximal violation m − M < eps with every row active (else reactivates them all),
shrinks, and updates the k = max(active/10, 1) most violating pairs, each a two-variable
step that keeps eᵀα (kernel :mod:`distsvm.workers.kernels.oneclass`).  The working set is global,
so a step is one iteration on every worker (:func:`distsvm.workers.oneclass.iterate`): G and (m, M)
on each block, the global (m, M), each block's shrinking and best candidates with their
rows, and the pair updates on the coordinator, whose α changes go back with the next
iteration's w.  Block-by-block pair updates alone would keep each block's Σα and stall
short of the optimum, so they are not used.  Where one worker owns every block (the joined
store, by default: one block), the iterations run on it in batches
(:func:`distsvm.workers.oneclass.batch`).  One round = one iteration; the last round is the one
whose test stops (LIBLINEAR's ``#iter`` + 1).  Each round logs the dual −½‖w‖² and the
violation; the last one also the primal at LIBLINEAR's ρ and the gap.

Worker faults: ROLLBACK (:mod:`distsvm.solvers.driver`): the survivors roll their blocks back
to the round's start; α = 0 on the lost blocks would break eᵀα = νl, so they restart with
the rest of νl filled from their first rows (:meth:`_OneClass.rolled_back`).  Checkpoints
hold each block's α and shrinking state, w and the α changes not yet applied.
docs/solvers/oneclass.md has the details.
"""

from __future__ import annotations

import numpy as np

import distsvm.workers.resident
from distsvm.storage import Dataset
from distsvm.workers import oneclass as tasks

from .. import cluster
from ..checkpoint import Checkpointer
from ..cluster import WorkerPlan
from ..progress import Progress
from . import dcd, driver, resident
from .driver import Result


def solve(client, dataset: Dataset, plan: WorkerPlan, p, *, positive: int = 1, cost=None,
          progress: Progress | None = None, checkpoint: Checkpointer | None = None) -> Result:
    """Train (w, ρ) on the cluster behind ``client``; see the module docstring.  ``p`` are
    the checked parameters (``nu``, ``eps``, ``max_rounds``); the problem has no classes and
    no C, so ``positive`` and ``cost`` are not read.  The result's ``extra`` holds ρ and
    Σα, min α, max α and the support vectors of the final α."""
    ctx = driver.Context(client, dataset, plan, progress or Progress(quiet=True), checkpoint)
    return driver.drive(_OneClass(ctx, nu=float(p.nu), eps=float(p.eps),
                                  max_rounds=p.max_rounds),
                        max_rounds=p.max_rounds)[0]


class _OneClass(driver.Solver):
    """One step: one iteration on every worker (:func:`distsvm.workers.oneclass.iterate`), or a
    batch of them on the one owner of every block.  Policy ROLLBACK: α resident on the
    blocks' owners; the lost blocks refilled to eᵀα = νl (:meth:`rolled_back`)."""

    name = "oneclass"
    title = "one-class SVM"
    policy = driver.ROLLBACK
    restore = staticmethod(tasks.restore)
    kept_keys = ("rho",)  # a kept round's model is its (w, ρ)

    def __init__(self, ctx, *, nu, eps, max_rounds):
        super().__init__(ctx)
        meta = ctx.dataset.meta
        self.nu_l = nu * meta.n_rows
        self.eps, self.max_rounds = eps, max_rounds
        self.w_ = np.zeros(meta.n_features)
        self.updates = None  # (global row ids, their α) not yet applied on the workers
        self.started = False
        sizes = [b.n_rows for b in meta.blocks]
        self.offsets = {b.name: int(o) for b, o in zip(meta.blocks, np.cumsum([0] + sizes))}
        self.restore_kw = dict(n_features=meta.n_features)
        self.passes = driver.Passes(ctx, -1.0)
        self.final: dict = {}
        self.out: dict = {}  # the last batch's reply

    def call(self, task, *args, **kw):
        return self.passes.each(task, self.ctx.run, *args, offsets=self.offsets, **kw)

    def step(self, r):
        ctx, meta = self.ctx, self.ctx.dataset.meta
        fill = None if self.started else {b.name: m for b, m in zip(
            meta.blocks, tasks.masses([b.n_rows for b in meta.blocks], self.nu_l))}
        owners = resident.owners(ctx.plan)
        if len(owners) == 1:
            rows = self.batch(r, owners, fill)
            self.started = True
            if "final" in self.out:
                rows[-1].update(self.finish(self.out["final"]))
                return [(0, row) for row in rows]
        else:
            if fill is not None:
                self.w_ = np.sum(self.call(tasks.setup, fill), axis=0)
                self.started = True
            self.w_, self.updates, row, converged = tasks.iterate(
                self.call, self.w_, self.updates, r=r, tag=r, n_rows=meta.n_rows, eps=self.eps)
            self.done[0] = self.converged[0] = converged
            rows = [row]
        if self.done[0] or rows[-1]["round"] >= self.max_rounds \
                or self.settings.validation is not None:  # each scored round's ρ
            rows[-1].update(self.finish())
        return [(0, row) for row in rows]

    def conclude(self, ks):
        """Stopped by the driver (a time budget, no improvement): ρ at the last w."""
        last = self.histories[0][-1]
        if "rho" not in last:
            last.update(self.finish())

    def batch(self, r, owners, fill):
        """Iterations from r on the one owner (:func:`distsvm.workers.oneclass.batch`), the blocks'
        start (``fill``) and the run's end (:meth:`finish`) in the same task."""
        ctx, meta = self.ctx, self.ctx.dataset.meta
        common = dict(offsets=self.offsets, cache_bytes=ctx.plan.cache_bytes[owners[0]],
                      storage_options=ctx.dataset.storage_options)
        ctx.pending = [ctx.client.submit(
            tasks.batch, self.w_, ctx.dataset.url, list(meta.blocks), ctx.run, self.updates,
            first=r, max_rounds=self.max_rounds,
            every=ctx.checkpoint.every if ctx.checkpoint is not None else None,
            seconds=self.batch_seconds(dcd.BATCH_SECONDS), eps=self.eps, n_rows=meta.n_rows,
            common=common, fill=fill, workers=owners, pure=False)]
        self.w_, self.updates, out = cluster.gather(ctx.client, ctx.pending, owners)[0]
        self.out = out
        self.done[0] = self.converged[0] = out["converged"]
        last = out["rows"][-1]["at"]
        for row in out["rows"]:
            row["ago"] = last - row.pop("at")
        return out["rows"]

    def finish(self, stats: dict | None = None) -> dict:
        """ρ (LIBLINEAR's), the primal ½‖w‖² − νlρ + Σ max(0, ρ − wᵀxᵢ) and the gap at the
        final w, with the pending α changes applied (``stats``: a batch's, with its loss)."""
        if stats is None:
            stats = tasks.combine(self.call(tasks.finish, self.w_, self.updates))
            parts = self.call(tasks.losses, stats["rho_primal"])
            stats.update(loss=sum(p[0] for p in parts), inside=sum(p[1] for p in parts))
        self.updates = None
        rho, loss, inside = stats["rho"], stats["loss"], stats["inside"]
        ww = float(self.w_ @ self.w_)  # once a run
        primal = 0.5 * ww - self.nu_l * stats["rho_primal"] + loss
        self.final = {"rho": rho, "alpha_sum": stats["alpha_sum"],
                      "alpha_min": stats["alpha_min"], "alpha_max": stats["alpha_max"],
                      "n_sv": stats["n_sv"]}
        if self.settings.problems:  # the validation scores w's ±1 predictions at this ρ
            self.settings.problems[0]["offset"] = rho
        return {"primal": primal, "gap": primal + 0.5 * ww, "rho": rho,
                "train_inliers": inside / max(1, self.ctx.dataset.meta.n_rows)}

    def limit(self, k, history):
        return (f"the maximal violation {history[-1]['pg_violation']:.3g} fell to "
                f"eps={self.eps:g}")

    def w(self, k):
        return self.w_.copy()

    def extra(self, k):
        return dict(self.final)

    def save_workers(self, directory):
        return resident.write(self.ctx, tasks.save_blocks,
                              resident.held(self.ctx, {"": self.ctx.run}), directory)

    def state(self):
        ids, alpha = self.updates if self.updates is not None else (np.zeros(0, np.int64),
                                                                    np.zeros(0))
        return {"w": self.w_, "update_ids": ids, "update_alpha": alpha}, {"started": True}

    def resume(self, found):
        resident.load(self.ctx, distsvm.workers.resident.load_blocks,
                      resident.held(self.ctx, {"": self.ctx.run}), found)
        self.w_ = found.arrays["w"]
        self.updates = (found.arrays["update_ids"], found.arrays["update_alpha"])
        self.started = True

    def rolled_back(self, v):
        """w and Σα of the rolled-back blocks; the blocks without α (lost with their worker)
        restart with the rest of νl on their first rows, so that eᵀα = νl holds again.  A
        loss during this refill recovers again: the blocks refilled on a survivor count in
        its Σα then, and only those still without α are refilled."""
        meta = self.ctx.dataset.meta
        self.w_, mass, self.updates = v[:-1], float(v[-1]), None
        if not self.started:  # the start was cut short: the next step makes it again
            return
        empty = {name for names in self.call(tasks.stateless) for name in names}
        lost = [b for b, info in enumerate(meta.blocks) if info.name in empty]
        need = max(0.0, self.nu_l - mass)  # ≤ the lost rows: they held it, at most 1 each
        fill = tasks.masses([meta.blocks[b].n_rows for b in lost], need)
        self.w_ = self.w_ + np.sum(self.call(tasks.setup, {
            meta.blocks[b].name: m for b, m in zip(lost, fill)}), axis=0)
