"""Predictions of a store: decision values on the workers that hold its blocks, the labels
they mean, probabilities, LIBLINEAR's metrics, and the output — text, Parquet or Zarr.

Every prediction of a store — the CLI's ``predict``, a job spec's test store, the pipeline's
holdout, a cross-validation fold, an estimator's ``score`` — runs :func:`predict`: one task
a block, on the worker that holds it (:func:`distsvm.cluster.plan`, its block cache), computes
the block's decision values (:func:`distsvm.workers.blocks.block_decisions`), their labels by the
model's one rule (:meth:`distsvm.model.Model.labels`), probabilities with ``-b 1``
(:func:`distsvm.model.probabilities`) and the block's share of the metrics.  The
coordinator then adds the metrics up and writes a text output block by block in the
store's row order; a Parquet or Zarr output is written by tasks from the blocks' results,
never gathered.  What is written appears whole or not at all.  In-memory matrices and dask
collections are predicted by the model itself and :mod:`distsvm.dask_io`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import os
import uuid
import warnings

import numpy as np

import distsvm.workers.blocks
from distsvm.storage import Dataset
from distsvm.storage.checkpoint import atomic_file
from distsvm.storage.dataset import read_block_positions, source_order
from distsvm.storage.errors import listed

from . import cluster, jobs
from .errors import need_tabular
from .model import Model, liblinear_label_order, probabilities
from .solvers import cutting_plane

OUTPUT_SUFFIXES = (".parquet", ".zarr")


def output_kind(path) -> str | None:
    """"parquet" or "zarr" for an output path with that suffix, else None (text output)."""
    name = os.fspath(path).rstrip("/").lower()
    return next((s[1:] for s in OUTPUT_SUFFIXES if name.endswith(s)), None)


def for_model(model: Model, dataset: Dataset) -> Dataset:
    """The store as ``model`` predicts it: a regression model reads a classification
    store's labels as its targets (:meth:`~distsvm.storage.Dataset.as_regression`)."""
    if model.is_regression and not dataset.is_subset and dataset.meta.classes:
        return dataset.as_regression()
    return dataset


def check_task(model: Model, dataset: Dataset) -> None:
    """A regression model predicts any store (its labels read as numbers, :func:`for_model`)
    and a classifier a store of classes: one ``ValueError`` line otherwise (the error and
    accuracy would compare unlike things)."""
    dataset = for_model(model, dataset)
    if model.is_regression != dataset.meta.regression:
        what, wants = (("regression", "regression store (ingest --regression)")
                       if model.is_regression else ("classification", "store of classes"))
        has = ("real-valued targets" if dataset.meta.regression
               else f"class labels {listed(dataset.meta.classes)}")
        raise ValueError(f"{dataset.url}: a {what} model ({model.loss}) predicts a {wants}; "
                         f"this store has {has}")


def check_features(model: Model, dataset: Dataset, names: tuple[str, str],
                   strict: bool = False) -> None:
    """A model trained on another feature count than the store's: the prediction goes on
    by LIBLINEAR's rule (a feature the model has not seen weighs 0, one it has that the
    store lacks is absent), with a warning naming them (``names``: the model's, the
    store's); ``strict`` makes it an error."""
    n_model, n_store = model.n_features, dataset.meta.n_features
    if n_model == n_store:
        return
    text = (f"the model {names[0]} has {n_model} features and the store {names[1]} "
            f"{n_store}: a different feature space? (")
    if strict:
        raise ValueError(text + "--strict: not predicting)")
    warnings.warn(text + "a feature only one of them has gets weight 0, as in LIBLINEAR; "
                  "--strict makes this an error)", stacklevel=2)


def regression_sums(pred, target) -> np.ndarray:
    """LIBLINEAR's sums for the regression metrics (predict.c): Σ(p − t)², Σp, Σt, Σp², Σt²,
    Σpt, in float64."""
    p, t = np.asarray(pred, np.float64), np.asarray(target, np.float64)
    return np.array([np.sum((p - t) ** 2), p.sum(), t.sum(), p @ p, t @ t, p @ t])


def regression_metrics(n: int, sums) -> dict:
    """``mean_squared_error`` and ``squared_correlation`` from :func:`regression_sums` over
    n rows, by LIBLINEAR's formulas (predict.c; train.c's cross-validation the same): the
    squared correlation is (nΣpt − ΣpΣt)² / ((nΣp² − (Σp)²)(nΣt² − (Σt)²)), NaN where a
    variance is 0 (LIBLINEAR prints nan or inf there)."""
    error, sp, st, spp, stt, spt = sums
    num = (n * spt - sp * st) ** 2
    den = (n * spp - sp * sp) * (n * stt - st * st)
    return {"mean_squared_error": float(error / max(1, n)),
            "squared_correlation": float(num / den) if den > 0 else float("nan")}


@dataclasses.dataclass(frozen=True)
class Columns:
    """What a block's task computes beside the decision values: the model's rule (the model
    without its weights, which go to the workers once), the store's class values, the
    names of the decision and probability columns, the probabilities' order (LIBLINEAR's
    labels) and, for a ranking model, each store class's rank."""

    rule: Model
    store_classes: tuple
    decision: tuple[str, ...]
    probability: tuple[str, ...]
    order: tuple[int, ...]
    ranks: tuple[int, ...] | None


def _columns(model: Model, dataset: Dataset, probability: bool) -> Columns:
    classes = np.asarray(model.classes)
    k = model.w.shape[0] if model.w.ndim == 2 else 0
    order = tuple(liblinear_label_order(model)) if probability else ()
    ranks = None
    if model.is_ranking:
        unknown = sorted(set(dataset.meta.classes) - set(model.classes))
        if unknown:
            raise ValueError(f"{dataset.url}: labels {listed(unknown)} are not ranks of the model "
                             f"(its ranks: {listed(model.classes)})")
        ranks = tuple(int(r) for r in np.searchsorted(classes, dataset.meta.classes))
    return Columns(rule=dataclasses.replace(model, w=np.zeros(0), params={}, summary={}),
                   store_classes=tuple(dataset.meta.classes),
                   decision=tuple(f"decision_{c:g}" for c in classes) if k else ("decision",),
                   probability=tuple(f"probability_{classes[j]:g}" for j in order),
                   order=order, ranks=ranks)


def block_predictions(url, info, w, columns: Columns, n_features: int, cache_bytes: int,
                      storage_options, probability: bool, decisions: bool = True,
                      positions: bool = False):
    """One block's predictions — a dict of float64 columns: ``label``, the decision values
    (with ``decisions``) and, with ``probability``, the probabilities; with ``positions``
    also ``row`` (int64), each row's position in the store's source — and its share of the
    metrics: (correct,) for classes, LIBLINEAR's six sums for a regression, (correct,
    scores, true ranks) for a ranking model.  Runs on the worker that holds the block."""
    model = columns.rule
    dv, truth = distsvm.workers.blocks.block_decisions(url, info, w, model.bias, n_features,
                                               cache_bytes, storage_options)
    if model.rho is not None:  # one-class: wᵀx − ρ, as LIBLINEAR's
        dv = dv - model.rho
    pred = model.labels(dv)
    if model.is_regression:  # truth: the targets
        stats = regression_sums(dv, truth)
    else:
        stats = np.array([np.sum(pred == np.asarray(columns.store_classes)[truth])], np.float64)
        if columns.ranks is not None:
            stats = (stats, dv, np.asarray(columns.ranks)[truth])
    out = {"label": np.asarray(pred, dtype=np.float64)}
    if positions:
        out["row"] = read_block_positions(url, info, storage_options)
    dv2 = dv.reshape(len(dv), -1)
    for j, name in enumerate(columns.decision if decisions else ()):
        out[name] = dv2[:, j]
    if probability:
        p = probabilities(dv)[:, list(columns.order)]
        for j, name in enumerate(columns.probability):
            out[name] = p[:, j]
    return out, stats


def predict(data, model: Model, *, scheduler: str | None = None, n_workers: int | None = None,
            client=None, output=None, probability: bool = False,
            plan: cluster.WorkerPlan | None = None) -> dict:
    """Predict every row of a dataset (or its URL); return its metrics, and write the
    predictions to ``output`` if given.

    The metrics: ``accuracy`` and ``n_rows``; a regression model's ``mean_squared_error``,
    ``squared_correlation`` and LIBLINEAR's ``regression_sums``; a ranking model's labels
    are ranks, ``accuracy`` is the rank accuracy and the mean absolute rank error and the
    pairwise ordering accuracy are added
    (:func:`distsvm.solvers.cutting_plane.ranking_metrics`; the scores of every row are
    then held on the coordinator, 12 bytes a row).  ``plan`` as :func:`distsvm.jobs.train`'s.

    ``output``, a text file, receives one predicted label per line in the order of the
    store's source (line i: the source's row i; the store's rows are shuffled, and their
    positions kept: the labels are held here, 8 bytes a row, 8·(K + 1) with
    ``probability``; a store that kept none and is not in its source's order is refused);
    with ``probability`` (a logistic model only, else ``ValueError``; LIBLINEAR's
    ``predict -b 1``), LIBLINEAR's format: a header ``labels l₁ … l_K`` and per row the label
    and the K probabilities in that order, the order of the model's LIBLINEAR export
    (binary: the class of positive decision values first).  An ``output`` ending in .parquet
    or .zarr (:func:`output_kind`) gets every row's label, decision values and (with
    ``probability``) probabilities — Parquet: a directory of one file per block,
    ``part.NNNNNN.parquet``, columns ``label``, ``decision`` or ``decision_<class>``,
    ``probability_<class>``; Zarr: a group of arrays ``label`` (n,), ``decision`` (n,) or
    (n, K), ``probability`` (n, K), the column labels in its attributes — written by tasks,
    in the store's row order, with each row's position in the source (``row``, int64: a
    column, an array) where the store kept them; not for a ranking model.
    """
    output = None if output is None else os.fspath(output)
    kind = None if output is None else output_kind(output)
    if kind == "parquet":
        need_tabular("writing Parquet")
    if probability:
        model.check_probability()
    if kind is not None and model.is_ranking:
        raise ValueError(f"{output}: a ranking model's predictions are written as text "
                         "(--output FILE without .parquet/.zarr)")
    dataset = for_model(model, jobs.as_dataset(data))
    meta = dataset.meta
    check_task(model, dataset)
    positions = output is not None and meta.positioned
    if output is not None and not meta.in_source_order:
        raise ValueError(f"{dataset.url}: the store's rows are shuffled and it kept no source "
                         f"positions (ingested before they were kept): --output {output} would "
                         "not line up with the source; ingest it again (or with --no-shuffle)")
    columns = _columns(model, dataset, probability)
    if kind is not None:
        import fsspec

        fs, path = fsspec.core.url_to_fs(output, **(dataset.storage_options or {}))
        if fs.exists(path):
            raise ValueError(f"{output}: exists; remove it or choose another output path")
    with jobs.client_for(scheduler, n_workers, client) as c:
        plan = plan or cluster.plan(c, len(meta.blocks), n_workers, dataset)
        w = c.scatter(model.weights_for(meta.n_features), broadcast=True, hash=False)
        futures = [c.submit(block_predictions, dataset.url, info, w, columns, meta.n_features,
                            plan.cache_bytes[plan.owners[b]], dataset.storage_options,
                            probability, kind is not None, positions, workers=[plan.owners[b]],
                            pure=False)
                   for b, info in enumerate(meta.blocks)]
        if kind is None:
            stats = _text(c, futures, plan, output, columns, probability,
                          (dataset.url, meta.n_rows) if positions else None)
        else:
            stats = _tables(c, futures, output, kind, columns, model,
                            [info.n_rows for info in meta.blocks], dataset.storage_options,
                            positions)
    return _metrics(model, meta.n_rows, stats, output if kind else None)


def _text(c, futures, plan, output, columns: Columns, probability: bool,
          positioned: tuple | None = None) -> list:
    """The blocks' metrics, gathered in block order (each block's result released once
    used), their labels (and probabilities) written to the text ``output`` if given: as
    they come for a store in its source's order, else (``positioned``: the store's URL and
    row count) held here and written in the order of the rows' source positions."""
    stats, held = [], []
    with atomic_file(output, "w") if output else contextlib.nullcontext() as out:
        if out is not None and probability:
            out.write("labels" + "".join(f" {columns.rule.classes[k]:g}"
                                         for k in columns.order) + "\n")

        def write(cols):
            if probability:
                p = np.column_stack([cols[n] for n in columns.probability])
                out.writelines(f"{label:g}" + "".join(f" {v:g}" for v in row) + "\n"
                               for label, row in zip(cols["label"], p))
            else:
                out.writelines(f"{label:g}\n" for label in cols["label"])

        for f in futures:
            [(cols, block)] = cluster.gather(c, [f], plan.workers)
            f.release()
            stats.append(block)
            if out is not None and positioned:
                held.append({k: v for k, v in cols.items()
                             if k in ("label", "row", *columns.probability)})
            elif out is not None:
                write(cols)
        if out is not None and positioned:
            order = np.argsort(source_order(*positioned[:1], [h["row"] for h in held],
                                            positioned[1]), kind="stable")
            names = ["label", *(columns.probability if probability else ())]
            write({n: np.concatenate([h[n] for h in held])[order] if held else np.zeros(0)
                   for n in names})
    return stats


def _tables(c, futures, output: str, kind: str, columns: Columns, model: Model, sizes,
            storage_options, positions: bool = False) -> list:
    """Write the blocks' predictions to a Parquet or Zarr ``output`` by tasks, whole or
    not at all (:func:`_whole`); return the blocks' metrics."""
    import dask

    parts = [dask.delayed(operator.itemgetter(0))(f) for f in futures]
    stats = [dask.delayed(operator.itemgetter(1))(f) for f in futures]
    names = ["label", *columns.decision, *columns.probability, *(["row"] if positions else [])]
    with _whole(output, storage_options) as target:
        if kind == "parquet":
            write = _parquet(parts, names, target, storage_options)
        else:
            write = _zarr(parts, sizes, columns.decision, columns.probability, target,
                          storage_options, {"decision": list(columns.decision),
                                            "probability": list(columns.probability),
                                            "classes": list(model.classes)}, positions)
        with warnings.catch_warnings():  # to_parquet's expression beside delayed blocks
            warnings.filterwarnings("ignore", message="Computing mixed collections")
            _, stats = c.compute([write, stats], sync=True)
    return stats


def _metrics(model: Model, n_rows: int, stats: list, output) -> dict:
    """The metrics of the blocks' ``stats`` (:func:`block_predictions`)."""
    extra = {"output": output} if output is not None else {}
    if model.is_regression:
        sums = np.zeros(6)  # LIBLINEAR's error, sump, sumt, sumpp, sumtt, sumpt (predict.c)
        for block in stats:  # in block order
            sums += block
        return {"n_rows": n_rows, **regression_metrics(n_rows, sums),
                "regression_sums": sums.tolist(), **extra}
    correct = sum(int(s[0][0] if model.is_ranking else s[0]) for s in stats)
    result = {"accuracy": correct / max(1, n_rows), "n_rows": n_rows, **extra}
    if model.is_ranking:
        metrics = cutting_plane.ranking_metrics(
            np.concatenate([s[1] for s in stats]) if stats else np.zeros(0),
            np.concatenate([s[2] for s in stats]) if stats else np.zeros(0, np.int64),
            np.asarray(model.thresholds), len(model.classes))
        result.update(ranks=list(model.classes), **metrics)
    return result


@contextlib.contextmanager
def _whole(output: str, storage_options):
    """Where to write the output directory ``output`` so that it appears whole or not at
    all: a local one into a temp folder beside it, renamed into place when the block ends;
    a remote one in place (it did not exist), removed if the block fails.  An OSError that
    names no file (a full disk's) is raised naming ``output``."""
    from distsvm.storage.checkpoint import remove
    from distsvm.storage.paths import resolve

    local = "://" not in output or output.startswith("file://")
    final = resolve(output).removeprefix("file://") if local else output
    target = (os.path.join(os.path.dirname(final),
                           f".{os.path.basename(final)}.{uuid.uuid4().hex[:12]}.tmp")
              if local else output)
    try:
        yield target
        if local:
            os.rename(target, final)
    except BaseException as exc:
        remove(target, storage_options)
        if (isinstance(exc, OSError) and exc.errno is not None
                and (exc.filename is None or str(exc.filename).startswith(target))):
            raise OSError(exc.errno, exc.strerror, output) from exc  # not the temp folder
        raise


def _parquet(cols, names, output, storage_options):
    import dask
    import dask.dataframe as dd
    import pandas as pd

    frames = [dask.delayed(pd.DataFrame)(c, columns=names) for c in cols]
    meta = pd.DataFrame({n: pd.Series(dtype=np.int64 if n == "row" else np.float64)
                         for n in names})
    df = dd.from_delayed(frames, meta=meta, verify_meta=False)
    return df.to_parquet(output, storage_options=storage_options, write_index=False,
                         compute=False, name_function=lambda i: f"part.{i:06d}.parquet")


def _zarr(cols, sizes, dec, prob, output, storage_options, attrs, positions=False):
    import dask
    import dask.array as da

    from distsvm.storage.dataset import open_group

    chunk = max(1, max(sizes, default=1))
    arrays = {"label": [dask.delayed(lambda c: c["label"])(c) for c in cols]}
    arrays["decision"] = [dask.delayed(lambda c, d=tuple(dec): np.column_stack([c[n] for n in d])
                                       if len(d) > 1 else c[d[0]])(c) for c in cols]
    if positions:
        arrays["row"] = [dask.delayed(lambda c: c["row"])(c) for c in cols]
    if prob:
        arrays["probability"] = [dask.delayed(
            lambda c, p=tuple(prob): np.column_stack([c[n] for n in p]))(c) for c in cols]
    remote = "://" in output and not output.startswith("file://")
    so = {"storage_options": storage_options} if storage_options and remote else {}
    group = open_group(output, "w-", storage_options)
    group.attrs["distsvm_predictions"] = attrs
    writes = []
    for name, pieces in arrays.items():
        width = {"decision": len(dec), "probability": len(prob)}.get(name, 1)
        shape_of = (lambda n: (n,)) if name == "label" or (name == "decision" and width == 1) \
            else (lambda n, k=width: (n, k))
        shape_of = (lambda n: (n,)) if name == "row" else shape_of
        parts = [da.from_delayed(p, shape=shape_of(n),
                                 dtype=np.int64 if name == "row" else np.float64)
                 for p, n in zip(pieces, sizes)]
        arr = da.concatenate(parts) if parts else da.zeros(shape_of(0))
        arr = arr.rechunk({0: chunk})
        writes.append(da.to_zarr(arr, output, component=name, compute=False, **so))
    return writes
