"""The round driver: the one loop every solver runs in.

A solver (a :class:`Solver`) supplies its state, one step — one or more rounds on the
workers, whose log rows it returns — its stopping test and the recovery policy of its state.
:func:`drive` owns the rest, once: the run ids of the state on the workers and dropping it
at the end, resuming from the latest checkpoint, the loop, the history and progress lines,
the round limit and its warning, when to checkpoint, and the recovery when a worker leaves
the cluster (:class:`~distsvm.cluster.WorkerLost`, caught here only), under the policy the
solver declares:

* ``RERUN`` — all the state is the coordinator's: the step runs again on the survivors
  (cutting plane).
* ``REBUILD`` — the workers' state is a function of the coordinator's w: under a new run id
  the step first rebuilds it from w (Newton, primal CD).
* ``ROLLBACK`` — α lives on the workers (dual CD, Crammer–Singer): the survivors roll their
  blocks back to the start of the round, the lost blocks restart at α = 0, w is summed from
  them (:func:`_roll_back`) and the round runs again.
* ``RELOAD`` — the state can be rebuilt from neither w nor the blocks (SVM-ALM's
  multipliers, one-vs-rest problems each held by one worker): what was lost restarts from
  the run's latest checkpoint, or from the start without one.

Several problems may share one drive (one-vs-rest batches): each has its own history and
stops on its own; the run checkpoints when the furthest passes a multiple of the interval.

Anytime training (issue 31) is the driver's too, the same on every solver and path: with a
validation set (:class:`distsvm.anytime.Settings`, :data:`distsvm.anytime.CURRENT`), each
problem's model is scored after each step (a solver whose tasks run several rounds runs one
a task then, :meth:`Solver.batch_seconds`) and the score goes in the round's row and line;
with ``n_iter_no_change`` a problem stops after that many rounds without an improvement of
more than ``tol`` (scikit-learn's rule) and returns its best round's w (a validation set
without early stopping only watches: the last w).  At the deadline (``--time-budget``) the
run stops after the step in flight — dual CD's tasks themselves stop between block visits —,
checkpoints where it checkpoints (``resume`` goes on from there) and returns the best model
so far (by validation score, else the last).  Each result says why it stopped
(``stopped_by``: ``eps``, ``gap``, ``no improvement``, ``time budget``, ``round limit``, or
``solver`` for a stop of the solver's own that is not its rule, a failed line search).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
import warnings

import numpy as np

import distsvm.workers.blocks
from distsvm.storage import Dataset
from distsvm.workers.dcd import certified

from .. import anytime, cluster
from ..checkpoint import Checkpoint, Checkpointer
from ..cluster import WorkerPlan
from ..errors import ConvergenceWarning
from ..progress import Progress, dual_line

RERUN, REBUILD, ROLLBACK, RELOAD = "rerun", "rebuild", "rollback", "reload"


@dataclasses.dataclass
class Result:
    """What every solver returns, per problem: the weights and how it got there.
    ``extra`` holds what only some solvers measure (SVM-ALM's gradient norm and passes);
    ``options`` the solver's own settings, recorded in the model's parameters."""

    w: np.ndarray
    rounds: int
    converged: bool
    primal_objective: float
    dual_objective: float
    duality_gap: float
    train_seconds: float
    history: list[dict]
    extra: dict = dataclasses.field(default_factory=dict)
    options: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Context:
    """Where a solver runs: the cluster, the data, the current plan (the driver replaces it
    after a loss), the run id of its state on the workers and the progress sink."""

    client: object
    dataset: Dataset
    plan: WorkerPlan
    progress: Progress
    checkpoint: Checkpointer | None = None
    run: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)
    runs: list = dataclasses.field(default_factory=list)  # every id used, dropped at the end
    pending: list = dataclasses.field(default_factory=list)  # futures in flight

    def renew(self) -> None:
        """A new run id (the old state is dropped at the end with the rest)."""
        self.runs.append(self.run)
        self.run = uuid.uuid4().hex


class Solver:
    """What a solver supplies to :func:`drive`; the defaults are those of one problem.

    ``done[k]``/``converged[k]`` say whether problem k has stopped and whether on its rule.
    Its tasks in flight go in ``ctx.pending``, cancelled and waited for after a loss.
    """

    name = ""  # the key of its checkpoints
    title = ""  # its name in warnings, if not ``name``
    policy = RERUN
    problems = 1
    gap_tol = 0.0  # > 0: it also stops once the duality gap certifies P(w) to this (relative)
    settings = anytime.Settings()  # the run's anytime settings (drive sets them)

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.done = [False] * self.problems
        self.converged = [False] * self.problems

    def step(self, r: int) -> list[tuple[int, dict]]:
        """Run round r (or several from r) and return the (problem, log row) of each."""
        raise NotImplementedError

    def w(self, k: int) -> np.ndarray:
        raise NotImplementedError

    def state(self) -> tuple[dict, dict]:
        """What a checkpoint holds of the coordinator: (arrays, JSON state)."""
        raise NotImplementedError

    def resume(self, found: Checkpoint) -> None:
        """Take the state of checkpoint ``found`` (and load the workers' part of it)."""
        raise NotImplementedError

    def save_workers(self, directory: str) -> dict:
        """Have the workers write their part of a checkpoint; {file: SHA-256}."""
        return {}

    def line(self, row: dict) -> str | None:
        """A round's progress line (None: :meth:`Progress.round`'s own)."""
        return None

    def limit(self, k: int, history: list[dict]) -> str:
        """The round-limit warning's reason (what had not yet fallen to eps)."""
        raise NotImplementedError

    def rebuild(self) -> None:
        """``REBUILD``: the next step first rebuilds the workers' state from w."""

    restore = None  # ROLLBACK: the per-block task that rolls a block back (workers module)
    restore_kw: dict = {}

    def rolled_back(self, w: np.ndarray) -> None:
        """``ROLLBACK``: w summed from the rolled-back blocks."""

    def reload(self, found: Checkpoint | None, lost: cluster.WorkerLost,
               histories: list[list[dict]]) -> str:
        """``RELOAD``: restart what was lost from ``found`` (or from the start); returns how,
        for the log; may cut ``histories`` back."""
        raise NotImplementedError

    options: dict = {}  # the solver's own settings, recorded in the model's parameters

    def extra(self, k: int) -> dict:
        """What problem k's result reports beyond the objectives (:attr:`Result.extra`)."""
        return {}

    kept_keys: tuple = ()  # what of a kept round's row goes in the result's extra (one-class: ρ)

    def conclude(self, ks: list[int]) -> None:
        """The driver stopped problems ``ks`` (a time budget, no improvement): a solver whose
        model needs a last pass at its w makes it here (the one-class SVM's ρ)."""

    def progress_of(self, k: int) -> Progress:
        return self.ctx.progress

    def start(self, k: int) -> np.ndarray | None:
        """Problem k's second model this round, scored beside w on the validation set and
        kept if better (dual CD's SGD start, :mod:`distsvm.workers.kernels.adaptive`); None:
        none."""
        return None

    def drop_start(self, k: int) -> None:
        """Problem k stops computing its second model (w scores at least as well, or it no
        longer improves)."""

    def batch_seconds(self, seconds: float) -> float:
        """How long a task that runs several rounds (a batch) may run: ``seconds``, or one
        round where each round is scored on a validation set."""
        return 0.0 if self.settings.validation is not None else seconds


def _finish(solver: Solver, problems) -> None:
    """Tell the logs of ``problems`` that they have stopped (a multi-class job's one line a
    round, :class:`distsvm.progress.ClassRounds`, then waits for them no more)."""
    for k in problems:
        finish = getattr(solver.progress_of(k), "finish", None)
        if finish is not None:
            finish()


class _Best:
    """A problem's best round by validation score (``model``: "solver", its w, or "sgd", its
    start's), its rounds without an improvement, and its start's last score."""

    def __init__(self):
        self.score, self.round, self.w, self.row, self.count = np.nan, 0, None, {}, 0
        self.model, self.start = "solver", np.nan

    def state(self) -> dict:
        return {"score": self.score, "round": self.round, "row": self.row, "count": self.count,
                "model": self.model}

    def load(self, state: dict, w) -> None:
        self.score, self.round, self.row, self.count = (state["score"], state["round"],
                                                        state["row"], state["count"])
        self.model, self.w = state.get("model", "solver"), w


def _scored(solver: Solver, rows, bests: list[_Best], stopped: list) -> None:
    """Score the model of each problem that has a row in ``rows`` on the validation set (its
    last row: the w it holds now), in the row; keep the best; stop early (scikit-learn's
    rule: a score that does not beat the best by more than tol counts a round without
    improvement)."""
    settings = solver.settings
    v = settings.validation
    last = {k: row for k, row in rows}
    ks = list(last)
    ws = [np.array(solver.w(k), dtype=np.float64) for k in ks]
    starts = {k: np.array(w, dtype=np.float64) for k in ks
              if (w := solver.start(k)) is not None}
    scores = v.scores(ws + list(starts.values()),
                      [settings.problems[k] for k in ks + list(starts)])
    started = dict(zip(starts, scores[len(ks):]))
    for k, w, score in zip(ks, ws, scores):
        row, best = last[k], bests[k]
        row[v.name] = score
        model = "solver"
        if k in started:  # the better of w and the start's is the round's model
            row[f"sgd_{v.name}"] = s = started[k]
            wins = anytime.better(v.metric, s, score)
            if not wins or not anytime.better(v.metric, s, best.start, settings.tol):
                solver.drop_start(k)
            best.start = s
            if wins:
                score, w, model = s, starts[k], "sgd"
        if anytime.better(v.metric, score, best.score, settings.tol):
            best.count = 0
        else:
            best.count += 1
        if best.w is None or anytime.better(v.metric, score, best.score):
            best.score, best.round, best.w, best.row, best.model = (score, row["round"], w,
                                                                    row, model)
        if settings.n_iter_no_change and best.count >= settings.n_iter_no_change \
                and not solver.done[k]:
            solver.done[k], stopped[k] = True, "no improvement"


def _stopped_by(solver: Solver, k: int, history: list[dict], stopped: list,
                max_rounds: int) -> str:
    """Why problem k stopped (:mod:`distsvm.solvers.driver`'s docstring)."""
    if stopped[k]:
        return stopped[k]
    last = history[-1] if history else {}
    if solver.converged[k]:
        return "gap" if "gap" in last and certified(last, solver.gap_tol) else "eps"
    return "round limit" if _furthest([history]) >= max_rounds else "solver"


def drive(solver: Solver, *, max_rounds: int) -> list[Result]:
    """Run ``solver`` to its stop or ``max_rounds``; the result of each of its problems."""
    ctx = solver.ctx
    histories: list[list[dict]] = [[] for _ in range(solver.problems)]
    solver.histories = histories  # the solver reads them (a window of rounds); changed in place
    settings = solver.settings = anytime.current()
    v = settings.validation
    bests = [_Best() for _ in range(solver.problems)]
    stopped: list[str | None] = [None] * solver.problems
    start = time.perf_counter()
    r = saved = 0  # the furthest round done; the round of the last checkpoint
    every = ctx.checkpoint.every if ctx.checkpoint is not None else None
    try:
        found = ctx.checkpoint.latest(solver.name) if ctx.checkpoint is not None else None
        if found is not None:
            histories[:] = found.state["histories"]
            for k, state in enumerate(found.state.get("anytime") or []):
                bests[k].load(state, found.arrays.get(f"anytime_w{k}"))
            _attempt(solver, histories, lambda r: solver.resume(found), None)
            start -= found.state["seconds"]
            r = saved = found.round
            ctx.progress.note(f"resuming from the checkpoint of round {found.round} "
                              f"({found.directory})")
        def log(rows, scored=False):
            now = time.perf_counter() - start
            for _, row in rows:  # "ago": how long before the step's end the round ended
                row["seconds"] = now - row.pop("ago", 0.0)
            if scored and v is not None and rows:
                _scored(solver, rows, bests, stopped)
            for k, row in rows:
                histories[k].append(row)
                text = solver.line(row)
                if v is not None and v.name in row:
                    text = f"{text or dual_line(row)}  {v.name} {row[v.name]:.6g}"
                    if f"sgd_{v.name}" in row:
                        text += f" (sgd start {row[f'sgd_{v.name}']:.6g})"
                solver.progress_of(k).round(row, text)

        def short():
            """Whether a problem has neither stopped nor reached the limit: batched
            problems go at their groups' paces, so the furthest one's round says nothing."""
            return any(not done and _furthest([h]) < max_rounds
                       for done, h in zip(solver.done, histories))

        while short():
            log(_attempt(solver, histories, solver.step, log), scored=True)
            _finish(solver, [k for k, done in enumerate(solver.done) if done])
            r = _furthest(histories)
            if settings.expired() and short():
                for k, done in enumerate(solver.done):
                    stopped[k] = stopped[k] or (None if done else "time budget")
                ctx.progress.note(f"round {r}: the time budget is spent; keeping the "
                                  + ("best model so far" if v is not None else "last model"))
                if every and r > saved:  # `resume` goes on from here
                    saved = r if _save(solver, r, histories, start, bests) else saved
                break
            if every and short() and r // every > saved // every:
                saved = r if _save(solver, r, histories, start, bests) else saved
        ended = [k for k in range(solver.problems) if stopped[k]]
        if ended:
            _attempt(solver, histories, lambda r: solver.conclude(ended), None)
        for k, h in enumerate(histories):  # not a stop of its own (a failed line search)
            if stopped[k]:
                continue
            if not solver.converged[k] and (not solver.done[k] or _furthest([h]) >= max_rounds):
                warnings.warn(f"{solver.title or solver.name} reached the round limit ({max_rounds}) before "
                              f"{solver.limit(k, histories[k])}; increase max_rounds or eps",
                              ConvergenceWarning, stacklevel=3)
        _finish(solver, range(solver.problems))
    finally:  # a worker that left meanwhile (the scheduler may not know yet) held nothing
        ctx.client.run(distsvm.workers.blocks.drop_run, *ctx.runs, ctx.run, on_error="ignore")
    seconds = time.perf_counter() - start
    results = []
    for k, history in enumerate(histories):
        last = history[-1] if history else {}
        best, w = bests[k], solver.w(k)
        extra = {**solver.extra(k),
                 "stopped_by": _stopped_by(solver, k, history, stopped, max_rounds)}
        kept, score = last, last.get(v.name, best.score) if v is not None else None
        # early stopping or a spent budget keep the best round's model (its objectives where
        # measured); a validation set alone only watches
        if best.w is not None and (settings.n_iter_no_change or stopped[k] == "time budget") \
                and (best.round != last.get("round") or best.model != "solver"):
            kept, w, score = best.row, best.w, best.score
            if best.model != "solver":  # the SGD start's: the row's objectives are w's
                kept = {key: val for key, val in kept.items()
                        if key not in ("primal", "dual", "gap")}
                extra["kept_model"] = "sgd start"
            if "nnz" in extra:  # an L1-regularized model's sparsity
                extra["nnz"] = int(np.count_nonzero(w))
        extra.update({key: kept[key] for key in solver.kept_keys if key in kept})
        if best.w is not None:
            extra.update({"validation_metric": v.metric, v.name: score,
                          "best_round": best.round})
            if "gap" in kept:
                extra["kept_duality_gap"] = kept["gap"]
        results.append(Result(
            w=w, rounds=last.get("round", 0), converged=solver.converged[k],
            primal_objective=kept.get("primal", np.nan), dual_objective=kept.get("dual", np.nan),
            duality_gap=kept.get("gap", np.nan), train_seconds=seconds, history=history,
            extra=extra, options=solver.options))
    return results


def once(ctx: Context, fn):
    """``fn()``, a stateless pass outside a solver's rounds (reading ``ctx.plan``), run
    again on the survivors after each worker loss (the RERUN policy)."""
    return _attempt(Solver(ctx), [], lambda r: fn(), None)


def _furthest(histories: list[list[dict]]) -> int:
    """The furthest round the problems have done."""
    return max((h[-1]["round"] for h in histories if h), default=0)


def _attempt(solver: Solver, histories: list[list[dict]], step, log):
    """``step(r)`` for the next round r, recovered by the solver's policy and run again
    (from the round the recovery left) after each worker loss; ``log`` takes the rounds a
    step did complete on the other workers before the loss."""
    while True:
        r = _furthest(histories) + 1
        try:
            return step(r)
        except cluster.WorkerLost as lost:
            if log is not None:
                log(lost.rows)
            loss = lost
        while loss is not None:  # a worker lost during the recovery: recover again
            try:
                _recover(solver, r, loss, histories)
                loss = None
            except cluster.WorkerLost as again:
                loss = again


def _recover(solver: Solver, r: int, lost: cluster.WorkerLost, histories) -> None:
    """Recover from the loss of workers ``lost.gone`` during round r by the solver's policy."""
    ctx = solver.ctx
    again = f"; round {r} runs again"
    if solver.policy == ROLLBACK:
        ctx.plan, w, moved = _roll_back(solver, r, lost.gone)
        solver.rolled_back(w)
        how = "with alpha = 0, the other blocks roll back to the start of the round" + again
    else:
        cluster.settle(ctx.client, ctx.pending, ctx.plan.workers)
        moved = sum(a in set(lost.gone) for a in ctx.plan.owners)
        ctx.plan = cluster.replan(ctx.plan, lost.gone)  # ClusterError when none is left
        if solver.policy == RERUN:
            how = "which read them from the store" + again
        else:
            ctx.renew()
            if solver.policy == REBUILD:
                solver.rebuild()
                how = "which rebuild the solver's state from the coordinator's w" + again
            else:
                found = ctx.checkpoint.latest(solver.name) if ctx.checkpoint is not None \
                    else None
                how = solver.reload(found, lost, histories)
    ctx.progress.note(f"round {r}: worker {', '.join(lost.gone)} left the cluster; its "
                      f"{moved} blocks go to the other {len(ctx.plan.workers)} worker(s), {how}")


def _roll_back(solver: Solver, r: int, gone: list[str]) -> tuple[WorkerPlan, np.ndarray, int]:
    """After workers ``gone`` left during round r: the plan without them, the w to run the
    round again from, and the number of blocks that changed owner.  Each survivor runs
    ``solver.restore(url, infos, run, r, …)`` on the blocks it held, rolling their α back to
    the start of round r and returning its part of w; the lost blocks restart at α = 0.  A
    loss during the recovery starts it again; ClusterError when no worker is left."""
    ctx = solver.ctx
    meta = ctx.dataset.meta
    plan, futures, moved = ctx.plan, ctx.pending, 0
    while True:
        cluster.settle(ctx.client, futures, plan.workers)
        held = {a: [meta.blocks[b] for b in plan.blocks_of(a)] for a in plan.workers}
        moved += sum(a in set(gone) for a in plan.owners)
        plan = cluster.replan(plan, gone)
        futures = [ctx.client.submit(solver.restore, ctx.dataset.url, held[a], ctx.run, r,
                                     cache_bytes=plan.cache_bytes[a],
                                     storage_options=ctx.dataset.storage_options, workers=[a],
                                     pure=False, **solver.restore_kw)
                   for a in plan.workers]
        try:
            return plan, np.sum(cluster.gather(ctx.client, futures, plan.workers), axis=0), moved
        except cluster.WorkerLost as again:
            gone = again.gone


def _save(solver: Solver, r: int, histories, start: float, bests: list[_Best]) -> bool:
    """Checkpoint round r: the workers' files, then the coordinator's arrays, its state, the
    histories and the seconds so far.  A worker lost meanwhile skips this checkpoint (the
    next step notices the loss)."""
    ckpt = solver.ctx.checkpoint
    try:
        files = solver.save_workers(ckpt.directory(r))
    except cluster.WorkerLost as lost:
        solver.ctx.progress.note(f"round {r}: worker {', '.join(lost.gone)} left while "
                                 "checkpointing; no checkpoint this round")
        return False
    arrays, state = solver.state()
    arrays = {**arrays, **{f"anytime_w{k}": b.w for k, b in enumerate(bests) if b.w is not None}}
    ckpt.save(r, solver.name, arrays, {**state, "histories": histories,
                                       "anytime": [b.state() for b in bests],
                                       "seconds": time.perf_counter() - start}, files)
    return True


# Passes.total: replies of more workers than this are added up a tree on the workers (fewer
# come to the coordinator side by side: a tree's extra hop would cost more than it saves)
TREE_MIN = 4


class Passes:
    """Map-reduce passes over the blocks: one call per worker that owns blocks, over its
    blocks, replies in worker order; ``count`` counts them.  A pass's calls go straight to
    each worker's :class:`~distsvm.cluster.Runner` (:class:`distsvm.cluster.Call`),
    not as tasks through the scheduler: one round trip a pass."""

    def __init__(self, ctx: Context, bias_value: float):
        self.ctx = ctx
        self.common = dict(bias=bias_value, n_features=ctx.dataset.meta.n_features,
                           storage_options=ctx.dataset.storage_options)
        self.count = 0
        self.runners = cluster.Runners(ctx.client)

    def owned(self) -> list[tuple[str, list]]:
        """(worker, its blocks' infos) of each worker of the current plan that owns blocks."""
        return self.ctx.plan.shares(self.ctx.dataset.meta.blocks)

    def each(self, fn, *args, per_worker=None, threaded=False, **kw) -> list:
        """``fn(url, infos, *args, [per_worker[j]], **kw)`` on each worker j; counts one pass.
        ``threaded``: ``fn`` also takes ``threads``, the worker's (:class:`WorkerPlan`), and
        shares its blocks among them (:func:`distsvm.workers.blocks.each_block`)."""
        calls = self._calls(fn, args, per_worker, threaded, kw)
        return cluster.gather(self.ctx.client, calls, [c.worker for c in calls])

    def total(self, fn, *args, threaded=False, **kw) -> list:
        """:meth:`each` for replies that are summed (numbers, arrays, dicts of them): over
        more than ``TREE_MIN`` owners, tasks added up a binary tree on the owners (each
        adds two replies on the first one's worker, which fetches the other from its peer),
        so that the coordinator receives one reply, not one per worker; returns the replies
        to sum (one, or the owners' where they are few)."""
        ctx, owned = self.ctx, self.owned()
        if len(owned) <= TREE_MIN:
            return self.each(fn, *args, threaded=threaded, **kw)
        self.count += 1
        owners = where = [a for a, _ in owned]  # where: each tree level's workers
        args, _ = cluster.scattered(ctx.client, args, {}, owners)
        level = ctx.pending = [
            ctx.client.submit(fn, ctx.dataset.url, infos, *args, workers=[a], pure=False,
                              **self._kw(a, threaded, kw))
            for a, infos in owned]
        while len(level) > 1:
            pairs = range(0, len(level) - 1, 2)
            level, where = ([self.ctx.client.submit(distsvm.workers.blocks.add_replies, level[i],
                                                    level[i + 1], workers=[where[i]],
                                                    pure=False) for i in pairs]
                            + level[len(level) - len(level) % 2:],
                            [where[i] for i in pairs] + where[len(where) - len(where) % 2:])
            self.ctx.pending += level
        return cluster.gather(self.ctx.client, level, owners)

    def together(self, fn, *args, threaded=False, **kw) -> list:
        """``fn(url, infos, *args, reduce=…, **kw)`` on each worker that owns blocks, all at
        once, adding up their parts among themselves (:meth:`distsvm.cluster.Runner.together`):
        a computation of several passes whose sums need not come to the coordinator; its
        replies in worker order.  Counts no pass (``fn`` says how many it made).  If one
        call fails or its worker leaves, the others are ended before the error is raised
        (on a Ctrl-C they run to their end: no Runner of the job is left to tell)."""
        ctx, owned = self.ctx, self.owned()
        workers = [a for a, _ in owned]
        self.runners.keep(ctx.plan.workers)
        ctx.pending = calls = self.runners.together(
            workers, fn, [(ctx.dataset.url, infos, *args) for _, infos in owned],
            [self._kw(a, threaded, kw) for a in workers])
        try:
            return cluster.gather(ctx.client, calls, workers)
        except Exception:  # not on a Ctrl-C: the members finish the iteration by themselves
            self.runners.abort(calls)
            raise

    def _kw(self, a: str, threaded: bool, kw: dict) -> dict:
        """The keywords of worker ``a``'s part of a pass."""
        return dict(cache_bytes=self.ctx.plan.cache_bytes[a], **self.common, **kw,
                    **({"threads": self.ctx.plan.threads.get(a, 1)} if threaded else {}))

    def _calls(self, fn, args, per_worker, threaded, kw) -> list:
        """One pass (:meth:`each`): its calls, in worker order."""
        self.count += 1
        ctx, owned = self.ctx, self.owned()
        self.runners.keep(ctx.plan.workers)
        self.runners.make([a for a, _ in owned])
        ctx.pending = [self.runners.call(a, fn, ctx.dataset.url, infos, *args,
                                         *((per_worker[j],) if per_worker is not None else ()),
                                         **self._kw(a, threaded, kw))
                       for j, (a, infos) in enumerate(owned)]
        return ctx.pending
