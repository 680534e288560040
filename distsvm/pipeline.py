"""The scheduled batch pipeline: ``distsvm pipeline run PIPELINE.yaml``.

One run, for one interval (typically from cron, a systemd timer or an Airflow DAG,
see ``deploy/pipeline/``):

1. **Ingest**: each partition file (LIBSVM text) not yet in the dataset is ingested
   into a temporary store and its row blocks appended to the dataset
   (:func:`distsvm.storage.dataset.append`); the dataset's ledger (``source["appended"]``)
   records every partition file's name, path and SHA-256 (:func:`ingested`).  A file
   already in the ledger (same path, same content) is skipped; one whose path is there
   with other content is refused (exit 2); a file of a known name at another path is a new
   partition.  The first partition creates the dataset.
2. **Train** a candidate with the spec's solver: warm-started from the current
   model's w where :func:`distsvm.jobs.train` takes ``warm_start`` for that solver,
   otherwise a cold start (the log says which).
3. **Evaluate** the candidate and the current model on the holdout store (now, on the
   same rows), and **publish** the candidate as a new immutable registry version
   whose record holds both accuracies and the decision.
4. **Promote** it (``current``) only if its holdout accuracy is not worse than the
   current model's; otherwise say why and exit 3.

Idempotence: re-running an interval changes nothing.  Its partitions are in the
ledger, so nothing is appended; and the latest version, trained on this very dataset
content (its lineage fingerprint) with these parameters and judged on this holdout,
already holds the decision, which is reported again (and a promotion that a killed
run decided but did not make is made) without training.

One run at a time: a run checks the whole spec first (:func:`check`), then holds the
dataset's lock (:mod:`distsvm.storage.lock`) until it ends; a second run waits for it (up to
``lock_timeout``) and then finds the first one's partitions in the ledger.

Exit codes (:data:`EXIT_CODES`): 0 promoted, or nothing to do; 3 candidate not
promoted (worse on the holdout); 2 bad input (spec, partition file, store); 4 another
run held the dataset's lock past the timeout; 1 any other failure (cluster, storage).
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile

from distsvm.storage import StorageError, StoreNotFoundError, open_dataset
from distsvm.storage.checkpoint import file_sha256
from distsvm.storage.dataset import append
from distsvm.storage.errors import InputDataError, InputFormatError
from distsvm.storage.leftovers import remove_leftovers
from distsvm.storage.lock import DEFAULT_TIMEOUT as DEFAULT_LOCK_TIMEOUT
from distsvm.storage.lock import Lock, LockHeldError
from distsvm.storage.paths import canonical, resolve

from . import jobs, params, registry
from .errors import (
    INTERRUPTED,
    ClusterError,
    MissingDependencyError,
    check_interrupted,
    message,
    print_error,
)
from .prediction import predict
from .progress import Progress
from .solvers import registry as solvers
from .spec import (
    SpecError,
    check_cluster,
    check_settings,
    check_solver_section,
    check_store,
    cluster_client,
    read_document,
    train_params,
    validate,
)

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_NOT_PROMOTED, EXIT_LOCKED = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130  # Ctrl-C: what was written is whole or is a leftover the next run removes
EXIT_CODES = {EXIT_OK: "promoted, or nothing to do", EXIT_FAILURE: "failure",
              EXIT_BAD_INPUT: "bad input", EXIT_NOT_PROMOTED: "candidate not promoted",
              EXIT_LOCKED: "another run holds the dataset's lock",
              EXIT_INTERRUPTED: "interrupted (Ctrl-C)"}


DS = "{{ ds }}"  # the interval's date in a spec's strings (Airflow's name), as YYYY-MM-DD


def load_pipeline(path, ds: str | None = None) -> dict:
    """Read and validate a pipeline spec, ``{{ ds }}`` in its strings replaced by the date
    ``ds`` (``pipeline run --ds``; default today, as ``date +%F``)."""
    import datetime

    path = os.fspath(path)
    ds = ds or datetime.date.today().isoformat()
    spec = validate(expand(read_document(path), ds), "pipeline", path)
    spec["source"] = os.path.abspath(path)
    return spec


def expand(doc, ds: str):
    """``doc`` with ``{{ ds }}`` (or ``{{ds}}``) in every string replaced by ``ds``."""
    if isinstance(doc, str):
        return doc.replace(DS, ds).replace("{{ds}}", ds)
    if isinstance(doc, list):
        return [expand(v, ds) for v in doc]
    if isinstance(doc, dict):
        return {k: expand(v, ds) for k, v in doc.items()}
    return doc


def _partitions(spec: dict) -> list[str]:
    patterns = spec["partitions"]
    patterns = [patterns] if isinstance(patterns, str) else patterns
    out = []
    for p in patterns:
        found = sorted(os.path.abspath(f) for f in glob.glob(os.path.expanduser(p)))
        if not found:
            raise SpecError(f"{spec['source']}: key 'partitions': no file matches {p!r}")
        out += [f for f in found if f not in out]
    return out


def _ledger(dataset) -> list[dict]:
    return list(dataset.meta.source.get("appended", [])) if dataset is not None else []


def ingested(ledger: list[dict], record: dict) -> dict | None:
    """The ledger's record of the partition file ``record`` describes, keyed by its path:
    the record of that path (a record of an older store, without one: of that name and
    content); None for a new partition, which a file of a name seen before but at another
    path is (``/incoming/{{ ds }}/part-0.svm`` every day)."""
    for r in ledger:
        if "path" in r and r["path"] == record["path"]:
            return r
        if "path" not in r and (r.get("partition"), r.get("sha256")) == (
                record["partition"], record["sha256"]):
            return r
    return None


def ingest_partitions(spec: dict, paths: list[str], client, progress: Progress,
                      lock_timeout: float | None = None):
    """Step 1: append the partitions ``paths`` not yet in the dataset, holding its lock
    (re-entered where the caller holds it; else waiting up to ``lock_timeout`` seconds);
    return (the dataset, the paths appended)."""
    from .ingest import DEFAULT_BLOCK_MB, ingest

    url, so = resolve(spec["dataset"]), spec.get("storage_options")
    opts = spec.get("ingest", {})
    kwargs = dict(index_base=0 if opts.get("zero_based") else 1, seed=opts.get("seed", 0),
                  block_rows=opts.get("block_rows"),
                  block_mb=None if opts.get("block_rows") else opts.get("block_mb",
                                                                         DEFAULT_BLOCK_MB),
                  n_features=opts.get("n_features"), client=client, progress=progress,
                  regression=bool(opts.get("regression", False)),
                  compression=opts.get("compression", "lz4"))
    try:
        dataset = open_dataset(url, so)
    except StoreNotFoundError:
        dataset = None
    added = []
    local = "://" not in url
    for path in paths:
        name, digest = os.path.basename(path), file_sha256(path)
        record = {"partition": name, "path": os.path.realpath(path), "sha256": digest}
        ledger = _ledger(dataset)
        seen = ingested(ledger, record)
        if seen is not None:
            if seen["sha256"] != digest:
                raise InputDataError(f"{path}: partition {name} was ingested into {url} "
                                     f"from this path with SHA-256 {seen['sha256']}, this "
                                     f"file now has {digest}; partitions are immutable "
                                     "(write changed rows to a new file)")
            progress.note(f"pipeline: {path} already ingested, skipped")
            continue
        twin = next((r for r in ledger if r.get("sha256") == digest), None)
        if twin is not None:  # appended all the same: another path is another partition
            progress.note(f"pipeline: {path} has the content of {twin.get('path', name)}, "
                          "ingested before; appended as a new partition")
        with tempfile.TemporaryDirectory(  # beside a local dataset: same disk, room for it
                prefix=f".{os.path.basename(os.path.abspath(url))}.part-",  # leftovers.py
                dir=os.path.dirname(os.path.abspath(url)) if local else None,
                # after Ctrl-C the ingest's writers may still be adding files to it: what
                # stays is the next run's leftover (leftovers.py), not a second error line
                ignore_cleanup_errors=True) as tmp:
            part = ingest(path, os.path.join(tmp, "part.zarr"), **kwargs,
                          dtype=dataset.meta.dtype if dataset is not None else "float32")
            if dataset is None:  # the first partition makes the dataset
                dataset = _copy_store(part, url, record, so)
            else:
                dataset = append(url, part, record, so, lock_timeout)
        added.append(path)  # by path: names repeat (part-0.svm of every day)
        progress.note(f"pipeline: {path} ({part.meta.n_rows} rows) appended to {url}: now "
                      f"{dataset.meta.n_rows} rows in {len(dataset.meta.blocks)} blocks")
    return dataset, added


def append_partition(store: str, source: str, options: dict, storage_options: dict | None,
                     lock_timeout: float | None, progress: Progress, connect):
    """``distsvm ingest --append``: the partition file ``source`` appended to ``store`` as a
    pipeline run appends it (:func:`ingest_partitions`, ``options`` a spec's ``ingest``),
    holding the store's lock throughout (waiting up to ``lock_timeout``, default 60 s)
    after removing what killed writers left; ``connect()`` gives the client (a context,
    entered once the lock is held).  Returns (the dataset, the paths appended)."""
    timeout = DEFAULT_LOCK_TIMEOUT if lock_timeout is None else lock_timeout
    spec = {"dataset": store, "storage_options": storage_options, "ingest": options}
    with Lock(store, storage_options, what=store, progress=progress, timeout=timeout):
        remove_leftovers(store, storage_options, progress)
        with connect() as client:
            return ingest_partitions(spec, [source], client, progress, timeout)


def _copy_store(part, url: str, record: dict, storage_options):
    """The first partition's store becomes the dataset, committed whole."""
    from distsvm.storage import dataset as ds

    stage = ds.prepare(url, overwrite=False, storage_options=storage_options)
    try:
        compression = ds.compression_of(part)  # the spec's, which the part was ingested with
        infos = [ds.write_row_block(stage, info.name, part.read_block(i), storage_options,
                                    compression=compression)
                 for i, info in enumerate(part.meta.blocks)]
        meta = ds.dataclasses.replace(part.meta, blocks=tuple(infos),
                                      source={**part.meta.source, "appended": [record]})
        return ds.commit(stage, url, meta, overwrite=False, storage_options=storage_options)
    except BaseException:
        ds.abort(stage, url, storage_options)
        raise


def check(spec: dict) -> list[str]:
    """Check the whole spec before anything is created or a cluster connected to: its
    values (:func:`distsvm.spec.check_settings`: ingest, lock timeout, cluster, storage
    options, the dataset and registry paths it writes), a holdout that is not the dataset
    itself (however spelled), the partitions (returned), the holdout store, the solver
    section's values (against the dataset if it exists), the cluster's files.  SpecError
    naming the key otherwise."""
    where, so = spec["source"], spec.get("storage_options")
    opts = spec.get("ingest", {})
    check_settings(spec, where, {"ingest": {k: opts.get(k) for k in (
                                     "block_rows", "block_mb", "n_features", "seed",
                                     "compression")},
                                 "": {"lock_timeout": spec.get("lock_timeout")}},
                   urls=[spec["dataset"], spec["holdout"], spec["registry"]],
                   outputs=[("dataset", spec["dataset"], True),
                            ("registry", spec["registry"], True),  # and the model's folder
                            ("registry", f"{spec['registry'].rstrip('/')}/{spec['name']}", True)])
    if canonical(resolve(spec["holdout"])) == canonical(resolve(spec["dataset"])):
        raise SpecError(f"{where}: key 'holdout': {spec['holdout']} is the dataset itself "
                        f"({spec['dataset']}): its partitions would be appended to the rows "
                        "that judge them; give a store of other rows")
    paths = _partitions(spec)
    check_store(spec["holdout"], where, "holdout", so)
    try:
        dataset = open_dataset(spec["dataset"], so)
    except StoreNotFoundError:
        dataset = None
    except StorageError as exc:
        raise SpecError(f"{where}: key 'dataset': {exc}") from exc
    check_solver_section(spec, where, dataset,
                         regression=bool(spec.get("ingest", {}).get("regression", False)))
    check_cluster(spec.get("cluster", {}), where)
    if "mlflow" in spec:  # its package and URI
        from . import mlflow_registry

        mlflow_registry.check(spec["mlflow"], where, spec["name"], SpecError)
    return paths


def run(spec: dict, progress: Progress | None = None, client=None,
        lock_timeout: float | None = None) -> tuple[int, dict]:
    """Run one interval of a validated pipeline spec, on ``client`` or the spec's cluster;
    return (exit code, summary).  The run holds the dataset's lock (:mod:`distsvm.storage.lock`)
    throughout, waiting up to ``lock_timeout`` seconds (default: the spec's
    ``lock_timeout``, else 60) for another run: :class:`distsvm.storage.lock.LockHeldError`."""
    progress = progress or Progress(quiet=True)
    paths = check(spec)  # bad input fails before a cluster starts or anything is written
    if lock_timeout is None:
        lock_timeout = spec.get("lock_timeout", DEFAULT_LOCK_TIMEOUT)
    with Lock(spec["dataset"], spec.get("storage_options"), timeout=lock_timeout,
              what=f"pipeline {spec['name']}: dataset {spec['dataset']}",
              progress=progress) as lock:
        remove_leftovers(spec["dataset"], spec.get("storage_options"), progress)
        code, summary = _run(spec, paths, progress, client, lock, lock_timeout)
        if "mlflow" in spec:  # after the built-in registry: an MLflow failure loses nothing
            from . import mlflow_registry

            summary["mlflow"] = mlflow_registry.publish_pipeline(spec, summary, progress)
        return code, summary


def _run(spec, paths, progress, client, lock, lock_timeout) -> tuple[int, dict]:
    reg, name, so = spec["registry"], spec["name"], spec.get("storage_options")
    settings = dict(spec.get("solver", {}))  # as written: the lineage's
    kwargs = train_params(spec)
    with (contextlib.nullcontext(client) if client is not None
          else cluster_client(spec.get("cluster", {}), spec["source"], progress)) as c:
        dataset, added = ingest_partitions(spec, paths, c, progress, lock_timeout)
        fp = registry.fingerprint(dataset)
        cur = registry.current_version(reg, name, so)
        done = registry.versions(reg, name, so)
        if done:
            last = registry.show(reg, name, done[-1], so)
            if (last["lineage"]["dataset_fingerprint"], last["lineage"]["params"],
                    last["metrics"].get("holdout")) == (fp, settings, spec["holdout"]):
                return _decided(reg, name, last, cur, so, progress)
        holdout = open_dataset(spec["holdout"], so)
        current = registry.load(reg, name, storage_options=so) if cur is not None else None
        warm = {}
        if current is not None:
            solver = kwargs.get("solver", params.DEFAULTS.solver)
            if current.w.ndim != 1:  # warm_start is one vector: binary problems only
                progress.note(f"pipeline: {name} v{cur} is one-vs-rest ({len(current.classes)} "
                              "classes), which takes no warm start; cold start")
            elif solver in solvers.SOLVERS and params.takes(solver, "warm_start"):
                warm["warm_start"] = current.weights_for(dataset.meta.n_features)
                progress.note(f"pipeline: warm start from {name} v{cur}")
            else:
                progress.note(f"pipeline: solver {solver} takes no warm start; cold start")
        model = jobs.train(dataset, client=c, progress=progress,
                           owner=f"{spec['source']}: solver", **kwargs, **warm)
        # a regression model is compared by its holdout mean squared error (lower is better)
        what = "mean_squared_error" if model.is_regression else "accuracy"
        acc = predict(holdout, model, client=c)[what]
        cur_acc = predict(holdout, current, client=c)[what] if current else None
    better = cur_acc is None or (acc <= cur_acc if model.is_regression else acc >= cur_acc)
    sign = ("<=" if better else ">") if model.is_regression else (">=" if better else "<")
    reason = ("no current model" if cur_acc is None else
              f"holdout {what.replace('_', ' ')} {acc:.6f} {sign} current v{cur}'s "
              f"{cur_acc:.6f}")
    metrics = {"holdout": spec["holdout"], f"holdout_{what}": acc,
               "current_version": cur, f"current_holdout_{what}": cur_acc,
               "promote": better, "reason": reason, "partitions_added": added}
    lock.check()  # still this run's: no other run took the dataset over meanwhile
    check_interrupted()  # a Ctrl-C that Python swallowed: no version published after it
    version = registry.publish(reg, name, model, metrics=metrics, storage_options=so,
                               lineage=registry.lineage(dataset, settings),
                               lock_timeout=lock_timeout)
    progress.note(f"pipeline: candidate {name} v{version}: {reason}")
    return _decided(reg, name, registry.show(reg, name, version, so), cur, so, progress)


def _decided(reg, name, rec, cur, so, progress) -> tuple[int, dict]:
    """Act on a published candidate's decision (again, on a re-run)."""
    v, m = rec["version"], rec["metrics"]
    summary = {"version": v, **{k: m[k] for k in ("holdout_accuracy",
                                                   "holdout_mean_squared_error") if k in m},
               "reason": m["reason"]}
    if m["promote"]:
        if cur != v:
            check_interrupted()
            registry.promote(reg, name, v, so)
            progress.note(f"pipeline: promoted {name} v{v} to current")
        else:
            progress.note(f"pipeline: nothing new; {name} v{v} is current")
        return EXIT_OK, {**summary, "promoted": True}
    progress.note(f"pipeline: NOT promoted: {name} v{v} is worse than the current model "
                  f"({m['reason']}); current stays v{cur}")
    return EXIT_NOT_PROMOTED, {**summary, "promoted": False}


def main(path: str, progress: Progress, lock_timeout: float | None = None,
         ds: str | None = None) -> tuple[int, dict | None]:
    """The CLI's ``pipeline run``: (exit code, summary or None); errors printed (but
    an interruption's, 130, which :func:`distsvm.cli.main` prints)."""
    codes = ((LockHeldError, EXIT_LOCKED),
             ((SpecError, InputDataError, InputFormatError, StoreNotFoundError,
               registry.RegistryError), EXIT_BAD_INPUT),
             ((StorageError, OSError, ClusterError, MissingDependencyError), EXIT_FAILURE),
             (ValueError, EXIT_BAD_INPUT))  # ValueError: the solver's parameters (jobs.train)
    try:
        return run(load_pipeline(path, ds), progress, lock_timeout=lock_timeout)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED, None  # the CLI says so (distsvm.cli.main)
    except (StorageError, OSError, ClusterError, MissingDependencyError, ValueError) as exc:
        if INTERRUPTED.is_set():  # raised while unwinding from a Ctrl-C: its line is the CLI's
            return EXIT_INTERRUPTED, None
        print_error(message(exc))
        return next(code for kind, code in codes if isinstance(exc, kind)), None
