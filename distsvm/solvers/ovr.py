"""One-vs-rest multi-class training: K binary problems, class k (yᵢ = +1) against the rest.

LIBLINEAR's multi-class strategy for every solver except Crammer–Singer (Fan,
Chang, Hsieh, Wang & Lin 2008, JMLR 9, "LIBLINEAR: a library for large linear
classification", §2 and Appendix, "one-vs-the-rest"): for a store with K > 2
classes, problem k labels the rows of class k +1 and all others −1, with the
same C, loss and stopping rule as a binary run; the model is the K weight
vectors as rows of W (K × n [+1]) and predicts ``argmaxₖ wₖᵀx`` (ties to the
lowest class index, as LIBLINEAR's ``predict_values``).  K = 2 stays one binary
problem.

Distribution: the K problems run at the same time on the cluster, up to one per
worker (a thread of the coordinator drives each; they share the client).  Each
solver takes the class index ``positive`` and reads the same blocks, whose
labels are class indices, so nothing is relabelled or copied.  Problem k gets
the block plan rotated by k workers (block b owned by worker ``(b + k) mod W``),
so a sequential solver — whose ``w`` visits one block, hence one worker, at a
time — starts each problem on a different worker and the workers stay busy even
with fewer blocks than workers.  Reads are shared through each worker's block
cache (:func:`distsvm.workers.blocks.load`): a block that fits is read from the store
once per worker, whatever K.  Sequential DCD (the default ``dcd``) does better: one job
deals the K problems to the workers, each running its problems' rounds in batches with
one read of each block for all of them (:func:`distsvm.solvers.dcd.solve_ovr`).

Checkpoints and worker faults: each problem's solver checkpoints and resumes itself, in its
own directory ``RUN/problems/<k>/`` (:meth:`distsvm.checkpoint.Checkpointer.problem`), and
handles a lost worker as a binary run of that solver does (the recovery policy of its round
driver, :mod:`distsvm.solvers.driver`).  A resumed run starts every problem from its own
latest checkpoint (a problem that had finished runs again from its last one: the same
choices, so the same w).
"""

from __future__ import annotations

import concurrent.futures
import contextvars

from .. import cluster
from ..checkpoint import Checkpointer
from ..cluster import WorkerPlan
from ..progress import ClassRounds, Progress, dual_line


class Tagged(Progress):
    """A problem's log through its parent's (its format, its run log, whatever the parent
    does with a round): lines prefixed with the class label, rows tagged with it."""

    def __init__(self, parent: Progress, label: str, rounds: ClassRounds | None = None):
        self.parent, self.label, self.rounds = parent, label, rounds

    def __getattr__(self, name):
        return getattr(self.parent, name)

    def note(self, text: str, event: str = "note", **fields) -> None:
        self.parent.note(f"[class {self.label}] {text}", event, **fields)

    def round(self, row: dict, text: str | None = None, show: bool = True) -> None:
        """The row in the parent's logs; in text, one line for all classes (``rounds``)
        unless the parent is verbose."""
        together = self.rounds is not None and not self.parent.verbose
        self.parent.round({**row, "class": self.label},
                          f"[class {self.label}] {text or dual_line(row)}",
                          show=show and not together)
        if together and show and not self.parent.json:
            self.rounds.add(self.label, row)

    def finish(self) -> None:
        """The problem has stopped (its later rounds are not waited for)."""
        if self.rounds is not None:
            self.rounds.finish(self.label)


def tagged(progress: Progress, classes, together: bool = True) -> list[Tagged]:
    """The logs of a multi-class job's problems, one per class of ``classes``; ``together``
    (problems that run side by side): their text rounds one line for all
    (:class:`ClassRounds`)."""
    labels = [f"{c:g}" for c in classes]
    rounds = ClassRounds(progress, labels) if together else None
    return [Tagged(progress, label, rounds) for label in labels]


def rotated(plan: WorkerPlan, k: int) -> WorkerPlan:
    """The plan with every block moved k workers along (problem k's plan); each worker's
    cache is sized for every block, which the problems side by side read between them."""
    ws = plan.workers
    return cluster.assign(plan, [ws[(ws.index(a) + k) % len(ws)] for a in plan.owners],
                          every=True)


def _fit(fit, k, plan, log: Tagged, checkpoint):
    try:
        return fit(k, plan, log, checkpoint)
    finally:
        log.finish()


def solve(fit, classes, plan: WorkerPlan, progress: Progress,
          checkpoint: Checkpointer | None = None) -> list:
    """Run ``fit(k, plan_k, progress_k, checkpoint_k)`` — problem k, class ``classes[k]``
    against the rest — for every k, up to one problem per worker at a time; return the K
    results in class order.  With ``checkpoint``, problem k checkpoints and resumes itself in
    its own directory (``checkpoint_k``, :meth:`Checkpointer.problem`), else
    ``checkpoint_k`` is None.  An error in any problem is raised once the running ones end."""
    n = len(plan.workers)
    with concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="distsvm-ovr") as pool:
        futures = []
        for k, log in enumerate(tagged(progress, classes, together=False)):
            futures.append(pool.submit(contextvars.copy_context().run,  # anytime.CURRENT
                                       _fit, fit, k, rotated(plan, k), log,
                                       None if checkpoint is None
                                       else checkpoint.problem(k, log)))
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise
