"""The solver registry: what each solver trains, which options it takes, and how it runs.

The CLI (``--solver``, ``--loss``, ``-s`` and their help), :func:`distsvm.jobs.train`, the
estimators, job specs, the pipeline and model selection read this table, and only it: adding a
solver is adding an entry.  Each entry names the losses it trains, LIBLINEAR's ``-s`` codes it
stands for, its default ``eps`` (what that tolerance bounds differs per solver) and the training
options it takes beyond the common ones (:class:`distsvm.params.Params`; an option given to a
solver that does not take it is refused by :func:`distsvm.params.check_solver`).  The solver
itself is the module of the entry's name in :mod:`distsvm.solvers`, whose ``solve`` takes the
checked :class:`~distsvm.params.Params` (:meth:`Solver.module`).

Importing this module is cheap (the CLI's ``--help`` reads it): a solver module is imported
when it runs.  Losses are named here; their integer codes for the kernels live with the
kernels (:mod:`workers.losses`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping

# Every loss a solver trains, and what it is (the CLI's --loss help).
LOSSES = {"hinge": "L1-loss SVM", "squared_hinge": "L2-loss SVM",
          "logistic": "logistic regression", "lp": "max(0, 1 - m)^p",
          "crammer_singer": "Crammer-Singer multi-class SVM",
          "epsilon_insensitive": "L1-loss SVR", "squared_epsilon_insensitive": "L2-loss SVR",
          "oneclass": "one-class SVM"}
# The losses of support vector regression: they train on a regression store (real-valued
# targets), every other loss on a store of classes (distsvm.params.check_data).
REGRESSION_LOSSES = ("epsilon_insensitive", "squared_epsilon_insensitive")
AUTO = "auto"  # train's solver="auto": jobs.choose_solver picks one per store
# LIBLINEAR 2.40+'s -s 1, -s 7 and -s 12 (train_one in linear.cpp): a problem whose dual CD
# has not converged after this many iterations continues with the primal Newton solver of
# the same loss (-s 2, -s 0, -s 11) from the dual's w; train's ``primal_switch`` (the CLI's
# -s 1, -s 7, -s 12)
LIBLINEAR_DUAL_ROUNDS = 300


@dataclasses.dataclass(frozen=True)
class Solver:
    """A solver's entry.  ``options`` maps each option it takes to the losses it takes it
    with (None: every loss); "weights" stands for class and instance weights, "alm" for
    SVM-ALM's p, method, mu0, rho and rtol.  Its module (:meth:`module`) has
    ``solve(client, dataset, plan, p, *, positive, cost, progress, checkpoint)``, which runs
    one problem: rows of class index ``positive`` are +1, ``cost`` is C per class index
    (:func:`workers.losses.class_costs`).  ``joins``: every problem trains on the rows and
    plan of :func:`distsvm.solvers.resident.hold` (dual CD's joined blocks);
    ``batches_ovr``: the module's ``solve_ovr(client, dataset, plan, p, *, costs, progress,
    checkpoint)`` runs the K one-vs-rest problems of a sequential run in one job, problem k
    at ``costs[k]``; ``recorded(params, meta)`` the solver's own entries of the model's
    params."""

    name: str
    help: str
    losses: tuple[str, ...]
    eps: float
    eps_help: str
    max_rounds: int = 1000  # the default round limit, LIBLINEAR's max_iter
    types: Mapping[int, str] = dataclasses.field(default_factory=dict)
    options: Mapping[str, tuple[str, ...] | None] = dataclasses.field(default_factory=dict)
    reads: str = "rows"  # "columns": the store's column view, which a fold (a view) lacks
    multiclass: bool = False  # trains K classes as one problem (no one-vs-rest)
    intercept: bool = False  # bias >= 0 is an unregularized intercept, not a bias feature
    joins: bool = False
    batches_ovr: bool = False
    recorded: Callable = lambda params, meta: {}
    loss_eps: Mapping[str, float] = dataclasses.field(default_factory=dict)  # eps per loss
    labels: bool = True  # False: one problem whatever the store's labels (one-class SVM)
    bias_feature: bool = True  # False: bias >= 0 is refused (LIBLINEAR's -s 21)

    def default_eps(self, loss: str) -> float:
        """The default ``eps`` of this solver with ``loss`` (``loss_eps``, else ``eps``):
        LIBLINEAR's default differs per type (train.c: -s 11 0.0001)."""
        return self.loss_eps.get(loss, self.eps)

    def module(self):
        """The solver's module, :mod:`distsvm.solvers` ``.<name>`` (imported on first use)."""
        return importlib.import_module(f"{__package__}.{self.name}")

    @property
    def cli_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def default_loss(self) -> str:
        """The CLI's loss when none is given: the L2-loss SVM if it trains it."""
        return "squared_hinge" if "squared_hinge" in self.losses else self.losses[0]

    def takes(self, option: str, loss: str | None = None) -> bool:
        """Whether this solver takes ``option`` (with ``loss``, if given)."""
        if option not in self.options:
            return False
        losses = self.options[option]
        return losses is None or loss is None or loss in losses


def _cutting_plane_recorded(p, meta) -> dict:
    """The objective, and SVMperf's C of the C trained (:func:`~.cutting_plane.n_loss_terms`)."""
    from . import cutting_plane

    return {"objective": p.objective,
            "c_perf": cutting_plane.n_loss_terms(meta.class_counts, p.objective) * p.C / 100}


# In the CLI's order; "auto" (AUTO) follows them.  Default eps: LIBLINEAR's for dcd, pcd,
# crammer_singer (relative to the gradient at w = 0 for pcd) and its Newton solver (-s 0, -s 2);
# the paper's ε = 0.001 on the average training loss for the cutting plane (Joachims 2006
# §4.4); ‖∇obj‖ ≤ 0.01 for SVM-ALM, as Nie et al. 2014.
SOLVERS = {s.name: s for s in (
    Solver("dcd", "dual CD over row blocks", ("hinge", "squared_hinge", "logistic",
                                                "epsilon_insensitive",
                                                "squared_epsilon_insensitive"),
           0.1, "the projected-gradient violation (SVR: the summed violation relative to "
           "round 1's)",
           types={1: "squared_hinge", 3: "hinge", 7: "logistic",
                  12: "squared_epsilon_insensitive", 13: "epsilon_insensitive"},
           options={"weights": None, "seed": None, "inner_passes": None, "gap_tol": None,
                    "join_blocks": None, "parallel": ("hinge", "squared_hinge"),
                    "primal_switch": ("squared_hinge", "logistic", "squared_epsilon_insensitive"),
                    "epsilon": ("epsilon_insensitive", "squared_epsilon_insensitive")},
           joins=True, batches_ovr=True),
    Solver("pcd", "primal CD over column blocks", ("squared_hinge", "logistic"), 0.1,
           "max |D'(0)| relative to the gradient at w = 0",
           options={"weights": None, "seed": None, "pcd_mode": None}, reads="columns",
           recorded=lambda p, meta: {"pcd_mode": p.pcd_mode}),
    Solver("cutting_plane", "Joachims 2006", ("hinge",), 1e-3,
           "the precision of the average loss",
           options={"objective": None, "c_perf": None}, recorded=_cutting_plane_recorded),
    Solver("alm", "SVM-ALM primal solver", ("hinge", "squared_hinge", "lp"), 0.01,
           "the gradient norm (the paper's)", options={"alm": None}, intercept=True),
    Solver("newton", "LIBLINEAR's line-search Newton",
           ("logistic", "squared_hinge", "squared_epsilon_insensitive"), 0.01,
           "|grad f| relative to the gradient at w = 0, LIBLINEAR's (-s 11: 0.0001)",
           types={0: "logistic", 2: "squared_hinge", 11: "squared_epsilon_insensitive"},
           options={"weights": None, "regularize_bias": None, "warm_start": None,
                    "epsilon": ("squared_epsilon_insensitive",)},
           loss_eps={"squared_epsilon_insensitive": 1e-4}),  # train.c's default for -s 11
    Solver("crammer_singer", "Crammer-Singer multi-class SVM by dual CD", ("crammer_singer",),
           0.1, "the projected-gradient violation",
           max_rounds=100000,  # LIBLINEAR's for -s 4: one round is one of its iterations
           types={4: "crammer_singer"},
           options={"weights": None, "seed": None, "gap_tol": None, "join_blocks": None},
           multiclass=True, joins=True),
    Solver("l1", "L1-regularized SVC (CDN) and LR (newGLMNET) over column blocks",
           ("squared_hinge", "logistic"), 0.01,
           "the subgradient's 1-norm relative to the first iteration's, LIBLINEAR's",
           types={5: "squared_hinge", 6: "logistic"},
           options={"weights": None, "seed": None, "regularize_bias": None, "pcd_mode": None},
           reads="columns", recorded=lambda p, meta: {"pcd_mode": p.pcd_mode}),
    Solver("oneclass", "one-class SVM by dual CD", ("oneclass",), 0.01,
           "the maximal violation, LIBLINEAR's", types={21: "oneclass"},
           options={"nu": None, "join_blocks": None}, joins=True,
           recorded=lambda p, meta: {"nu": float(p.nu)}, labels=False, bias_feature=False),
)}
# LIBLINEAR's -s codes that this version trains, as (solver, loss).
LIBLINEAR_TYPES = dict(sorted((code, (s.name, loss)) for s in SOLVERS.values()
                              for code, loss in s.types.items()))


def choices() -> list[str]:
    """The values of train's ``solver``: the registered solvers and "auto"."""
    return [*SOLVERS, AUTO]


def get(name: str, owner: str) -> Solver:
    """The registered solver ``name``; a ``ValueError`` in scikit-learn's wording otherwise."""
    if name not in SOLVERS:
        raise ValueError(f"The 'solver' parameter of {owner} must be one of {choices()}. "
                         f"Got {name!r} instead.")
    return SOLVERS[name]


def liblinear_type(solver: str, loss: str) -> int | None:
    """LIBLINEAR's ``-s`` code of ``solver`` training ``loss`` (None if it has none)."""
    return next((code for code, sl in LIBLINEAR_TYPES.items() if sl == (solver, loss)), None)
