"""Publishing to an MLflow tracking server and model registry: a spec's ``mlflow`` section.

Not :mod:`distsvm.registry`, distsvm's own model registry (a folder or bucket of numbered,
immutable versions and a ``current.json`` pointer, which serving processes read), nor
:mod:`distsvm.solvers.registry`, the table of solvers.  This module mirrors what a job
(``distsvm run``) or a pipeline run (``distsvm pipeline run``) trains into MLflow, beside the
built-in registry and after it:

* an MLflow **run** (in the section's ``experiment``) with the training parameters, the
  metrics (rounds, objective, test or holdout accuracy / mean squared error) and tags naming
  the distsvm source (run directory, built-in registry version, the model file's SHA-256);
* the model as an artifact of that run, ``model/``, in MLflow's model layout with two
  flavours: ``distsvm`` (the model file in distsvm's own format, :mod:`distsvm.model`, never
  pickled) and ``python_function``, whose loader is this module (:func:`_load_pyfunc`):
  ``mlflow.pyfunc.load_model("models:/NAME@champion").predict(X)`` rebuilds the model with
  :func:`distsvm.model.load_model` and predicts in the calling process, no Dask cluster, from a
  pandas DataFrame, a numpy array or a scipy sparse matrix (column j is feature j + 1);
* a **version** of the registered model ``registered_model``, and on promotion the
  ``alias`` (default ``champion``) moved to it.

A publish is idempotent: the run carries a key (the source and the model's SHA-256), and a
second publish of the same model (a pipeline re-run, ``distsvm resume`` of a job whose
publish failed) finds its run and version instead of making new ones.  The built-in registry
is written first; an MLflow failure (server down, refused request) is one line
(:class:`MLflowError`, exit 1) saying where the model is kept and how to publish it again.

``import mlflow`` happens only here, and only when a spec has an ``mlflow`` section
(the ``mlflow`` extra: ``pip install 'distsvm[mlflow]'``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
import time
import urllib.parse

import numpy as np

from distsvm.storage import StorageError
from distsvm.storage.checkpoint import file_sha256

DEFAULT_ALIAS = "champion"
ARTIFACT_PATH = "model"  # the run's artifact folder of the model
MODEL_FILE = "model.dsvm"
FLAVOR = "distsvm"
KEY_TAG = "distsvm.publish_key"  # the run's idempotence key
# the tracking URIs MLflow resolves (a local path, without a scheme, is a file store too)
SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks",
           "databricks-uc", "uc")
# MLflow's client retries a refused connection 7 times over minutes by default: a command
# says it is down within seconds instead (the user's own MLFLOW_HTTP_REQUEST_* win)
# (and its run's URL printed on stdout, which --json keeps for the result, is not)
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
                 "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}


class MLflowError(StorageError):
    """MLflow could not be reached or refused the publish (the model is kept elsewhere)."""


def check(cfg: dict, where: str, name: str | None, error: type = ValueError) -> dict:
    """A spec's ``mlflow`` section with its defaults, checked before anything is trained:
    mlflow importable, a tracking URI (the section's or ``$MLFLOW_TRACKING_URI``) of a
    scheme MLflow knows, an alias MLflow allows, a registered model name.  ``error``
    (the caller's :class:`distsvm.spec.SpecError`) naming the key otherwise."""
    try:
        import mlflow  # noqa: F401
    except ImportError as exc:
        raise error(f"{where}: key 'mlflow' needs the mlflow package, which is not "
                    "installed (pip install 'distsvm[mlflow]')") from exc
    uri = cfg.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise error(f"{where}: key 'mlflow.tracking_uri' is required (or set "
                    "MLFLOW_TRACKING_URI)")
    for key, value in (("tracking_uri", uri), ("registry_uri", cfg.get("registry_uri"))):
        scheme = urllib.parse.urlparse(value or "").scheme
        if value and "://" in value and scheme not in SCHEMES:
            raise error(f"{where}: key 'mlflow.{key}': {value!r} is not a URI MLflow "
                        f"knows (scheme {scheme!r}; use one of {', '.join(SCHEMES)})")
        if scheme in ("http", "https") and not urllib.parse.urlparse(value).hostname:
            raise error(f"{where}: key 'mlflow.{key}': {value!r} names no host")
    alias = cfg.get("alias", DEFAULT_ALIAS)
    if re.fullmatch(r"latest|[vV]\d+", alias):  # MLflow's reserved names
        raise error(f"{where}: key 'mlflow.alias': {alias!r} is reserved by MLflow "
                    "(latest, v1, v2, ...); choose another, e.g. champion")
    model = cfg.get("registered_model") or name
    if not model:
        raise error(f"{where}: key 'mlflow.registered_model' (or 'name') is required "
                    "with 'mlflow'")
    return {"tracking_uri": uri, "registry_uri": cfg.get("registry_uri") or uri,
            "registered_model": model, "experiment": cfg.get("experiment") or model,
            "alias": alias}


def publish(cfg: dict, model_path: str, *, source: str, params: dict, metrics: dict,
            tags: dict, promote: bool, kept: str, progress=None) -> dict:
    """Publish the distsvm model file ``model_path`` (local) as :func:`check`'s ``cfg``
    says: a run with ``params``, ``metrics`` (the finite numbers among them) and ``tags``, the
    model as its artifact, a registered version, and with ``promote`` the alias moved to it.
    ``source`` names what is published (a run directory, a registry version): with the
    model's SHA-256 it is the key that makes a second publish find the first.  ``kept``
    says where the model stays if MLflow fails (for the error).  Returns {"run_id",
    "version", "alias", "model_uri"}."""
    sha = file_sha256(model_path)
    key = hashlib.sha256(f"{source}\n{sha}".encode()).hexdigest()
    uri = cfg["tracking_uri"]
    try:
        with _http_defaults():
            return _publish(cfg, model_path, key, sha, source, params, metrics, tags,
                            promote, progress)
    except Exception as exc:  # MlflowException, requests' errors, OSError of a file store
        reason = " ".join(str(exc).split())
        if len(reason) > 300:
            reason = reason[:300] + "…"
        raise MLflowError(f"MLflow {uri}: cannot publish {cfg['registered_model']} "
                          f"({type(exc).__name__}: {reason}); the model is kept: {kept}") from exc


@contextlib.contextmanager
def _http_defaults():
    """:data:`HTTP_DEFAULTS` in the environment while MLflow is called, and its INFO log
    lines (the progress says what was published) silenced."""
    import logging

    added = {k: v for k, v in HTTP_DEFAULTS.items() if k not in os.environ}
    os.environ.update(added)
    log = logging.getLogger("mlflow")
    level = log.level
    log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        log.setLevel(level)
        for k in added:
            os.environ.pop(k, None)


def _publish(cfg, model_path, key, sha, source, params, metrics, tags, promote, progress):
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=cfg["tracking_uri"], registry_uri=cfg["registry_uri"])
    name = cfg["registered_model"]
    exp = client.get_experiment_by_name(cfg["experiment"])
    exp_id = exp.experiment_id if exp is not None else client.create_experiment(cfg["experiment"])
    found = client.search_runs([exp_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'",
                               max_results=1)
    run = found[0] if found else None
    if run is None or not client.list_artifacts(run.info.run_id, ARTIFACT_PATH):
        if run is None:
            run = client.create_run(exp_id, run_name=tags.get("distsvm.name"),
                                    tags={KEY_TAG: key, "distsvm.source": source,
                                          "distsvm.model_sha256": sha, **tags})
        run_id = run.info.run_id
        now = int(1000 * time.time())
        client.log_batch(run_id,
                         metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()
                                  if _number(v)],
                         params=[Param(k, _param(v)) for k, v in sorted(params.items())])
        with tempfile.TemporaryDirectory() as tmp:
            save_pyfunc(model_path, os.path.join(tmp, ARTIFACT_PATH))
            client.log_artifacts(run_id, os.path.join(tmp, ARTIFACT_PATH), ARTIFACT_PATH)
        client.set_terminated(run_id)
        run = client.get_run(run_id)
    run_id = run.info.run_id
    try:
        client.get_registered_model(name)
    except MlflowException:
        client.create_registered_model(name, description="a distsvm linear model")
    versions = client.search_model_versions(f"name = '{_quoted(name)}' and run_id = '{run_id}'")
    if versions:
        version = str(min(int(v.version) for v in versions))
    else:
        version = client.create_model_version(
            name, f"{run.info.artifact_uri}/{ARTIFACT_PATH}", run_id=run_id,
            tags={"distsvm.source": source, "distsvm.model_sha256": sha}).version
        if progress is not None:
            progress.note(f"mlflow: registered {name} version {version} (run {run_id})")
    if promote:
        client.set_registered_model_alias(name, cfg["alias"], version)
        if progress is not None:
            progress.note(f"mlflow: {name}@{cfg['alias']} is version {version}")
    return {"run_id": run_id, "version": int(version), "alias": cfg["alias"] if promote else None,
            "model_uri": f"models:/{name}/{version}"}


def _number(v) -> bool:
    return (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            and math.isfinite(float(v)))


def _param(v) -> str:
    text = v if isinstance(v, str) else json.dumps(v, default=str, sort_keys=True)
    return text[:6000]  # MLflow's limit of a param's value


def _quoted(text: str) -> str:
    return text.replace("'", "\\'")


def save_pyfunc(model_path: str, path: str) -> None:
    """Save the distsvm model file ``model_path`` as an MLflow model at ``path``: the
    ``distsvm`` flavour (the file, in distsvm's format) and ``python_function`` loaded by
    :func:`_load_pyfunc` (no pickle anywhere)."""
    import mlflow.pyfunc
    from mlflow.models import Model as MLflowModel

    from . import __version__
    from .model import FORMAT_NAME, load_model

    model = load_model(model_path)  # a damaged file is refused here, not at serving time
    mlmodel = MLflowModel()
    mlmodel.add_flavor(FLAVOR, model_file=f"data/{MODEL_FILE}", format=FORMAT_NAME,
                       distsvm_version=__version__, solver=model.solver, loss=model.loss,
                       n_features=int(model.n_features))
    with tempfile.TemporaryDirectory() as tmp:  # copied in as data/model.dsvm
        data = os.path.join(tmp, MODEL_FILE)
        with open(model_path, "rb") as src, open(data, "wb") as dst:
            dst.write(src.read())
        mlflow.pyfunc.save_model(path, loader_module=__name__, data_path=data,
                                 mlflow_model=mlmodel,
                                 pip_requirements=[f"distsvm=={__version__}"])


class PyfuncModel:
    """What MLflow's ``python_function`` flavour loads (:func:`_load_pyfunc`): a distsvm
    model, predicting labels (a regression model: values) in this process."""

    def __init__(self, model):
        self.model = model

    def predict(self, data, params=None):
        return self.model.predict(features(data))


def features(data):
    """The rows of a pandas DataFrame (its columns in order: feature 1, 2, …), a numpy array
    or a scipy sparse matrix as a matrix distsvm predicts from."""
    import scipy.sparse as sp

    if sp.issparse(data):
        return data
    if hasattr(data, "to_numpy"):  # pandas
        data = data.to_numpy(dtype=np.float64)
    X = np.asarray(data, dtype=np.float64)
    return X.reshape(1, -1) if X.ndim == 1 else X


def _load_pyfunc(path: str) -> PyfuncModel:
    """MLflow's loader of the ``python_function`` flavour: ``path`` is the model's
    ``data/model.dsvm``, rebuilt by :func:`distsvm.model.load_model`."""
    from .model import load_model

    return PyfuncModel(load_model(path))



# ---------------------------------------------------------------- the job's and the pipeline's
SUMMARY_METRICS = ("rounds", "primal_objective", "dual_objective", "duality_gap",
                   "train_seconds", "n_rows")


def _model_params(model) -> dict:
    return {"solver": model.solver, "loss": model.loss, **model.params}


def publish_job(spec: dict, run_dir: str, result: dict, storage_options, progress,
                model=None) -> dict:
    """``distsvm run``'s publish, after its ``result.json`` is written: the model (``model``,
    kept as ``RUN/model.dsvm``; None: the one kept there by an earlier attempt, which
    ``distsvm resume`` publishes again) as the spec's ``mlflow`` section says, the alias
    moved unless ``output.promote`` is false.  ``result.json`` is rewritten with the MLflow
    run and version; returns the result."""
    from distsvm.storage import checkpoint as files

    from .model import load_model, save_model

    where = spec.get("source", files.join(run_dir, "job.json"))
    out = spec.get("output", {})
    cfg = check(spec["mlflow"], where, out.get("name") or spec.get("name"), MLflowError)
    kept_file = files.join(run_dir, MODEL_FILE)
    if model is not None:
        save_model(model, kept_file, storage_options)
    kept = ", ".join([kept_file, *([out["model"]] if "model" in out else []),
                      *([f"{out['registry']} v{result['registry_version']}"]
                        if "registry_version" in result else [])])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, MODEL_FILE)
        try:
            kept_bytes = files.read_bytes(kept_file, storage_options)
        except FileNotFoundError as exc:  # not an unfinished run (resume): say so
            raise MLflowError(f"{kept_file}: missing, nothing to publish to MLflow") from exc
        with open(path, "wb") as f:
            f.write(kept_bytes)
        model = load_model(path)
        metrics = {**{k: model.summary.get(k) for k in SUMMARY_METRICS}, **result}
        tags = {"distsvm.name": cfg["registered_model"], "distsvm.run": run_dir,
                "distsvm.train": spec["data"]["train"],
                "distsvm.converged": str(model.summary.get("converged"))}
        if "registry_version" in result:
            tags["distsvm.registry_version"] = f"{out['registry']}/v{result['registry_version']}"
        result = {**result, "mlflow": publish(
            cfg, path, source=run_dir, params={**_model_params(model), **spec.get("solver", {})},
            metrics=metrics, tags=tags, promote=out.get("promote", True), progress=progress,
            kept=f"{kept} (`distsvm resume {run_dir}` publishes it again)")}
    files.write_json(files.join(run_dir, "result.json"), result, storage_options)
    return result


def publish_pipeline(spec: dict, summary: dict, progress) -> dict:
    """A pipeline run's publish, after its decision is acted on in the built-in registry:
    the candidate's registry version (its model file, checked against its SHA-256) as the
    spec's ``mlflow`` section says, the alias moved if it was promoted.  A re-run of the
    interval publishes nothing new (and publishes what a failed attempt did not)."""
    from distsvm.storage import checkpoint as files
    from distsvm.storage.paths import canonical, resolve

    from . import registry
    from .model import load_model

    reg, name, so = spec["registry"], spec["name"], spec.get("storage_options")
    cfg = check(spec["mlflow"], spec["source"], name, MLflowError)
    rec = registry.show(reg, name, summary["version"], so)
    source = files.join(canonical(resolve(reg)), name, f"v{rec['version']}")
    data = files.read_bytes(files.join(reg, name, f"v{rec['version']}", registry.MODEL_FILE), so)
    if files.sha256(data) != rec["model_sha256"]:
        raise registry.RegistryError(f"{source}: fails its SHA-256 check (damaged)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, MODEL_FILE)
        with open(path, "wb") as f:
            f.write(data)
        model = load_model(path)
        lineage = rec.get("lineage", {})
        tags = {"distsvm.name": name, "distsvm.registry_version": source,
                "distsvm.dataset": str(lineage.get("dataset")),
                "distsvm.dataset_fingerprint": str(lineage.get("dataset_fingerprint")),
                "distsvm.decision": str(rec["metrics"].get("reason"))}
        metrics = {**{k: model.summary.get(k) for k in SUMMARY_METRICS},
                   **{k: v for k, v in rec["metrics"].items() if k != "current_version"}}
        return publish(cfg, path, source=source, progress=progress,
                       params={**_model_params(model), **lineage.get("params", {})},
                       metrics=metrics, tags=tags, promote=bool(summary.get("promoted")),
                       kept=f"{reg}/{name} v{rec['version']} (running the pipeline again "
                            "publishes it)")
