"""The ``distsvm`` command: ingest | generate | columnize | info | train | predict | report |
export | import | run | resume | registry | pipeline.

Shaped like LIBLINEAR's ``train [options] data model``: ``-s``, ``-c``, ``-e``,
``-B``, ``-q``, ``-v``, ``-C`` mean what they mean there.  Errors are one ``ERROR: …`` line on
stderr and a non-zero exit status; ``--json`` prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import signal
import sys
import threading
import warnings

from storage import open_dataset
from storage.errors import StorageError
from storage.lock import LockHeldError

from . import __version__
from .errors import ClusterError, MissingDependencyError, UsageError, message
from .params import CHOICES, DEFAULTS
from .progress import LOG_FORMATS, Progress, now_iso
from .solvers.registry import AUTO, LIBLINEAR_DUAL_ROUNDS, LIBLINEAR_TYPES, LOSSES, SOLVERS

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_LOCKED = 4  # another writer held the store's or the registry's lock (storage.lock)
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")  # --log-level: Dask's messages


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"ERROR: {self.prog}: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


class _WeightsHelp(argparse.HelpFormatter):
    """``train --help`` with LIBLINEAR's ``-wi W`` among the options: argparse cannot declare
    an option whose name holds its value (``-w1 2``); :func:`_class_weights` reads it."""

    def add_arguments(self, actions):
        actions = list(actions)
        super().add_arguments(actions)
        if any(a.dest == "C" for a in actions):  # the options' section
            self.add_argument(argparse.Action(
                ["-wi"], dest="class_weight", metavar="W",
                help="weight W on the cost C of class label i (LIBLINEAR's -wi, repeatable: "
                     "-w1 2 -w-1 0.5); default 1"))


def _cluster_options(p):
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="Dask scheduler address (tcp://host:port); default: an embedded "
                            "local cluster")
    where.add_argument("--scheduler-file", metavar="FILE",
                       help="the scheduler of a Dask scheduler file (as `dask scheduler "
                            "--scheduler-file FILE` writes it), as dask's tools take it")
    p.add_argument("--dashboard", action="store_true",
                   help="the embedded cluster serves Dask's dashboard on 127.0.0.1 and prints "
                        "its URL (needs bokeh: pip install 'distsvm[dashboard]')")
    p.add_argument("--workers", type=int, metavar="N",
                   help="run on N worker processes of a local cluster started for the command "
                        "(or use N workers of the --scheduler's); default: one worker whose "
                        "threads are this process's, or worker processes (one per core, at "
                        "most 4) for a store over a quarter of the machine's memory and for "
                        "train --parallel")
    tls = p.add_argument_group("TLS (a --scheduler tls://… address; as dask worker's options)")
    tls.add_argument("--tls-ca-file", metavar="FILE", help="CA certificate(s), PEM")
    tls.add_argument("--tls-cert", metavar="FILE", help="this client's certificate, PEM")
    tls.add_argument("--tls-key", metavar="FILE",
                     help="this client's private key, PEM (if not in the --tls-cert file)")


def _lock_options(p):
    p.add_argument("--lock-timeout", type=float, metavar="SECONDS",
                   help="wait up to SECONDS for another writer of the same store or registry "
                        "model to finish (default 60), then exit 4 naming it")


def _columnize_options(p):
    p.add_argument("--memory-mb", type=float, default=512.0, metavar="MB",
                   help="memory bound of each column-view build task (default 512)")


def _workers(a, store) -> int | None:
    """The worker count of a job on ``store``: ``--workers``, or None (the in-process
    cluster) for a store that fits well in memory (:func:`distsvm.cluster.workers_for`)."""
    from .cluster import workers_for

    return workers_for(store.meta, a.scheduler, a.workers, getattr(a, "parallel", None))


def _storage_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of ``--storage-option``; VALUE is read as JSON if it parses, else a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _storage_options(p):
    p.add_argument("--storage-option", dest="storage_options", type=_storage_option,
                   action="append", default=[], metavar="KEY=VALUE",
                   help="fsspec storage option for s3:// and other remote URLs, repeatable "
                        "(e.g. endpoint_url=http://host:9000, key=…, secret=…; a JSON VALUE is "
                        "decoded: 'config_kwargs={\"retries\": {\"max_attempts\": 5}}')")


def _so(a) -> dict | None:
    """The command's storage options as a dict (None when none were given)."""
    return dict(getattr(a, "storage_options", None) or []) or None


def _common(p):
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                   help="progress on stderr as text lines (default) or JSON lines: one "
                        "object per event with time, event and its fields (rounds: the "
                        "solver's round fields)")
    p.add_argument("--json", action="store_true", help="print one JSON object with the results")
    p.add_argument("--log-level", choices=LOG_LEVELS, metavar="LEVEL",
                   help="show Dask's log messages (scheduler, workers, client) of LEVEL and "
                        f"above on stderr: {', '.join(LOG_LEVELS)} (default: none; errors "
                        "are one ERROR line)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="distsvm", description=re.sub(  # the docstring's ``markup`` off
        r"``(.*?)``", r"\1", " ".join(__doc__.split("\n\n")[0].split())))
    parser.add_argument("--version", action="version", version=f"distsvm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("ingest", help="LIBSVM/svmlight text (.gz/.bz2/.xz too), Parquet or CSV "
                                       "into a dataset store")
    p.add_argument("source")
    p.add_argument("store")
    p.add_argument("--no-shuffle", action="store_true", help="keep the file's row order")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--block-rows", type=int, metavar="N", help="rows per block")
    size.add_argument("--block-mb", type=float, metavar="MB",
                      help="megabytes of CSR per block (default 64)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--zero-based", action="store_true", help="feature indices start at 0")
    p.add_argument("--n-features", type=int, metavar="N",
                   help="number of features (default: the largest index seen)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    p.add_argument("--append", action="store_true",
                   help="append SOURCE's rows to STORE (created if absent) as a pipeline run "
                        "does: recorded in its ledger by file name and SHA-256, skipped if "
                        "already there, refused if that name was appended with other content; "
                        "one writer at a time (docs/pipeline.md)")
    p.add_argument("--weights", metavar="FILE",
                   help="instance weights, one per line in the rows' order (LIBLINEAR's -W "
                        "file), kept in the store")
    p.add_argument("--serial", action="store_true", help="parse in this process, no cluster")
    p.add_argument("--regression", action="store_true",
                   help="the labels are real-valued targets (a regression store, for -s 11, "
                        "12, 13), not classes, even where they are integers")
    p.add_argument("--columns", action="store_true",
                   help="also build the column view (as `distsvm columnize` does)")
    _lock_options(p)
    tabular = p.add_argument_group("Parquet/CSV input (a file, directory or glob; docs/tabular.md)")
    tabular.add_argument("--label", metavar="COLUMN", help="the label (target) column")
    tabular.add_argument("--features", metavar="COL,COL,...",
                         help="dense layout: the feature columns (default: all but the label)")
    tabular.add_argument("--indices", metavar="COLUMN",
                         help="sparse layout: the list column of 0-based feature indices")
    tabular.add_argument("--values", metavar="COLUMN",
                         help="sparse layout: the list column of their values")
    _columnize_options(p)
    _cluster_options(p)
    _storage_options(p)
    _common(p)

    p = sub.add_parser("columnize", help="build the CSC column view of a store (for --solver pcd)")
    p.add_argument("store")
    p.add_argument("--block-mb", type=float, default=64.0, metavar="MB",
                   help="megabytes of CSC per column block (default 64)")
    p.add_argument("--serial", action="store_true", help="run in this process, no cluster")
    _columnize_options(p)
    _cluster_options(p)
    _storage_options(p)
    _common(p)

    p = sub.add_parser("generate", help="write a synthetic text-like dataset into a store")
    p.add_argument("store")
    p.add_argument("--rows", type=int, required=True, metavar="N")
    p.add_argument("--features", type=int, required=True, metavar="M")
    p.add_argument("--nnz-per-row", type=int, required=True, metavar="K",
                   help="mean number of distinct features per row (log-normal lengths)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of feature popularity (1)")
    p.add_argument("--density", type=float, default=0.1,
                   help="share of features in the ground truth's support (0.1)")
    p.add_argument("--noise", type=float, default=0.05, help="label flip probability (0.05)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--block-rows", type=int, metavar="N", help="rows per block")
    size.add_argument("--block-mb", type=float, metavar="MB",
                      help="megabytes of CSR per block (default 64)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    p.add_argument("--serial", action="store_true", help="generate in this process, no cluster")
    _cluster_options(p)
    _storage_options(p)
    _common(p)

    p = sub.add_parser("info", help="print and check a store's metadata")
    p.add_argument("store")
    p.add_argument("--no-verify", action="store_true",
                   help="skip reading every block to check checksums and invariants")
    p.add_argument("--json", action="store_true", help="print the metadata as JSON")
    _storage_options(p)

    p = sub.add_parser("train", help="train a linear classifier on a store",
                       formatter_class=_WeightsHelp)
    p.add_argument("store")
    p.add_argument("model", nargs="?", help="where to write the model (not with -v or -C)")
    p.add_argument("--solver", choices=[*(s.cli_name for s in SOLVERS.values()), AUTO],
                   help="; ".join(f"{s.cli_name} = {s.help} ({', '.join(_cli(s.losses))})"
                                  for s in SOLVERS.values())
                   + f"; auto = primal when rows far outnumber features (default {DEFAULTS.solver})")
    p.add_argument("--objective", choices=CHOICES["objective"], default=DEFAULTS.objective,
                   help="cutting-plane only: ordinal = a ranking model of the labels' order "
                        "(R >= 2 ordered ranks; ROC area for two labels)")
    p.add_argument("--loss", choices=_cli(LOSSES),
                   help=", ".join(f"{_cli([k])[0]} = {v} ({', '.join(_cli(_trainers(k)))})"
                                  for k, v in LOSSES.items())
                   + "; default: squared-hinge where the solver trains it, else its first loss")
    p.add_argument("-s", dest="liblinear_type", type=int, choices=list(LIBLINEAR_TYPES),
                   metavar="TYPE",
                   help="LIBLINEAR solver type: " + ", ".join(
                       f"{code} = {LOSSES[loss]} ({_cli([solver])[0]})"
                       for code, (solver, loss) in LIBLINEAR_TYPES.items()))
    p.add_argument("--pcd-mode", choices=CHOICES["pcd_mode"], default=DEFAULTS.pcd_mode,
                   help="pcd and l1: one worker per round (exact), or all workers on their "
                        "column blocks with a global line search (parallel)")
    cost = p.add_mutually_exclusive_group()
    cost.add_argument("-c", dest="C", type=float,
                      help="cost C on the sum of losses, LIBLINEAR's (default 1)")
    cost.add_argument("--c-perf", type=float, metavar="C_PERF",
                      help="cutting-plane only: SVMperf's C instead, C = 100*C_PERF/l "
                           "(l = rows, or ranked pairs for --objective ordinal)")
    p.add_argument("-e", dest="eps", type=float,
                   help="stopping tolerance: " + "; ".join(
                       f"{s.cli_name}, {s.eps_help} (default {s.eps:g})" for s in SOLVERS.values()))
    p.add_argument("-p", dest="epsilon", type=float, default=DEFAULTS.epsilon,
                   help="epsilon of the epsilon-insensitive loss of SVR (-s 11, 12, 13; "
                        f"default {DEFAULTS.epsilon:g}), LIBLINEAR's -p")
    p.add_argument("-B", dest="bias", type=float, default=DEFAULTS.bias,
                   help="bias feature value; < 0 means none (default -1)")
    p.add_argument("-n", dest="nu", type=float, default=DEFAULTS.nu,
                   help="one-class SVM (-s 21): nu, 0 < nu <= 1 (default 0.5), LIBLINEAR's")
    p.add_argument("-R", dest="unregularized_bias", action="store_true",
                   help="newton: leave the bias feature's weight out of the regularization "
                        "(LIBLINEAR's -R; needs -B >= 0)")
    p.add_argument("--gap-tol", type=float, default=DEFAULTS.gap_tol, metavar="TOL",
                   help="also stop when the duality gap is <= TOL x the primal objective "
                        "(a certified relative accuracy; default 0: off)")
    p.add_argument("-v", dest="n_folds", type=int, metavar="N",
                   help="N-fold cross-validation (folds are rows, as LIBLINEAR's; no model is "
                        "written): prints LIBLINEAR's 'Cross Validation Accuracy'")
    p.add_argument("-C", dest="find_c", action="store_true",
                   help="search C by warm-started cross-validation (-s 0 or -s 2; 5 folds "
                        "unless -v; -c sets the start C): prints 'Best C = ...'")
    p.add_argument("--seed", type=int, default=DEFAULTS.seed,
                   help="solver seed, and the draw of the blocks into folds (default 0)")
    p.add_argument("--concurrent-folds", type=int, default=1, metavar="K",
                   help="-v/-C: train K folds at a time (default 1)")
    p.add_argument("--max-rounds", type=int,
                   help="round limit; reaching it warns (default 1000; crammer-singer, -s 4: "
                        "100000, LIBLINEAR's)")
    p.add_argument("--inner-passes", type=int, default=DEFAULTS.inner_passes,
                   help="DCD passes over a block per visit (default 1); with --parallel, "
                        "local passes per round")
    p.add_argument("--parallel", choices=[m for m in CHOICES["parallel"] if m],
                   help="dcd across workers as CoCoA (average, gamma=1/K), CoCoA+ (add, "
                        "gamma=1, sigma'=K) or with an exact line search on the combined step "
                        "(line, sigma'=1): w broadcast once per round, only dw returned")
    p.add_argument("--no-join-blocks", dest="join_blocks", action="store_false",
                   help="sequential dcd: visit the rows block by block even where one "
                        "worker's memory holds the whole store (default: one permutation of "
                        "all rows per round there, as LIBLINEAR)")
    p.add_argument("--verbose", action="store_true",
                   help="multi-class (one-vs-rest): every class's round lines, [class …] "
                        "(default: one line a round for all classes where they run side by "
                        "side)")
    p.add_argument("--run-dir", metavar="DIR",
                   help="keep a run log in DIR: rounds.jsonl (one JSON line per round) and "
                        "summary.json (see `distsvm report`)")
    alm = p.add_argument_group("SVM-ALM (--solver alm)")
    alm.add_argument("--p", type=float, help="loss exponent p >= 1 of --loss lp")
    alm.add_argument("--no-bias", action="store_true",
                     help="no intercept (default: an unregularized intercept b, as the paper)")
    alm.add_argument("--method", choices=CHOICES["method"], default=DEFAULTS.method,
                     help="inexact = Algorithm 2, one gradient step per iteration (default); "
                          "exact = Algorithm 1, LSQR per iteration")
    alm.add_argument("--mu0", type=float, default=DEFAULTS.mu0,
                     help="first penalty mu = mu0*C (0.01)")
    alm.add_argument("--rho", type=float, default=DEFAULTS.rho,
                     help="penalty growth per iteration, capped at 1e5 (1.02)")
    alm.add_argument("--rtol", type=float, default=DEFAULTS.rtol,
                     help="stop when the objective changed by <= rtol (relative) over 10 "
                          "iterations (1e-6)")
    _cluster_options(p)
    _storage_options(p)
    _common(p)

    p = sub.add_parser("predict", help="predict a store with a model and report accuracy")
    p.add_argument("store")
    p.add_argument("model", help="a distsvm model or a LIBLINEAR text model")
    p.add_argument("--output", metavar="FILE",
                   help="write one predicted label (a ranking model: rank) per line; to "
                        "FILE.parquet or FILE.zarr: labels, decision values (and -b 1 "
                        "probabilities), written block by block on the workers")
    p.add_argument("--strict", action="store_true",
                   help="a model and store of different feature counts are an error "
                        "(default: a warning, and features only one has weigh 0)")
    p.add_argument("-b", dest="probability", type=int, choices=(0, 1), default=0,
                   help="1: --output gets LIBLINEAR's probability format (a 'labels' header, "
                        "then label and probabilities per row); logistic models only")
    _cluster_options(p)
    _storage_options(p)
    _common(p)

    p = sub.add_parser("report", help="plot a training run's convergence (PNG) and summarize it")
    p.add_argument("run_dir", help="a directory written by train --run-dir")
    p.add_argument("--output", metavar="PNG",
                   help="where to write the plot (default RUN_DIR/convergence.png)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")

    p = sub.add_parser("export", help="write a model in LIBLINEAR's text format")
    p.add_argument("model")
    p.add_argument("liblinear_model")
    _storage_options(p)

    p = sub.add_parser("import", help="read a LIBLINEAR text model into distsvm's format")
    p.add_argument("liblinear_model")
    p.add_argument("model")
    _storage_options(p)

    p = sub.add_parser("run", help="run a training job spec (YAML, TOML or JSON; docs/jobs.md)")
    p.add_argument("spec")
    p.add_argument("--run-id", help="name of the run directory (default: time and a random tag)")
    _lock_options(p)
    _common(p)

    p = sub.add_parser("resume", help="continue a killed `distsvm run` from its last checkpoint")
    p.add_argument("run", help="the run directory (RUNS/RUN_ID)")
    _lock_options(p)
    _common(p)

    p = sub.add_parser("registry", help="list, show or promote models of a model registry")
    p.add_argument("action", choices=("list", "show", "promote"))
    p.add_argument("registry")
    p.add_argument("name", nargs="?", help="model name (all models for list)")
    p.add_argument("version", nargs="?", type=int, help="version number (show, promote)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("pipeline", help="scheduled batch pipeline: ingest new partitions, "
                                        "retrain, evaluate, promote if not worse (docs/pipeline.md)")
    p.add_argument("action", choices=("run",))
    p.add_argument("spec")
    _lock_options(p)
    _common(p)
    return parser


def _ingest(a, progress):
    from .ingest import DEFAULT_BLOCK_MB, ingest
    from .jobs import client_for

    if a.append:
        return _append(a, progress)
    kwargs = dict(dtype=a.dtype, index_base=0 if a.zero_based else 1, shuffle=not a.no_shuffle,
                  seed=a.seed, block_rows=a.block_rows,
                  block_mb=None if a.block_rows else (a.block_mb or DEFAULT_BLOCK_MB),
                  n_features=a.n_features, overwrite=a.overwrite, storage_options=_so(a),
                  progress=progress, sample_weight=a.weights, regression=a.regression,
                  lock_timeout=a.lock_timeout,
                  label=a.label, indices=a.indices, values=a.values,
                  features=a.features.split(",") if a.features else None)
    if a.serial:
        d = ingest(a.source, a.store, **kwargs)
        if a.columns:
            _build_columns(d, a, None, progress)
    else:
        with client_for(a.scheduler, a.workers, progress=_announce(a, progress)) as c:
            d = ingest(a.source, a.store, client=c, **kwargs)
            if a.columns:
                _build_columns(d, a, c, progress)
    m = d.meta
    return {"store": a.store, "n_rows": m.n_rows, "n_features": m.n_features, "nnz": m.nnz,
            "n_blocks": len(m.blocks), "classes": list(m.classes), "task": m.task,
            **({"targets": m.targets} if m.regression else {})}


def _announce(a, progress):
    """Where the data commands (ingest, generate, columnize) announce their cluster: not
    in text for the default in-process one (no scheduler, worker processes or dashboard:
    nothing to look at), so that a malformed input line is one ERROR line on stderr."""
    default = not (a.scheduler or a.workers or getattr(a, "dashboard", False) or progress.json)
    return None if default else progress


def _append(a, progress):
    """``ingest --append``: the pipeline's append of one partition file
    (:func:`distsvm.pipeline.ingest_partitions`), holding the store's lock throughout."""
    from storage.lock import DEFAULT_TIMEOUT, Lock

    from .jobs import client_for
    from .pipeline import ingest_partitions

    given = [flag for flag, on in (("--overwrite", a.overwrite), ("--weights", a.weights),
                                   ("--columns", a.columns), ("--no-shuffle", a.no_shuffle),
                                   ("--dtype", a.dtype != "float32")) if on]
    if given:
        raise ValueError(f"distsvm ingest --append: {given[0]} does not apply (an append "
                         "takes the store's dtype, shuffles, and drops the column view)")
    spec = {"dataset": a.store, "storage_options": _so(a),
            "ingest": {k: v for k, v in dict(
                block_rows=a.block_rows, block_mb=a.block_mb, zero_based=a.zero_based,
                n_features=a.n_features, seed=a.seed, regression=a.regression).items()
                if v not in (None, False)}}
    timeout = DEFAULT_TIMEOUT if a.lock_timeout is None else a.lock_timeout
    with Lock(a.store, _so(a), what=a.store, progress=progress, timeout=timeout):
        from storage.leftovers import remove_leftovers

        remove_leftovers(a.store, _so(a), progress)
        with (contextlib.nullcontext() if a.serial
              else client_for(a.scheduler, a.workers, progress=_announce(a, progress))) as c:
            d, added = ingest_partitions(spec, [a.source], c, progress, timeout)
    m = d.meta
    return {"store": a.store, "appended": added, "n_rows": m.n_rows, "n_features": m.n_features,
            "nnz": m.nnz, "n_blocks": len(m.blocks), "classes": list(m.classes), "task": m.task}


def _generate(a, progress):
    from .generate import generate
    from .ingest import DEFAULT_BLOCK_MB
    from .jobs import client_for

    kwargs = dict(rows=a.rows, features=a.features, nnz_per_row=a.nnz_per_row, seed=a.seed,
                  zipf=a.zipf, density=a.density, noise=a.noise, block_rows=a.block_rows,
                  block_mb=None if a.block_rows else (a.block_mb or DEFAULT_BLOCK_MB),
                  overwrite=a.overwrite, storage_options=_so(a), progress=progress)
    if a.serial:
        d = generate(a.store, **kwargs)
    else:
        with client_for(a.scheduler, a.workers, progress=_announce(a, progress)) as c:
            d = generate(a.store, client=c, **kwargs)
    m = d.meta
    return {"store": a.store, "n_rows": m.n_rows, "n_features": m.n_features, "nnz": m.nnz,
            "n_blocks": len(m.blocks), "class_counts": list(m.class_counts)}


def _build_columns(d, a, client, progress):
    from .columns import columnize

    return columnize(d, memory_mb=a.memory_mb, block_mb=a.block_mb or 64.0, client=client,
                     progress=progress)


def _columnize(a, progress):
    from .jobs import client_for

    d = open_dataset(a.store, _so(a))
    if a.serial:
        cm = _build_columns(d, a, None, progress)
    else:
        with client_for(a.scheduler, a.workers, progress=_announce(a, progress)) as c:
            cm = _build_columns(d, a, c, progress)
    return {"store": a.store, "n_column_blocks": len(cm.blocks), "passes": cm.passes,
            "memory_bytes": cm.memory_bytes}


def _info(a):
    from storage.errors import StoreNotFoundError

    try:
        d = open_dataset(a.store, _so(a))
    except StoreNotFoundError:
        listed = _info_directory(a)  # a folder of stores: what killed writers left in it
        if listed is None:
            raise
        return None
    _leftovers_beside(a)
    if not a.no_verify:
        d.verify()
    meta = d.meta.to_json()
    meta["verified"] = not a.no_verify
    meta["task"] = d.meta.task
    if a.json:
        print(json.dumps(meta))
        return None
    blocks = meta.pop("blocks")
    targets = meta.pop("targets", None)
    for k, v in meta.items():
        print(f"{k:16s} {v}")
    if targets is None:
        print(f"{'labels':16s} classes {list(d.meta.classes)}")
    else:
        print(f"{'labels':16s} targets (regression): {d.meta.n_rows}, min {targets['min']:g}, "
              f"max {targets['max']:g}, mean {targets['mean']:g}")
    sizes = [b["n_rows"] for b in blocks]
    print(f"{'blocks':16s} {len(blocks)} (rows per block: min {min(sizes)}, max {max(sizes)})")
    return None


def _info_directory(a):
    """``info`` on a folder that is not a store: the leftovers of killed writers in it
    (:func:`storage.leftovers.scan`); None if there are none (then: no store here)."""
    from storage.leftovers import scan

    found = scan(a.store, _so(a))
    if not found:
        return None
    if a.json:
        print(json.dumps({"directory": a.store, "leftovers": found}))
        return found
    print(f"{a.store}: not a dataset; {len(found)} leftover(s) of interrupted writes:")
    for f in found:
        print(f"  {f['kind']:18s} {f['path']}: {f['detail']}")
    return found


def _leftovers_beside(a) -> None:
    """``info STORE``: a warning for each leftover of a killed writer of STORE."""
    from storage.leftovers import leftovers_of

    for path in leftovers_of(a.store, _so(a)):
        print(f"WARNING: {path}: left by an interrupted write to {a.store} (the next ingest "
              "or append to it removes it)", file=sys.stderr)


def _train(a, progress):
    from .jobs import train
    from .model import save_model

    solver = (a.solver or DEFAULTS.solver).replace("-", "_")
    loss = a.loss.replace("-", "_") if a.loss else None
    if a.liblinear_type is not None:
        s_solver, s_loss = LIBLINEAR_TYPES[a.liblinear_type]
        if a.solver and solver != s_solver:
            raise ValueError(f"-s {a.liblinear_type} means --solver {_cli([s_solver])[0]}, "
                             f"which contradicts --solver {a.solver}")
        if loss and loss != s_loss:
            raise ValueError(f"-s {a.liblinear_type} means --loss {_cli([s_loss])[0]}, "
                             f"which contradicts --loss {a.loss}")
        solver, loss = s_solver, s_loss
    spec = SOLVERS.get(solver)  # None: "auto", or a name train refuses
    loss = loss or (spec.default_loss if spec else DEFAULTS.loss)
    if spec is not None and spec.intercept:
        _intercept(a)
    elif a.no_bias:
        raise ValueError("--no-bias is an option of --solver "
                         + " and ".join(s.cli_name for s in SOLVERS.values() if s.intercept))
    store = open_dataset(a.store, _so(a))
    options = dict(eps=a.eps, objective=a.objective, c_perf=a.c_perf, bias=a.bias,
                   max_rounds=a.max_rounds, seed=a.seed, inner_passes=a.inner_passes,
                   gap_tol=a.gap_tol, pcd_mode=a.pcd_mode, parallel=a.parallel,
                   join_blocks=a.join_blocks,
                   regularize_bias=not a.unregularized_bias, class_weight=a.class_weight,
                   p=a.p, method=a.method, mu0=a.mu0, rho=a.rho, rtol=a.rtol, nu=a.nu,
                   epsilon=a.epsilon)
    options = _given_options(a, options)
    if a.liblinear_type is not None and spec.takes("primal_switch", loss):
        options["primal_switch"] = LIBLINEAR_DUAL_ROUNDS  # LIBLINEAR's -s 1, 7, 12; in -v too
    _check_training(a, solver, loss, options, store)
    options.update(scheduler=a.scheduler, n_workers=_workers(a, store), owner="distsvm train")
    if a.find_c or a.n_folds is not None:
        return _select(a, progress, solver, loss, options, store)
    if a.model is None:
        raise ValueError("distsvm train: the MODEL path is required (except with -v or -C)")
    model = train(store, solver=solver, loss=loss, C=DEFAULTS.C if a.C is None else a.C,
                  progress=progress, **options)
    save_model(model, a.model, _so(a))
    if a.run_dir:
        from .report import write_summary

        write_summary(a.run_dir, model, a.model)
    s = model.summary
    gap = s["duality_gap"]  # NaN without a dual; SVM-ALM's certificate is its gradient norm
    detail = (f"duality gap {gap:.3g}, " if gap == gap else
              f"|grad| {s['grad_norm']:.3g}, {s['passes']} passes, " if "passes" in s else "")
    if "nnz" in s:  # an L1-regularized model's sparsity
        detail += f"{s['nnz']} of {s['n_weights']} weights non-zero, "
    progress.note(f"train: {s['rounds']} rounds, primal {s['primal_objective']:.8g}, "
                  f"{detail}{s['train_seconds']:.2f}s; model written to {a.model}")
    keys = ("rounds", "converged", "primal_objective", "dual_objective", "duality_gap",
            *(k for k in ("grad_norm", "passes", "rho", "nnz", "n_weights") if k in s),
            "train_seconds", "n_rows",
            "n_features")
    options = {k: model.params[k] for k in ("p",) if k in model.params}
    ranking = ({"ranks": list(model.classes), "thresholds": list(model.thresholds),
                **{k: s[k] for k in s if k.startswith("train_") and k != "train_seconds"}}
               if model.is_ranking else {})
    return {"solver": model.solver, "loss": model.loss, "C": model.params["C"],
            "eps": model.params["eps"], "bias": model.bias, **options, "model": a.model,
            **{k: (None if s[k] != s[k] else s[k]) for k in keys}, **ranking}


def _given_options(a, options: dict) -> dict:
    """``options`` without the solver options (those a solver may not take) that the
    command line did not give: each one given is checked against the solver, even at its
    default value (``-n 0.5 -s 1`` is refused, not ignored); -R is ``regularize_bias``."""
    from .params import OPTION_OF, REFUSALS

    given = a.given | ({"regularize_bias"} if "unregularized_bias" in a.given else set())
    return {k: v for k, v in options.items()
            if OPTION_OF.get(k, k) not in REFUSALS or k in given or
            (k == "class_weight" and v is not None)}


def _check_training(a, solver, loss, options, store) -> None:
    """The training parameters checked as :func:`distsvm.jobs.train` will check them, for
    the solver that will train (a fold's, a C search's), before a cluster starts
    (:func:`distsvm.params.check_kwargs`); UsageError (exit 2) otherwise."""
    from . import params
    from .selection import SEARCH_TYPES, fold_solver

    if a.find_c and a.liblinear_type in SEARCH_TYPES.values():
        solver = LIBLINEAR_TYPES[a.liblinear_type][0]
    if a.find_c or a.n_folds is not None:
        solver, why = fold_solver(solver, loss, "distsvm train")
        if why:
            options.pop("pcd_mode", None)  # the folds' solver has no column view
    kwargs = dict(options, solver=solver, loss=loss, **({} if a.C is None else {"C": a.C}))
    if a.find_c:
        kwargs.pop("C", None)  # -c with -C is the search's start
    try:
        params.check_kwargs("distsvm train", kwargs, store)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc


def _select(a, progress, solver, loss, options, store):
    """``train -v N`` (cross-validation) and ``-C`` (C search), printed in LIBLINEAR's words
    on stdout (stderr with --json); no model is written, as LIBLINEAR's train."""
    from .selection import SEARCH_TYPES, cross_validate, find_c

    if a.model is not None:
        raise ValueError("distsvm train: -v and -C write no model; drop the MODEL argument")
    where = sys.stderr if a.json else sys.stdout
    options = {k: v for k, v in options.items() if k != "owner"}
    if a.find_c:
        if a.liblinear_type not in SEARCH_TYPES.values():
            raise ValueError("-C (the C search) is available for -s 0 and -s 2 only "
                             "(LIBLINEAR's also searches C and p for -s 11; not here)")
        options.pop("pcd_mode", None)  # the search picks a solver that trains folds
        result = find_c(store, 5 if a.n_folds is None else a.n_folds, loss=loss,
                        start_C=a.C, concurrent_folds=a.concurrent_folds, progress=progress,
                        **options)
        print(f"Best C = {result['best_C']:g}  CV accuracy = {100 * result['accuracy']:g}%",
              file=where)
        return result
    result = cross_validate(store, a.n_folds, solver=solver, loss=loss,
                            C=DEFAULTS.C if a.C is None else a.C,
                            concurrent_folds=a.concurrent_folds,
                            progress=progress, **options)
    if "mean_squared_error" in result:  # a regression store: LIBLINEAR's train.c lines
        print(f"Cross Validation Mean squared error = {result['mean_squared_error']:g}\n"
              "Cross Validation Squared correlation coefficient = "
              f"{result['squared_correlation']:g}", file=where)
        return result
    print(f"Cross Validation Accuracy = {100 * result['accuracy']:g}%", file=where)
    return result


def _intercept(a) -> None:
    """The bias of a solver that fits an unregularized intercept (SVM-ALM), on by default
    (the paper's problem): LIBLINEAR's -B (a regularized bias feature) is refused."""
    if a.bias != DEFAULTS.bias:
        raise ValueError(f"--solver {a.solver} fits an unregularized intercept; -B does not "
                         "apply (use --no-bias to fit none)")
    a.bias = -1.0 if a.no_bias else 1.0


def _cli(names) -> list[str]:
    """Solver and loss names as the command line spells them (hyphens)."""
    return [n.replace("_", "-") for n in names]


def _trainers(loss: str) -> list[str]:
    """The solvers that train ``loss``."""
    return [s.name for s in SOLVERS.values() if loss in s.losses]


def _check_features(a, model, store) -> None:
    """A model trained on another feature count than the store's: predict goes on by
    LIBLINEAR's rule (a feature the model has not seen weighs 0, one it has that the store
    lacks is absent), with a warning; ``--strict`` makes it an error."""
    n_model, n_store = model.n_features, store.meta.n_features
    if n_model == n_store:
        return
    text = (f"the model {a.model} has {n_model} features and the store {a.store} "
            f"{n_store}: a different feature space? (")
    if a.strict:
        raise ValueError(text + "--strict: not predicting)")
    warnings.warn(text + "features only one of them has weigh 0, as in LIBLINEAR; "
                  "--strict makes this an error)", stacklevel=2)


def _predict(a, progress):
    from .jobs import check_task, predict
    from .model import load_model

    model = load_model(a.model, _so(a))
    store = open_dataset(a.store, _so(a))
    check_task(model, store)  # a model of the other task is an error before any warning
    _check_features(a, model, store)
    result = predict(store, model, scheduler=a.scheduler, n_workers=_workers(a, store),
                     output=a.output, probability=bool(a.probability))
    where = sys.stderr if a.json else sys.stdout
    if model.is_regression:  # LIBLINEAR's predict.c lines
        print(f"Mean squared error = {result['mean_squared_error']:g} (regression)\n"
              f"Squared correlation coefficient = {result['squared_correlation']:g} "
              "(regression)", file=where)
        return {k: v for k, v in result.items() if k != "regression_sums"}
    what = "Rank accuracy" if model.is_ranking else "Accuracy"
    print(f"{what} = {100 * result['accuracy']:.4f}% ({round(result['accuracy'] * result['n_rows'])}"
          f"/{result['n_rows']})", file=where)
    if model.is_ranking:
        print(f"Mean absolute rank error = {result['mean_abs_rank_error']:.4f}\n"
              f"Pairwise ordering accuracy = {100 * result['pairwise_accuracy']:.4f}% "
              f"({result['n_pairs']} pairs of different rank)", file=where)
    return result


def _report(a):
    from .report import report

    png, text = report(a.run_dir, a.output)
    if a.json:
        return {"plot": png, "summary": text.splitlines()}
    print(f"{text}\nplot written to {png}")
    return None


def _convert(a):
    from .model import export_liblinear, import_liblinear, load_model, save_model

    if a.command == "export":
        export_liblinear(load_model(a.model, _so(a)), a.liblinear_model, _so(a))
    else:
        save_model(import_liblinear(a.liblinear_model, _so(a)), a.model, _so(a))


def _run(a, progress):
    from . import spec

    if a.command == "resume":
        return spec.resume(a.run, progress=progress, lock_timeout=a.lock_timeout)
    return spec.run(spec.load_spec(a.spec), run_id=a.run_id, progress=progress,
                    lock_timeout=a.lock_timeout)


def _registry(a):
    from storage import checkpoint as files

    from . import registry

    if a.action == "list":  # every sound model listed, then the first damaged one named
        names = [a.name] if a.name else [n for n in files.listdir(a.registry)
                                         if registry.versions(a.registry, n)]
        out, damaged = {}, []
        for n in names:
            try:
                out[n] = {"versions": registry.versions(a.registry, n),
                          "current": registry.current_version(a.registry, n)}
            except registry.RegistryError as exc:
                damaged.append(exc)
        if not a.json:
            for n, v in out.items():
                print(f"{n}: versions {' '.join(f'v{k}' for k in v['versions'])}; current "
                      f"{'v%d' % v['current'] if v['current'] else 'none'}")
        elif damaged:
            print(json.dumps(out))
        if damaged:
            raise damaged[0]
        return out
    if not a.name:
        raise ValueError(f"distsvm registry {a.action}: a model name is required")
    if a.action == "promote":
        if a.version is None:
            raise ValueError("distsvm registry promote: a version number is required")
        registry.promote(a.registry, a.name, a.version)
    rec = registry.show(a.registry, a.name, a.version)
    if not a.json:
        print(json.dumps(rec, indent=1))
    return rec


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"WARNING: {message}", file=sys.stderr)


def _class_weights(argv: list[str]) -> tuple[list[str], dict | None]:
    """LIBLINEAR's ``-wi W`` options (``-w1 2 -w-1 0.5``: label i weighs W), which argparse
    cannot declare, taken out of a ``train`` command line: (the rest, {label: weight})."""
    if not argv or argv[0] != "train":
        return argv, None
    rest, weights, k = [], {}, 0
    while k < len(argv):
        m = re.fullmatch(r"-w([-+]?[0-9.eE+-]+)", str(argv[k]))
        if m and k + 1 < len(argv):
            try:
                weights[float(m.group(1))] = float(argv[k + 1])
            except ValueError:
                raise SystemExit(f"ERROR: {argv[k]} {argv[k + 1]}: -wi takes a label i and a "
                                 "weight, e.g. -w1 2") from None
            k += 2
        else:
            rest.append(argv[k])
            k += 1
    return rest, weights or None


# What each path argument of a command is expected to name (for the message of an OSError).
EXPECTED = {"source": "a LIBSVM/svmlight text file, plain or .gz/.bz2/.xz",
            "store": "a dataset store directory (made by distsvm ingest)",
            "liblinear_model": "a LIBLINEAR text model file",
            "weights": "a text file of one instance weight per line",
            "spec": "a job spec file (YAML, TOML or JSON)",
            "run": "a run directory of distsvm run",
            "output": "a file to write"}
EXPECTED_MODEL = {"train": "where to write the model (a file path)",
                  "predict": "a distsvm model or a LIBLINEAR text model file",
                  "export": "a distsvm model file", "import": "where to write the model"}


def _os_error(a, exc: OSError) -> str:
    """An OSError as one line: the path, what happened (not a bare errno), and what the
    command expected to find there (:data:`EXPECTED`)."""
    name = exc.filename
    if name is None or not exc.strerror:
        return message(exc)
    reason = exc.strerror[0].lower() + exc.strerror[1:]
    args = {k: v for k, v in vars(a).items() if isinstance(v, str)}
    arg = next((k for k in ("model", "liblinear_model", *args) if args.get(k) == str(name)),
               None)
    what = EXPECTED_MODEL.get(a.command) if arg == "model" else EXPECTED.get(arg)
    return f"{name}: {reason}" + (f" (expected {what})" if what else "")


def _cluster_setup(a) -> None:
    """``--scheduler-file`` (read into ``a.scheduler``) and ``--dashboard``."""
    if getattr(a, "scheduler_file", None):
        from .cluster import scheduler_address

        a.scheduler = scheduler_address(a.scheduler_file)
    if getattr(a, "dashboard", False):
        from . import cluster

        if not a.scheduler:  # an embedded cluster's: bokeh here (checked before the job)
            cluster.need_bokeh()
        cluster.DASHBOARD = True


def _dispatch(a, progress):
    """Run the command ``a.command``; its result for ``--json``, or None."""
    with_progress = {"ingest": _ingest, "columnize": _columnize, "generate": _generate,
                     "train": _train, "predict": _predict, "run": _run, "resume": _run}
    if a.command in with_progress:
        return with_progress[a.command](a, progress)
    return {"info": _info, "report": _report, "registry": _registry}.get(a.command, _convert)(a)


@contextlib.contextmanager
def _quiet_interrupt():
    """Ctrl-C (SIGINT) silences logging before it raises KeyboardInterrupt: the job's Dask
    calls then unwind, and Dask's threads log the calls cancelled under them (tracebacks of
    its internals, e.g. distributed.utils.sync's cancel) after the command's one ``ERROR:``
    line.  Installed in the main thread only, over Python's default handler only."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return

    def interrupted(signum, frame):
        logging.disable(logging.CRITICAL)  # for good: the process is on its way out
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def _tls(a):
    """The command's TLS options (``--tls-ca-file``, ``--tls-cert``, ``--tls-key``) as Dask's
    TLS configuration while it runs: every client it makes for ``--scheduler`` uses them."""
    if not hasattr(a, "tls_ca_file"):  # a command without cluster options
        yield
        return
    import dask

    from .cluster import tls_config

    with dask.config.set(tls_config(a.scheduler, a.tls_ca_file, a.tls_cert, a.tls_key)):
        yield


def _given(argv: list[str]) -> set[str]:
    """The dests of the options given on the command line ``argv`` (parsed again with every
    default suppressed): an option given at its default value is still given."""
    parser = build_parser()
    sub = next(x for x in parser._actions if isinstance(x, argparse._SubParsersAction))
    for p in (parser, *sub.choices.values()):
        for action in p._actions:
            if action.option_strings:  # a positional's default would go through its type
                action.default = argparse.SUPPRESS
    return {k for k, v in vars(parser.parse_args(argv)).items() if v is not argparse.SUPPRESS}


# The outputs a command writes ({command: ((dest, a directory), ...)}): checked first.
OUTPUTS = {"ingest": (("store", True),), "generate": (("store", True),),
           "train": (("model", False), ("run_dir", True)), "report": (("output", False),),
           "export": (("liblinear_model", False),), "import": (("model", False),)}
# The paths (local or URLs) a command names, for --storage-option.
URLS = ("store", "source", "model", "liblinear_model", "output")


def _check_usage(a) -> None:
    """The command's options checked before anything is read, written or started, by the
    checks the job and pipeline specs share (:func:`distsvm.params.check_settings`,
    :func:`~distsvm.params.check_storage_options`, :func:`~distsvm.params.check_output`):
    ranges, the local cluster's size, storage options on local paths only, and the
    outputs' paths.  ValueError naming the option."""
    from . import params
    from .dask_io import output_kind

    owner = f"distsvm {a.command}"
    sub = next(x for x in build_parser()._actions if isinstance(x, argparse._SubParsersAction))
    flags = {x.dest: max(x.option_strings, key=len) if x.option_strings else x.dest
             for x in sub.choices[a.command]._actions}
    values = {k: getattr(a, k) for k in params.SETTINGS if k in flags}
    params.check_settings(owner, values, flags,
                          local=not (getattr(a, "scheduler", None)
                                     or getattr(a, "scheduler_file", None)))
    params.check_storage_options(owner, flags.get("storage_options", "--storage-option"),
                                 _so(a), [getattr(a, k, None) for k in URLS])
    outputs = OUTPUTS.get(a.command, ())
    if a.command == "predict" and a.output:
        outputs = (("output", output_kind(a.output) is not None),)
    for dest, directory in outputs:
        params.check_output(owner, flags[dest], getattr(a, dest, None), directory)


def main(argv=None) -> int:
    argv, class_weight = _class_weights(list(sys.argv[1:] if argv is None else argv))
    a = build_parser().parse_args(argv)
    a.given = _given(argv)
    if a.command == "train":
        a.class_weight = class_weight
    try:
        _check_usage(a)
    except ValueError as exc:
        print(f"ERROR: {message(exc)}", file=sys.stderr)
        return EXIT_USAGE
    warnings.showwarning = _show_warning
    progress = Progress(quiet=getattr(a, "quiet", False),
                        log_format=getattr(a, "log_format", "text"),
                        run_dir=getattr(a, "run_dir", None) if a.command == "train" else None,
                        verbose=getattr(a, "verbose", False))
    if progress.json:  # warnings too are JSON lines (not silenced by -q, as in text)
        warnings.showwarning = lambda message, *_, **__: print(json.dumps(
            {"time": now_iso(), "event": "warning", "message": str(message)}),
            file=sys.stderr)
    if hasattr(a, "log_level"):  # a command that may start or join a Dask cluster
        from . import cluster

        cluster.set_log_level(logging.getLevelName(a.log_level.upper()) if a.log_level
                              else cluster.QUIET)
    if a.command == "pipeline":  # exit codes of its own, for schedulers (docs/pipeline.md)
        from . import pipeline

        code, result = pipeline.main(a.spec, progress, a.lock_timeout)
        if a.json and result is not None:
            print(json.dumps(result))
        return code
    try:
        with _quiet_interrupt(), _tls(a):
            _cluster_setup(a)
            result = _dispatch(a, progress)
    except LockHeldError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    except (StorageError, ValueError, OSError, ClusterError, MissingDependencyError) as exc:
        print(f"ERROR: {_os_error(a, exc) if isinstance(exc, OSError) else message(exc)}",
              file=sys.stderr)
        from .spec import SpecError

        return EXIT_USAGE if isinstance(exc, (SpecError, UsageError)) else EXIT_ERROR
    except KeyboardInterrupt:
        print("ERROR: interrupted", file=sys.stderr)
        return 130
    if getattr(a, "json", False) and result is not None:
        from .model import json_default

        print(json.dumps(result, default=json_default))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
