"""The ``distsvm`` command: what each subcommand does (its arguments: :mod:`distsvm.arguments`).

Shaped like LIBLINEAR's ``train [options] data model``: ``-s``, ``-c``, ``-e``,
``-B``, ``-q``, ``-v``, ``-C`` mean what they mean there.  Errors are one ``ERROR: …`` line on
stderr and a non-zero exit status; ``--json`` prints one JSON object on stdout.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import warnings

from .errors import INTERRUPTED, on_interrupt


def _as_command() -> bool:
    """Whether this process is the ``distsvm`` command (its script, ``python -m distsvm``),
    not a program that calls :func:`main` (which keeps its own SIGINT handling)."""
    return (getattr(sys.modules.get("__main__"), "__file__", None) or "").endswith(
        ("/distsvm", "/distsvm/__main__.py"))


def _interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C: a KeyboardInterrupt, or any error raised once the
    command's handler ran (:data:`INTERRUPTED`), such as the ImportError that numba's C
    extension raises for an import the interrupt cut short ("numba._devicearray failed to
    import", seen 0.7 s into a pipeline run)."""
    return isinstance(exc, KeyboardInterrupt) or INTERRUPTED.is_set()


def _exit_interrupted() -> None:
    """End the interrupted command now, status 130, its one line written: the interpreter's
    own exit (and unwinding half-done imports) could still end it by SIGINT, status -2, where
    an interrupt escaped code the interpreter ran itself (measured: 8 pipeline runs in 40
    interrupted 0.5-1.1 s in at load 4, though SIGINT was ignored by then)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


if _as_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, on_interrupt)  # from the start: quiet before main runs

try:  # these imports take a second (numpy, zarr): a Ctrl-C meanwhile is one line too
    from . import arguments, params
    from .arguments import EXIT_USAGE, storage_options
    from .errors import (
        LOG_FORMAT,
        ClusterError,
        MissingDependencyError,
        UsageError,
        message,
        print_error,
        quiet_interrupt,
    )
    from .params import DEFAULTS
    from .progress import Progress, now_iso
    from .solvers.registry import SOLVERS
except BaseException as exc:
    if _as_command() and _interrupt(exc):
        print("ERROR: interrupted", file=sys.stderr)
        _exit_interrupted()
    raise

EXIT_ERROR = 1
EXIT_LOCKED = 4  # another writer held the store's or the registry's lock (distsvm.storage.lock)
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT), as a shell reports it


def open_dataset(url, storage_options=None):
    """:func:`distsvm.storage.open_dataset`, imported when first used: zarr's import takes
    a second or two, during which a Ctrl-C would be a traceback (:func:`main`)."""
    from distsvm.storage import open_dataset as open_

    return open_(url, storage_options)


def _workers(a, store) -> int | None:
    """The worker count of a job on ``store``: ``--workers``, or None (the in-process
    cluster) for a store that fits well in memory (:func:`distsvm.cluster.workers_for`)."""
    from .cluster import workers_for

    return workers_for(store.meta, a.scheduler, a.workers, getattr(a, "parallel", None))


def _ingest(a, progress):
    from .ingest import DEFAULT_BLOCK_MB, ingest
    from .jobs import client_for

    if a.append:
        return _append(a, progress)
    kwargs = dict(dtype=a.dtype, index_base=0 if a.zero_based else 1, shuffle=not a.no_shuffle,
                  seed=a.seed, block_rows=a.block_rows,
                  block_mb=None if a.block_rows else (a.block_mb or DEFAULT_BLOCK_MB),
                  n_features=a.n_features, overwrite=a.overwrite, storage_options=storage_options(a),
                  progress=progress, sample_weight=a.weights, regression=a.regression,
                  lock_timeout=a.lock_timeout, compression=a.compression,
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
    """``ingest --append``: one partition file appended as a pipeline run appends
    (:func:`distsvm.pipeline.append`)."""
    from .jobs import client_for
    from .pipeline import append_partition

    given = [flag for flag, on in (("--overwrite", a.overwrite), ("--weights", a.weights),
                                   ("--columns", a.columns), ("--no-shuffle", a.no_shuffle),
                                   ("--dtype", a.dtype != "float32")) if on]
    if given:
        raise ValueError(f"distsvm ingest --append: {given[0]} does not apply (an append "
                         "takes the store's dtype, shuffles, and drops the column view)")
    options = {k: v for k, v in dict(block_rows=a.block_rows, block_mb=a.block_mb,
                                     zero_based=a.zero_based, n_features=a.n_features,
                                     seed=a.seed, regression=a.regression,
                                     compression=a.compression).items()
               if v not in (None, False)}
    connect = contextlib.nullcontext if a.serial else lambda: client_for(
        a.scheduler, a.workers, progress=_announce(a, progress))
    d, added = append_partition(a.store, a.source, options, storage_options(a), a.lock_timeout,
                                progress, connect)
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
                  overwrite=a.overwrite, storage_options=storage_options(a), progress=progress,
                  compression=a.compression)
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

    d = open_dataset(a.store, storage_options(a))
    if a.serial:
        cm = _build_columns(d, a, None, progress)
    else:
        with client_for(a.scheduler, a.workers, progress=_announce(a, progress)) as c:
            cm = _build_columns(d, a, c, progress)
    return {"store": a.store, "n_column_blocks": len(cm.blocks), "passes": cm.passes,
            "memory_bytes": cm.memory_bytes}


def _info(a):
    from .info import show

    show(a.store, storage_options(a), verify=not a.no_verify, as_json=a.json)


# How the command line names what -s sets, for the message of a contradiction.
TYPE_FLAGS = {"type": "-s", "solver": "--solver", "loss": "--loss"}


# anytime training's summary keys (issue 31): why it stopped, the kept round, its gap, its model
ANYTIME_KEYS = ("stopped_by", "best_round", "kept_duality_gap", "kept_model")


def _train(a, progress):
    from .jobs import train
    from .model import save_model

    kwargs = params.with_type(arguments.given(a), a.liblinear_type, TYPE_FLAGS,
                              lambda name: name.replace("_", "-"))
    spec = SOLVERS.get(kwargs.setdefault("solver", DEFAULTS.solver))  # None: "auto", or refused
    kwargs.setdefault("loss", spec.default_loss if spec else DEFAULTS.loss)
    if spec is not None and spec.intercept:
        _intercept(a, spec, kwargs)
    elif a.no_bias:
        raise ValueError("--no-bias is an option of --solver "
                         + " and ".join(s.cli_name for s in SOLVERS.values() if s.intercept))
    store = _store(a, progress)
    folds = arguments.given(a, params.Folds)
    _check_training(kwargs, folds, store)
    where = dict(scheduler=a.scheduler, n_workers=_workers(a, store))
    if folds.get("find_c") or "n_folds" in folds:
        return _select(a, progress, kwargs, folds, store, where)
    if a.model is None:
        raise ValueError("distsvm train: the MODEL path is required (except with -v or -C)")
    model = train(store, progress=progress, owner="distsvm train", **where, **kwargs)
    save_model(model, a.model, storage_options(a))
    if a.run_dir:
        from .report import write_summary

        write_summary(a.run_dir, model, a.model)
    s = model.summary
    gap = s["duality_gap"]  # NaN without a dual; SVM-ALM's certificate is its gradient norm
    detail = (f"duality gap {gap:.3g}, " if gap == gap else
              f"|grad| {s['grad_norm']:.3g}, {s['passes']} passes, " if "passes" in s else "")
    if "nnz" in s:  # an L1-regularized model's sparsity
        detail += f"{s['nnz']} of {s['n_weights']} weights non-zero, "
    if "stopped_by" in s and s["stopped_by"] not in ("eps", "gap"):  # anytime training
        kept = f" (its {s['kept_model']})" if "kept_model" in s else ""
        detail += f"stopped by {s['stopped_by']}, " + (
            f"best round {s['best_round']}{kept}, the model's validation {s['validation_metric']} "
            f"{s['validation_' + s['validation_metric']]:.6g}, " if "best_round" in s else "")
    progress.note(f"train: {s['rounds']} rounds, primal {s['primal_objective']:.8g}, "
                  f"{detail}{s['train_seconds']:.2f}s; model written to {a.model}")
    keys = ("rounds", "converged", "primal_objective", "dual_objective", "duality_gap",
            *(k for k in ("grad_norm", "passes", "rho", "nnz", "n_weights") if k in s),
            *(k for k in s if k in ANYTIME_KEYS or k.startswith("validation_")),
            "train_seconds", "n_rows",
            "n_features")
    options = {k: model.params[k] for k in ("p",) if k in model.params}
    ranking = ({"ranks": list(model.classes), "thresholds": list(model.thresholds),
                **{k: s[k] for k in s if k.startswith("train_") and k != "train_seconds"}}
               if model.is_ranking else {})
    return {"solver": model.solver, "loss": model.loss, "C": model.params["C"],
            "eps": model.params["eps"], "bias": model.bias, **options, "model": a.model,
            **{k: (None if s[k] != s[k] else s[k]) for k in keys}, **ranking}


def _store(a, progress):
    """The store train or predict names, or its data file's, ingested or reused
    (:mod:`distsvm.sources`)."""
    from .jobs import client_for
    from .sources import dataset

    return dataset(a.store, cache_dir=a.cache_dir, label=a.label,
                   storage_options=storage_options(a), lock_timeout=a.lock_timeout,
                   progress=progress, owner=a.command,
                   connect=lambda: client_for(a.scheduler, a.workers,
                                              progress=_announce(a, progress)))


def _check_training(kwargs: dict, folds: dict, store) -> None:
    """The training parameters checked as :func:`distsvm.jobs.train` will check them, for
    the solver that will train (a fold's, a C search's), before a cluster starts
    (:func:`distsvm.params.check_kwargs`); UsageError (exit 2) otherwise."""
    from .selection import for_folds

    if folds.get("find_c") or "n_folds" in folds:
        kwargs, _ = for_folds(kwargs, "distsvm train")
    if folds.get("find_c"):
        kwargs = {k: v for k, v in kwargs.items() if k != "C"}  # -c with -C: the search's start
    try:
        params.check_kwargs("distsvm train", kwargs, store)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc


def _select(a, progress, kwargs: dict, folds: dict, store, where: dict):
    """``train -v N`` (cross-validation) and ``-C`` (C search), printed in LIBLINEAR's words
    on stdout (stderr with --json); no model is written, as LIBLINEAR's train."""
    from .selection import SEARCH_TYPES, cross_validate, find_c

    if a.model is not None:
        raise ValueError("distsvm train: -v and -C write no model; drop the MODEL argument")
    out = sys.stderr if a.json else sys.stdout
    n_folds, search = folds.pop("n_folds", None), folds.pop("find_c", False)
    if search:
        if a.liblinear_type not in SEARCH_TYPES.values():
            raise ValueError("-C (the C search) is available for -s 0 and -s 2 only "
                             "(LIBLINEAR's also searches C and p for -s 11; not here)")
        result = find_c(store, 5 if n_folds is None else n_folds, start_C=kwargs.pop("C", None),
                        progress=progress, **folds, **where, **kwargs)
        print(f"Best C = {result['best_C']:g}  CV accuracy = {100 * result['accuracy']:g}%",
              file=out)
        return result
    result = cross_validate(store, n_folds, progress=progress, **folds, **where, **kwargs)
    if "mean_squared_error" in result:  # a regression store: LIBLINEAR's train.c lines
        print(f"Cross Validation Mean squared error = {result['mean_squared_error']:g}\n"
              "Cross Validation Squared correlation coefficient = "
              f"{result['squared_correlation']:g}", file=out)
        return result
    print(f"Cross Validation Accuracy = {100 * result['accuracy']:g}%", file=out)
    return result


def _intercept(a, spec, kwargs: dict) -> None:
    """The bias of a solver that fits an unregularized intercept (SVM-ALM), on by default
    (the paper's problem): LIBLINEAR's -B (a regularized bias feature) is refused."""
    if kwargs.get("bias", DEFAULTS.bias) != DEFAULTS.bias:
        raise ValueError(f"--solver {spec.cli_name} fits an unregularized intercept; -B does "
                         "not apply (use --no-bias to fit none)")
    kwargs["bias"] = -1.0 if a.no_bias else 1.0


def _predict(a, progress):
    from .model import load_model
    from .prediction import check_features, check_task, predict

    model = load_model(a.model, storage_options(a))
    store = _store(a, progress)
    check_task(model, store)  # a model of the other task is an error before any warning
    check_features(model, store, (a.model, a.store), a.strict)
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
        export_liblinear(load_model(a.model, storage_options(a)), a.liblinear_model, storage_options(a))
    else:
        save_model(import_liblinear(a.liblinear_model, storage_options(a)), a.model, storage_options(a))


def _run(a, progress):
    from . import spec

    if a.command == "resume":
        return spec.resume(a.run, progress=progress, lock_timeout=a.lock_timeout)
    return spec.run(spec.load_spec(a.spec), run_id=a.run_id, progress=progress,
                    lock_timeout=a.lock_timeout)


def _registry(a):
    from . import registry

    if a.action == "list":  # every sound model listed, then the first damaged one named
        out, damaged = registry.listing(a.registry, a.name)
        if not a.json:
            if not out and not damaged:
                print(f"{a.registry}: no models")
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


def main(argv=None) -> int:
    """The ``distsvm`` command; its exit status.  Ctrl-C at any moment (its imports, the
    parsing, a job, a pipeline run) is one ``ERROR: interrupted`` line and exit status 130,
    also where Python swallowed the KeyboardInterrupt (raised inside a callback: the
    command stops at its next :func:`distsvm.errors.check_interrupted`).  Called in a
    process (a script's, a test's), it leaves the process's error format as it found it."""
    previous = LOG_FORMAT["format"]
    try:
        return _command(argv)
    finally:
        LOG_FORMAT["format"] = previous


def _command(argv) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    LOG_FORMAT["format"] = next((v for k, v in zip(argv, argv[1:]) if k == "--log-format"),
                                next((t.split("=", 1)[1] for t in argv
                                      if t.startswith("--log-format=")), "text"))
    try:
        with quiet_interrupt():  # from the start: an interrupt swallowed anywhere is seen
            code = _main(argv)
    except BaseException as exc:
        if not _interrupt(exc):
            raise
        code = EXIT_INTERRUPTED
    if _as_command():  # decided: a Ctrl-C while the process exits (its clusters close, the
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # interpreter finalizes) changes nothing
    if code == EXIT_INTERRUPTED or INTERRUPTED.is_set():
        print_error("interrupted")
        if _as_command():
            _exit_interrupted()
        return EXIT_INTERRUPTED
    return code


def _main(argv) -> int:
    a = arguments.parse(argv)
    try:
        arguments.check(a)
    except ValueError as exc:
        print_error(message(exc))
        return EXIT_USAGE
    progress = Progress(quiet=getattr(a, "quiet", False),
                        log_format=getattr(a, "log_format", "text"),
                        run_dir=getattr(a, "run_dir", None) if a.command == "train" else None,
                        verbose=getattr(a, "verbose", False))
    # a warning is one WARNING line, or a JSON line with JSON progress (neither silenced by -q)
    warnings.showwarning = lambda message, *_, **__: print(json.dumps(
        {"time": now_iso(), "event": "warning", "message": str(message)}) if progress.json
        else f"WARNING: {message}", file=sys.stderr)
    if hasattr(a, "log_level"):  # a command that may start or join a Dask cluster
        from . import cluster

        cluster.set_log_level(logging.getLevelName(a.log_level.upper()) if a.log_level
                              else cluster.QUIET)
    if a.command == "pipeline":  # exit codes of its own, for schedulers (docs/pipeline.md)
        from . import pipeline

        with quiet_interrupt():
            code, result = pipeline.main(a.spec, progress, a.lock_timeout, a.ds)
        if a.json and result is not None:
            print(json.dumps(result))
        return code
    from distsvm.storage.errors import StorageError
    from distsvm.storage.lock import LockHeldError

    try:
        with quiet_interrupt(), _tls(a):
            _cluster_setup(a)
            result = _dispatch(a, progress)
    except (StorageError, ValueError, OSError, ClusterError, MissingDependencyError) as exc:
        if INTERRUPTED.is_set():  # raised while unwinding from a Ctrl-C: main() says so
            return EXIT_INTERRUPTED
        if isinstance(exc, LockHeldError):
            print_error(str(exc))
            return EXIT_LOCKED
        print_error(arguments.os_error(a, exc) if isinstance(exc, OSError) else message(exc))
        from .spec import SpecError

        return EXIT_USAGE if isinstance(exc, (SpecError, UsageError)) else EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED  # main() says so
    if getattr(a, "json", False) and result is not None:
        from .model import json_default

        print(json.dumps(result, default=json_default))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
