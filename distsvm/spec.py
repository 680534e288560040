"""Job specs: ``distsvm run JOB.yaml`` (or ``.toml``, ``.json``) and ``distsvm resume RUN``.

A spec names the training store (and a test store), the solver and its parameters
(those of :func:`distsvm.jobs.train`), the cluster (embedded, a scheduler address, or
a dask-jobqueue / dask-kubernetes cluster, with optional TLS), where the model goes
(a file, a model registry) and the checkpoint policy.  It is validated against the
JSON schema ``distsvm/schemas/job.schema.json`` (unknown keys rejected); every error
names the file and the key.  The ``solver`` section's schema is not in that file: it is
generated from the training parameters' declaration (:func:`distsvm.params.spec_schema`),
and its ``type`` is LIBLINEAR's ``-s`` (:func:`train_params`).  YAML is read with a
SafeLoader only (:mod:`distsvm.documents`: no aliases, bounded depth and size, no repeated
keys).  The parameters' values are then checked as :func:`distsvm.jobs.train` checks them,
with the file named as the owner.  The format is documented in ``docs/jobs.md``.

A run lives in ``RUNS/RUN_ID/`` (``RUNS`` is ``checkpoint.runs`` or ``TRAIN_STORE/runs``):
``job.json`` (the spec as validated, to resume it), ``checkpoints/`` and, once done,
``result.json``.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import os
import pathlib
import uuid

from distsvm.storage import checkpoint as files
from distsvm.storage import open_dataset

from . import documents
from .checkpoint import Checkpointer
from .progress import Progress

SCHEMAS = pathlib.Path(__file__).with_name("schemas")
JOBQUEUE_CLASSES = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "sge": "SGECluster",
                    "lsf": "LSFCluster", "oar": "OARCluster", "htcondor": "HTCondorCluster",
                    "moab": "MoabCluster"}


class SpecError(ValueError):
    """A spec file that cannot be read or does not follow its schema."""


def read_document(path) -> dict:
    """Parse a YAML (safe_load), TOML or JSON file by its extension."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    try:
        raw = documents.read_bounded(path)
        if ext in (".yaml", ".yml"):
            doc = documents.load_yaml(raw)  # a SafeLoader: no aliases, bounded depth
        elif ext == ".toml":
            import tomllib

            doc = tomllib.loads(raw.decode())
            documents.check_depth(doc)
        elif ext == ".json":
            doc = documents.load_json(raw)
        else:
            raise SpecError(f"{path}: unknown spec format {ext!r} (use .yaml, .yml, .toml "
                            "or .json)")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the spec: {exc}") from exc
    except SpecError:
        raise
    except documents.DocumentError as exc:
        raise SpecError(f"{path}: refused: {exc}") from exc
    except Exception as exc:  # yaml.YAMLError, tomllib.TOMLDecodeError, JSONDecodeError
        raise SpecError(f"{path}: not valid {ext[1:].upper()}: {_one_line(exc)}") from exc
    return doc


def _one_line(exc: Exception) -> str:
    """A parser's message on one line: YAML's spans several (the problem, then the
    offending line with a caret), so it is its problem and position only."""
    mark = getattr(exc, "problem_mark", None)
    if mark is not None and getattr(exc, "problem", None):
        context = f"{exc.context}: " if getattr(exc, "context", None) else ""
        return f"{context}{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def schema(name: str) -> dict:
    """The JSON schema ``schemas/<name>.schema.json``; the job schema with its ``solver``
    section (``$defs/solver``) generated from :class:`distsvm.params.Params`."""
    from . import params

    doc = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    if name == "job":
        doc["$defs"] = {"solver": params.spec_schema(), **doc["$defs"]}
    return doc


def validate(doc, schema_name: str, where: str) -> dict:
    """Check ``doc`` against :func:`schema` ``(schema_name)``; SpecError naming the key of
    the first problem (an unknown key by its full path)."""
    import jsonschema
    import referencing

    schemas = [schema(p.name.removesuffix(".schema.json"))
               for p in sorted(SCHEMAS.glob("*.schema.json"))]
    registry = referencing.Registry().with_resources(
        (s["$id"], referencing.Resource.from_contents(s)) for s in schemas)
    target = next(s for s in schemas if s["$id"].endswith(f"/{schema_name}.schema.json"))
    validator = jsonschema.Draft202012Validator(target, registry=registry)
    errors = sorted(validator.iter_errors(doc), key=lambda e: (list(e.absolute_path), e.message))
    if not errors:
        return _solver_spelled(doc, where)
    e = errors[0]
    path = [str(p) for p in e.absolute_path]
    if e.validator == "additionalProperties" and isinstance(e.instance, dict):
        unknown = sorted(str(k) for k in set(e.instance) - set(e.schema.get("properties", {})))
        allowed = ", ".join(sorted(e.schema.get("properties", {})))
        raise SpecError(f"{where}: unknown key '{'.'.join(path + [unknown[0]])}' "
                        f"(allowed here: {allowed})")
    if e.validator == "not":
        raise SpecError(f"{where}: key '{'.'.join(path)}': give at most one of scheduler, "
                        "jobqueue and kubernetes")
    key = ".".join(path) or "(top level)"
    raise SpecError(f"{where}: key '{key}': {e.message}")


def _solver_spelled(doc: dict, where: str) -> dict:
    """``doc`` with its ``solver`` section as the parameters spell it
    (:func:`distsvm.params.from_spec`: ``cutting-plane`` is ``cutting_plane``, class weights'
    labels strings); SpecError naming the key otherwise."""
    from . import params

    if not isinstance(doc.get("solver"), dict):
        return doc
    try:
        return {**doc, "solver": params.from_spec(doc["solver"], _OWNER)}
    except ValueError as exc:
        raise SpecError(spec_message(str(exc), where, "solver")) from exc


def load_spec(path) -> dict:
    """Read and validate a job spec; the result keeps the file's path under ``source``."""
    path = os.fspath(path)
    spec = validate(read_document(path), "job", path)
    spec["source"] = os.path.abspath(path)
    return spec


_OWNER = "\x00spec\x00"  # stands for the owner in params' messages, rewritten to spec keys


def check_solver_section(spec: dict, where: str, dataset=None, key: str = "solver",
                         regression: bool | None = None) -> None:
    """Check the values of a spec's ``solver`` section as :func:`distsvm.jobs.train` will
    (:func:`distsvm.params.check_kwargs`: an option the solver does not take is refused
    even at its default), before anything is created or a cluster is connected to: against
    ``dataset`` where it exists, else against the task ``regression`` (a pipeline's first
    run).  SpecError naming the spec's key (``key 'solver.C': must be ...``)."""
    from . import params

    try:
        params.check_kwargs(_OWNER, train_params(spec, key), dataset, regression)
    except ValueError as exc:
        raise SpecError(spec_message(str(exc), where, key)) from exc


def check_settings(spec: dict, where: str, sections: dict, urls=(), outputs=()) -> None:
    """The rest of a spec, checked as the CLI checks its options (:mod:`distsvm.params`):
    the values of its ``sections`` ({section key, "" at the top: {name of
    params.SETTINGS: value}}) and the cluster's ``n_workers``; its ``storage_options``
    against its ``urls`` (the stores and paths it names); the ``outputs`` ((key, path, is
    a directory)) it will write.  SpecError naming the key."""
    from . import params

    cluster = spec.get("cluster", {})
    local = not any(k in cluster for k in ("scheduler", "jobqueue", "kubernetes"))
    sections = {**sections, "cluster": {"workers": cluster.get("n_workers")}}
    key = ""
    try:
        for key, values in sections.items():
            names = {n: f"{key}.{n}" if key else n for n in values}
            params.check_settings(_OWNER, values, {**names, "workers": "cluster.n_workers"},
                                  local)
        key = ""
        so_key = "data.storage_options" if "data" in spec else "storage_options"
        params.check_storage_options(_OWNER, so_key, storage_options(spec), urls)
        for name, path, directory in outputs:
            params.check_output(_OWNER, name, path, directory)
    except ValueError as exc:
        raise SpecError(spec_message(str(exc), where, key)) from exc


def storage_options(spec: dict) -> dict | None:
    """The fsspec options of a job spec (``data.storage_options``) or a pipeline spec."""
    return spec.get("data", spec).get("storage_options")


def spec_message(message: str, where: str, key: str) -> str:
    """A :mod:`distsvm.params` message (owner ``_OWNER``) in a spec's words: the key named
    (``key`` the section, or "" where the message names the whole key)."""
    import re

    m = re.match(rf"^The '([^']+)' parameter of {re.escape(_OWNER)} (.*)$", message, re.S)
    if m:  # a setting's message names its whole key; a solver option's, its name
        return f"{where}: key '{m[1] if '.' in m[1] or not key else f'{key}.{m[1]}'}': {m[2]}"
    return f"{where}: key '{key}': " + message.replace(f" of {_OWNER}", "").replace(
        _OWNER, f"the '{key}' section")


def check_store(url: str, where: str, key: str, storage_options: dict | None):
    """Open the store a spec's ``key`` names; SpecError naming the key if it cannot."""
    from distsvm.storage import StorageError

    try:
        return open_dataset(url, storage_options)
    except StorageError as exc:
        raise SpecError(f"{where}: key '{key}': {exc}") from exc


def check_cluster(cfg: dict, where: str) -> None:
    """The files a spec's ``cluster`` section names exist."""
    for k, path in cfg.get("tls", {}).items():
        if not os.path.exists(path):
            raise SpecError(f"{where}: key 'cluster.tls.{k}': no file {path}")


# The paths of a job spec, (section, key): resolved when it runs (resolve_paths).
JOB_PATHS = (("data", "train"), ("data", "test"), ("output", "model"),
             ("output", "registry"), ("checkpoint", "runs"), ("solver", "validation"))


def resolve_paths(spec: dict, keys) -> dict:
    """A copy of ``spec`` with its local paths at ``keys`` ((section, key), or (key,) at the
    top) absolute and ``~``-expanded against this process's working directory (as they
    were meant), so that workers, ``job.json`` and a later ``resume`` from anywhere all mean
    the same files; URLs (``s3://…``) are left as they are (:func:`distsvm.storage.paths.resolve`)."""
    import copy

    from distsvm.storage.paths import resolve

    spec = copy.deepcopy(spec)
    for *section, key in keys:
        where = spec
        for name in section:
            where = where.get(name) if isinstance(where, dict) else None
        if isinstance(where, dict) and isinstance(where.get(key), str):
            where[key] = resolve(where[key])
    return spec


@contextlib.contextmanager
def cluster_client(cfg: dict, where: str, progress=None):
    """A Dask client for a spec's ``cluster`` section (see :func:`distsvm.cluster.connect`)."""
    from . import cluster

    security = None
    if "tls" in cfg:
        from distributed.security import Security

        tls = cfg["tls"]
        for k in ("ca_file", "cert_file", "key_file"):
            if not os.path.exists(tls[k]):
                raise SpecError(f"{where}: key 'cluster.tls.{k}': no file {tls[k]}")
        certs = {f"tls_{role}_{kind}": tls[f"{kind}_file"]
                 for role in ("client", "scheduler", "worker") for kind in ("cert", "key")}
        security = Security(tls_ca_file=tls["ca_file"], require_encryption=True, **certs)
    if "jobqueue" in cfg or "kubernetes" in cfg:
        with _external_cluster(cfg, where, security) as address:
            with cluster.connect(address, cfg.get("n_workers"), security=security,
                                 progress=progress) as c:
                yield c
        return
    with cluster.connect(cfg.get("scheduler"), cfg.get("n_workers"), security=security,
                         progress=progress, dashboard=cfg.get("dashboard")) as c:
        yield c


@contextlib.contextmanager
def _external_cluster(cfg: dict, where: str, security):
    """Start the dask-jobqueue or dask-kubernetes cluster of a spec; yield its address."""
    if "jobqueue" in cfg:
        jq = cfg["jobqueue"]
        module, cls_name, key = "dask_jobqueue", JOBQUEUE_CLASSES[jq["type"]], "jobqueue"
        options, scale = dict(jq.get("options", {})), dict(jobs=jq.get("jobs", 1))
    else:
        k8s = cfg["kubernetes"]
        module, cls_name, key = "dask_kubernetes.operator", "KubeCluster", "kubernetes"
        options, scale = dict(k8s.get("options", {})), dict(n=k8s.get("workers", 1))
    try:
        cls = getattr(importlib.import_module(module), cls_name)
    except ImportError as exc:
        package = module.split(".")[0].replace("_", "-")
        raise SpecError(f"{where}: key 'cluster.{key}' needs the {package} package, which is "
                        f"not installed (pip install {package})") from exc
    if security is not None:
        options.setdefault("security", security)
    try:
        c = cls(**options)
    except TypeError as exc:
        raise SpecError(f"{where}: key 'cluster.{key}.options': {exc}") from exc
    with c:
        c.scale(**scale)
        yield c.scheduler_address


def new_run_id() -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{now}-{uuid.uuid4().hex[:8]}"


def run_dir_for(spec: dict, run_id: str) -> str:
    runs = spec.get("checkpoint", {}).get("runs") or files.join(spec["data"]["train"], "runs")
    return files.join(runs, run_id)


def train_params(spec: dict, key: str = "solver") -> dict:
    """The keyword arguments of :func:`distsvm.jobs.train` of a spec's section ``key``: its
    parameters, its ``type`` (LIBLINEAR's ``-s``) as its solver, loss and switch to the
    primal solver (:func:`distsvm.params.with_type`; ValueError where it contradicts them)."""
    from . import params

    section = dict(spec.get(key, {}))
    return params.with_type(section, section.pop("type", None))


def run(spec: dict, run_id: str | None = None, progress: Progress | None = None,
        run_dir: str | None = None, client=None, lock_timeout: float | None = None) -> dict:
    """Run a validated job spec (or continue it in ``run_dir``) on ``client`` or the spec's
    cluster; return its result.  The whole spec is checked first (SpecError, naming the
    key); ``lock_timeout``: seconds a registry publish waits for another publisher."""
    from . import jobs, prediction, registry
    from .model import save_model

    progress = progress or Progress(quiet=True)
    spec = resolve_paths(spec, JOB_PATHS)
    where = spec["source"]
    data = spec["data"]
    so = data.get("storage_options")
    out = spec.get("output", {})
    name = out.get("name") or spec.get("name")
    if "registry" in out and not name:
        raise SpecError(f"{where}: key 'output.name' (or 'name') is required with "
                        "'output.registry'")
    # the whole spec is checked before a run directory is made or a cluster connected to
    ckpt = spec.get("checkpoint", {})
    check_settings(spec, where, {"checkpoint": {k: ckpt.get(k) for k in ("every", "keep")}},
                   urls=[data["train"], data.get("test"), out.get("model"), out.get("registry"),
                         ckpt.get("runs")],
                   outputs=[("output.model", out.get("model"), False),
                            ("output.registry", out.get("registry"), True),
                            ("output.registry", out.get("registry") and name
                             and files.join(out["registry"], name), True),
                            ("checkpoint.runs", ckpt.get("runs"), True)])
    dataset = check_store(data["train"], where, "data.train", so)
    if "test" in data:
        check_store(data["test"], where, "data.test", so)
    check_solver_section(spec, where, dataset)
    check_cluster(spec.get("cluster", {}), where)
    if "mlflow" in spec:  # its package and URI, before anything is trained
        from . import mlflow_registry

        mlflow_registry.check(spec["mlflow"], where, name, SpecError)
    resuming = run_dir is not None
    if not resuming:
        run_dir = run_dir_for(spec, run_id or new_run_id())
        if files.listdir(run_dir, so):
            raise SpecError(f"{run_dir}: this run already exists; continue it with "
                            f"`distsvm resume {run_dir}`")
        files.write_json(files.join(run_dir, "job.json"),
                         {k: v for k, v in spec.items() if k != "source"}, so)
    progress.note(f"run: {run_dir}")
    ckpt_cfg = spec.get("checkpoint", {})
    params = train_params(spec)
    checkpoint = Checkpointer(run_dir, ckpt_cfg.get("every"),
                              {"train": data["train"],
                               "dataset_fingerprint": registry.fingerprint(dataset), **params},
                              keep=ckpt_cfg.get("keep", 2), storage_options=so,
                              progress=progress)
    result = {"run": run_dir}
    with (contextlib.nullcontext(client) if client is not None
          else cluster_client(spec.get("cluster", {}), where, progress)) as c:
        model = jobs.train(dataset, client=c, progress=progress, owner=f"{where}: solver",
                           checkpoint=checkpoint, **params)
        s = model.summary
        result.update(solver=model.solver, loss=model.loss, rounds=s["rounds"],
                      converged=s["converged"], primal_objective=s["primal_objective"],
                      **{k: s[k] for k in ("stopped_by", "best_round") if k in s})
        if "test" in data:
            test = prediction.predict(open_dataset(data["test"], so), model, client=c)
            if model.is_regression:
                result.update(test_mean_squared_error=test["mean_squared_error"],
                              test_squared_correlation=test["squared_correlation"])
                progress.note(f"run: test mean squared error {test['mean_squared_error']:.6g} "
                              f"on {test['n_rows']} rows of {data['test']}")
            else:
                result["test_accuracy"] = test["accuracy"]
                progress.note(f"run: test accuracy {100 * test['accuracy']:.4f}% on "
                              f"{test['n_rows']} rows of {data['test']}")
    if "model" in out:
        save_model(model, out["model"])
        result["model"] = out["model"]
        progress.note(f"run: model written to {out['model']}")
    if "registry" in out:
        metrics = {k: result[k] for k in ("test_accuracy", "test_mean_squared_error",
                                          "test_squared_correlation", "primal_objective")
                   if k in result}
        version = registry.publish(out["registry"], name, model, metrics=metrics,
                                   lineage=registry.lineage(dataset, params, run_dir),
                                   lock_timeout=lock_timeout)
        if out.get("promote", True):
            registry.promote(out["registry"], name, version, lock_timeout=lock_timeout)
        result["registry_version"] = version
        progress.note(f"run: registered {out['registry']}/{name}/v{version}"
                      + (" (current)" if out.get("promote", True) else ""))
    files.write_json(files.join(run_dir, "result.json"), result, so)
    if "mlflow" in spec:  # after the run is recorded: an MLflow failure loses nothing
        from . import mlflow_registry

        result = mlflow_registry.publish_job(spec, run_dir, result, so, progress, model)
    return result


def resume(run_dir: str, progress: Progress | None = None,
           storage_options: dict | None = None, lock_timeout: float | None = None) -> dict:
    """Continue the run in ``run_dir`` from its latest checkpoint (or return its result if
    it finished).  ``run_dir`` is taken absolute (as ``run`` makes it): the lineage of a
    version it publishes names it so."""
    from distsvm.storage.paths import resolve

    run_dir = resolve(run_dir)
    try:
        spec = files.read_json(files.join(run_dir, "job.json"), storage_options)
    except FileNotFoundError as exc:
        raise SpecError(f"{run_dir}: not a distsvm run directory (no job.json)") from exc
    with contextlib.suppress(FileNotFoundError):
        done = files.read_json(files.join(run_dir, "result.json"), storage_options)
        if done.get("stopped_by") == "time budget":  # not finished: go on (issue 31)
            raise FileNotFoundError
        if "mlflow" in spec and "mlflow" not in done:  # its publish to MLflow failed: again
            from . import mlflow_registry

            return mlflow_registry.publish_job(spec, run_dir, done, storage_options, progress)
        (progress or Progress(quiet=True)).note(f"resume: {run_dir} has finished; "
                                                "nothing to do")
        return done
    spec = validate(spec, "job", files.join(run_dir, "job.json"))
    spec["source"] = files.join(run_dir, "job.json")
    return run(spec, progress=progress, run_dir=run_dir, lock_timeout=lock_timeout)


