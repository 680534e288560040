"""The solver registry: what each solver trains and how it runs, and LIBLINEAR's ``-s`` table.

(Not :mod:`distsvm.registry`, the registry of trained models.)  The CLI (``--solver``,
``--loss``, ``-s`` and their help), :func:`distsvm.jobs.train`, the estimators, job specs,
the pipeline and model selection read these tables, and only them: adding a solver is
adding an entry (:data:`SOLVERS`), and a row of :data:`TYPES` if it solves one of
LIBLINEAR's types.  Each entry names the losses it trains and its default ``eps`` (what
that tolerance bounds differs per solver) and the training options of some solvers that it
takes (``options``; an option itself — flag, help, values, refusal — is declared once, in
:class:`distsvm.params.Params`).  The solver itself is the
module of the entry's name in :mod:`distsvm.solvers`, whose ``solve`` takes the checked
:class:`~distsvm.params.Params` (:meth:`Solver.module`).

:data:`TYPES` is LIBLINEAR's ``-s`` table (``train_one`` in linear.cpp): each code's solver,
loss, penalty and dual-or-primal, and whether its dual CD switches to the primal Newton
solver (``-s 1``, ``-s 7``, ``-s 12``).  Every front end turns a code into training
parameters by :func:`type_params` and (penalty, loss, dual) into a code by :func:`type_of`,
scikit-learn's ``_get_liblinear_solver_type``.

Importing this module is cheap (the CLI's ``--help`` reads it): a solver module is imported
when it runs.  Losses are named here; their integer codes for the kernels live with the
kernels (:mod:`distsvm.workers.losses`).
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
AUTO = "auto"  # train's solver="auto": params.choose_solver picks one per store
# LIBLINEAR 2.40+'s -s 1, -s 7 and -s 12 (train_one in linear.cpp): a problem whose dual CD
# has not converged after this many iterations continues with the primal Newton solver of
# the same loss (-s 2, -s 0, -s 11) from the dual's w; train's ``primal_switch``, which
# :func:`type_params` sets for the types that switch
LIBLINEAR_DUAL_ROUNDS = 300


@dataclasses.dataclass(frozen=True)
class Solver:
    """A solver's entry.  Its module (:meth:`module`) has
    ``solve(client, dataset, plan, p, *, positive, cost, progress, checkpoint)``, which runs
    one problem: rows of class index ``positive`` are +1, ``cost`` is C per class index
    (:func:`distsvm.workers.losses.class_costs`).  ``joins``: every problem trains on the rows and
    plan of :func:`distsvm.solvers.resident.hold` (dual CD's joined blocks);
    ``batches_ovr``: the module's ``solve_ovr(client, dataset, plan, p, *, costs, progress,
    checkpoint)`` runs the K one-vs-rest problems of a sequential run in one job, problem k
    at ``costs[k]``; ``recorded(params, meta)`` the solver's own entries of the model's
    params; ``options``: the training options that belong to some solvers
    (:data:`distsvm.params.BY_SOLVER`) which this one takes — {name: the losses it takes it
    with, None: all its losses}.  The options every solver takes, and ``epsilon`` (the SVR
    losses') and ``primal_switch`` (the :data:`TYPES` that switch), are not listed."""

    name: str
    help: str
    losses: tuple[str, ...]
    eps: float
    eps_help: str
    max_rounds: int = 1000  # the default round limit, LIBLINEAR's max_iter
    reads: str = "rows"  # "columns": the store's column view, which a fold (a view) lacks
    multiclass: bool = False  # trains K classes as one problem (no one-vs-rest)
    intercept: bool = False  # bias >= 0 is an unregularized intercept, not a bias feature
    joins: bool = False
    batches_ovr: bool = False
    recorded: Callable = lambda params, meta: {}
    loss_eps: Mapping[str, float] = dataclasses.field(default_factory=dict)  # eps per loss
    labels: bool = True  # False: one problem whatever the store's labels (one-class SVM)
    bias_feature: bool = True  # False: bias >= 0 is refused (LIBLINEAR's -s 21)
    options: Mapping[str, tuple[str, ...] | None] = dataclasses.field(default_factory=dict)

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


def _cutting_plane_recorded(p, meta) -> dict:
    """SVMperf's C of the C trained (:func:`~.cutting_plane.n_loss_terms`)."""
    from . import cutting_plane

    return {"c_perf": cutting_plane.n_loss_terms(meta.class_counts, p.objective) * p.C / 100}


# In the CLI's order; "auto" (AUTO) follows them.  Default eps: LIBLINEAR's for dcd, pcd,
# crammer_singer (relative to the gradient at w = 0 for pcd) and its Newton solver (-s 0, -s 2);
# the paper's ε = 0.001 on the average training loss for the cutting plane (Joachims 2006
# §4.4); ‖∇obj‖ ≤ 0.01 for SVM-ALM, as Nie et al. 2014.
SOLVERS = {s.name: s for s in (
    Solver("dcd", "dual CD over row blocks", ("hinge", "squared_hinge", "logistic",
                                                "epsilon_insensitive",
                                                "squared_epsilon_insensitive"),
           0.1, "the projected-gradient violation (SVR: the summed violation relative to "
           "round 1's)", joins=True, batches_ovr=True,
           options={"class_weight": None, "inner_passes": None, "gap_tol": None,
                    "parallel": ("hinge", "squared_hinge"), "join_blocks": None}),
    Solver("pcd", "primal CD over column blocks", ("squared_hinge", "logistic"), 0.1,
           "max |D'(0)| relative to the gradient at w = 0", reads="columns",
           options={"class_weight": None, "pcd_mode": None}),
    Solver("cutting_plane", "Joachims 2006", ("hinge",), 1e-3,
           "the precision of the average loss", recorded=_cutting_plane_recorded,
           options={"objective": None, "c_perf": None}),
    Solver("alm", "SVM-ALM primal solver", ("hinge", "squared_hinge", "lp"), 0.01,
           "the gradient norm (the paper's)", intercept=True,
           options=dict.fromkeys(("p", "method", "mu0", "rho", "rtol"))),
    Solver("newton", "LIBLINEAR's line-search Newton",
           ("logistic", "squared_hinge", "squared_epsilon_insensitive"), 0.01,
           "|grad f| relative to the gradient at w = 0, LIBLINEAR's (-s 11: 0.0001)",
           loss_eps={"squared_epsilon_insensitive": 1e-4},  # train.c's default for -s 11
           options=dict.fromkeys(("class_weight", "regularize_bias", "warm_start"))),
    Solver("crammer_singer", "Crammer-Singer multi-class SVM by dual CD", ("crammer_singer",),
           0.1, "the projected-gradient violation",
           max_rounds=100000,  # LIBLINEAR's for -s 4: one round is one of its iterations
           multiclass=True, joins=True,
           options=dict.fromkeys(("class_weight", "gap_tol", "join_blocks"))),
    Solver("l1", "L1-regularized SVC (CDN) and LR (newGLMNET) over column blocks",
           ("squared_hinge", "logistic"), 0.01,
           "the subgradient's 1-norm relative to the first iteration's, LIBLINEAR's",
           reads="columns",
           options=dict.fromkeys(("class_weight", "regularize_bias", "pcd_mode"))),
    Solver("oneclass", "one-class SVM by dual CD", ("oneclass",), 0.01,
           "the maximal violation, LIBLINEAR's", joins=True, labels=False,
           bias_feature=False, options=dict.fromkeys(("nu", "join_blocks"))),
)}


@dataclasses.dataclass(frozen=True)
class Type:
    """One of LIBLINEAR's ``-s`` types: its ``name`` (linear.cpp's solver_type_table, as
    model files spell it), the registered ``solver`` and ``loss`` that train it, its
    ``penalty`` and whether it solves the ``dual``, as scikit-learn's estimators choose one;
    ``switch``: LIBLINEAR's dual CD that continues with the primal Newton solver after
    :data:`LIBLINEAR_DUAL_ROUNDS` rounds without converging."""

    name: str
    solver: str
    loss: str
    penalty: str = "l2"
    dual: bool = False
    switch: bool = False


# LIBLINEAR's -s codes that this version trains (train.c's usage, linear.cpp's train_one).
TYPES = {
    0: Type("L2R_LR", "newton", "logistic"),
    1: Type("L2R_L2LOSS_SVC_DUAL", "dcd", "squared_hinge", dual=True, switch=True),
    2: Type("L2R_L2LOSS_SVC", "newton", "squared_hinge"),
    3: Type("L2R_L1LOSS_SVC_DUAL", "dcd", "hinge", dual=True),
    4: Type("MCSVM_CS", "crammer_singer", "crammer_singer", dual=True),
    5: Type("L1R_L2LOSS_SVC", "l1", "squared_hinge", penalty="l1"),
    6: Type("L1R_LR", "l1", "logistic", penalty="l1"),
    7: Type("L2R_LR_DUAL", "dcd", "logistic", dual=True, switch=True),
    11: Type("L2R_L2LOSS_SVR", "newton", "squared_epsilon_insensitive"),
    12: Type("L2R_L2LOSS_SVR_DUAL", "dcd", "squared_epsilon_insensitive", dual=True,
             switch=True),
    13: Type("L2R_L1LOSS_SVR_DUAL", "dcd", "epsilon_insensitive", dual=True),
    21: Type("ONECLASS_SVM", "oneclass", "oneclass", dual=True),
}
# LIBLINEAR's -s codes as (solver, loss).
LIBLINEAR_TYPES = {code: (t.solver, t.loss) for code, t in TYPES.items()}


def type_params(code: int) -> dict:
    """The training parameters of LIBLINEAR's ``-s code``: its solver and loss, and the
    switch to the primal solver (``primal_switch``) where LIBLINEAR's dual CD switches."""
    t = TYPES[code]
    return {"solver": t.solver, "loss": t.loss,
            **({"primal_switch": LIBLINEAR_DUAL_ROUNDS} if t.switch else {})}


def type_of(loss: str, penalty: str = "l2", dual: bool = True, loss_name: str | None = None
            ) -> int:
    """LIBLINEAR's ``-s`` code of (penalty, loss, dual), scikit-learn's
    ``_get_liblinear_solver_type`` and its messages (``loss_name``: the loss as the message
    names it); ``ValueError`` for a combination no type has."""
    table: dict = {}
    for code, t in TYPES.items():
        if t.loss == loss:
            table.setdefault(t.penalty, {})[t.dual] = code
    name = loss_name or loss
    if not table:
        problem = f"loss='{name}' is not supported"
    elif penalty not in table:
        problem = f"The combination of penalty='{penalty}' and loss='{name}' is not supported"
    elif dual not in table[penalty]:
        problem = (f"The combination of penalty='{penalty}' and loss='{name}' are not "
                   f"supported when dual={dual}")
    else:
        return table[penalty][dual]
    raise ValueError(f"Unsupported set of arguments: {problem}, Parameters: penalty={penalty!r}, "
                     f"loss={name!r}, dual={dual!r}")


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
