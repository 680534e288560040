"""deploy/: what cannot run here (Docker, Kubernetes, Slurm) is checked for syntax and for
referring to real things: YAML parses with the keys its tool needs, the Dockerfile uses
known instructions and copies files that exist, and every distsvm command in them parses
with distsvm's own argument parser."""

from __future__ import annotations

import ast
import pathlib
import re
import shlex

import pytest
import yaml

from distsvm.arguments import build_parser

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DOCKERFILE_INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY",
                           "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD",
                           "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
DASK_COMMANDS = (["dask", "scheduler"], ["dask", "worker"])


def check_distsvm_command(argv: list[str]):
    """Parse a container's distsvm command with the CLI's parser (a usage error exits)."""
    assert argv[0] == "distsvm", argv
    argv = [re.sub(r"\$\((\w+)\)", "tcp://scheduler:8786", a) for a in argv[1:]]  # k8s $(VAR)
    return build_parser().parse_args(argv)


def check_command(argv: list[str]):
    if argv[0] == "distsvm":
        return check_distsvm_command(argv)
    assert argv[:2] in DASK_COMMANDS, argv
    return None


def dockerfile_instructions(path: pathlib.Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())  # line continuations
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile():
    steps = dockerfile_instructions(DEPLOY / "Dockerfile")
    assert steps[0][0] == "FROM"
    unknown = [w for w, _ in steps if w not in DOCKERFILE_INSTRUCTIONS]
    assert not unknown, f"unknown Dockerfile instructions {unknown}"
    env = " ".join(rest for w, rest in steps if w == "ENV")
    assert re.search(r"\bNUMBA_CACHE_DIR=/\S+", env)
    for w, rest in steps:
        if w == "COPY":  # the build context is the repository root
            *sources, _ = shlex.split(rest)
            for s in sources:
                assert (ROOT / s).exists(), f"COPY {s}: no such file in the repository"
    copied = {s for w, rest in steps if w == "COPY" for s in shlex.split(rest)[:-1]}
    assert {"pyproject.toml", "distsvm", "workers", "storage"} <= copied
    assert any(w == "RUN" and "pip install" in rest for w, rest in steps)
    assert any(w == "USER" and rest not in ("root", "0") for w, rest in steps)


def test_docker_compose():
    doc = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = doc["services"]
    assert {"scheduler", "worker", "train"} <= set(services)
    for s in services.values():
        assert s["image"] == "distsvm:latest"
        assert (DEPLOY / s["build"]["context"] / s["build"]["dockerfile"]).exists()
        check_command(s["command"])
    assert services["worker"]["deploy"]["replicas"] == 2
    assert "tcp://scheduler:8786" in services["worker"]["command"]
    train = check_distsvm_command(services["train"]["command"])
    assert train.command == "train" and train.scheduler == "tcp://scheduler:8786"
    ingest = check_distsvm_command(services["ingest"]["command"])
    assert ingest.store == train.store  # train reads what ingest wrote
    assert services["train"]["depends_on"]["ingest"]["condition"] == \
        "service_completed_successfully"
    for port in services["scheduler"].get("ports", []):
        assert port.startswith("127.0.0.1:"), "publish the dashboard on loopback only"


def _containers(spec: dict) -> list[dict]:
    return spec["spec"]["containers"]


@pytest.mark.parametrize("name", ["daskcluster.yaml", "daskjob.yaml"])
def test_kubernetes_manifests(name):
    docs = list(yaml.safe_load_all((DEPLOY / "k8s" / name).read_text()))
    assert docs and all(d["apiVersion"] == "kubernetes.dask.org/v1" for d in docs)
    for d in docs:
        assert d["metadata"]["name"]
        if d["kind"] == "DaskJob":
            [job] = _containers(d["spec"]["job"])
            args = check_distsvm_command(job["args"])
            assert args.scheduler == "tcp://scheduler:8786"  # from $(DASK_SCHEDULER_ADDRESS)
            cluster = d["spec"]["cluster"]["spec"]
            selector = cluster["scheduler"]["service"]["selector"]
            assert selector["dask.org/cluster-name"] == d["metadata"]["name"]
        else:
            assert d["kind"] == "DaskCluster"
            cluster = d["spec"]
        assert cluster["worker"]["replicas"] >= 1
        for role in ("worker", "scheduler"):
            for c in _containers(cluster[role]):
                assert c["image"] and c["args"][:2] == ["dask", role]
                if role == "worker":
                    assert {"name": "NUMBA_CACHE_DIR", "value": "/var/cache/numba"} in c["env"]
                    assert c["args"][c["args"].index("--nthreads") + 1] == "1"
        ports = {p["name"] for p in cluster["scheduler"]["service"]["ports"]}
        assert {"tcp-comm", "http-dashboard"} <= ports


def test_slurm_example():
    script = (DEPLOY / "slurm" / "train.sbatch").read_text()
    assert script.startswith("#!/bin/bash") and "#SBATCH" in script
    assert "NUMBA_CACHE_DIR" in script and "slurm_train.py" in script
    source = (DEPLOY / "slurm" / "slurm_train.py").read_text()
    compile(source, "slurm_train.py", "exec")  # a SyntaxError fails the test
    tree = ast.parse(source)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "SLURMCluster" in names
    assert re.search(r'main\(\["train", \*argv, "--scheduler"', source)
    check_distsvm_command(["distsvm", "train", "s.zarr", "m.model", "--scheduler",
                           "tcp://h:8786"])


def test_guide_names_every_deploy_file():
    guide = (ROOT / "docs" / "deploy.md").read_text()
    for f in ("deploy/Dockerfile", "deploy/docker-compose.yml", "deploy/k8s/daskcluster.yaml",
              "deploy/k8s/daskjob.yaml", "deploy/slurm/train.sbatch",
              "deploy/slurm/slurm_train.py", "NUMBA_CACHE_DIR", "--storage-option"):
        assert f in guide, f


def _dask_commands() -> list[tuple[str, list[str]]]:
    """(file, argv) of every `dask scheduler` / `dask worker` command of deploy/ and its
    guides: code blocks of the Markdown, container commands of the YAML and Dockerfile."""
    found = []
    for path in [*DEPLOY.rglob("*"), ROOT / "docs" / "deploy.md"]:
        if not path.is_file():
            continue
        text = path.read_text().replace("\\\n", " ")  # shell line continuations
        for m in re.finditer(r'\["dask", "(?:scheduler|worker)"[^\]]*\]', text):
            found.append((path.name, [a.strip(' "\n') for a in m.group(0)[1:-1].split(",")]))
        for m in re.finditer(r"^\s*(dask (?:scheduler|worker) [^\n`]*)", text, re.M):
            found.append((path.name, shlex.split(m.group(1))))
        for m in re.finditer(r"`(dask (?:scheduler|worker) [^`]*)`", text):
            found.append((path.name, shlex.split(m.group(1))))
    return found


# the commands that serve a dashboard on every interface, and the words in their file that
# say why (issue 30: loopback, or say why not)
ALL_INTERFACES_BECAUSE = {"docker-compose.yml": "forwards a published port to the container",
                          "Dockerfile": "Docker's port mapping cannot",
                          "daskcluster.yaml": "readiness probe and its ClusterIP service",
                          "daskjob.yaml": "for its ClusterIP service"}


def test_dask_dashboards_listen_on_loopback_or_say_why():
    commands = _dask_commands()
    assert len({f for f, _ in commands}) >= 5, commands  # README, compose, Dockerfile, k8s
    for name, argv in commands:
        if "--scheduler-file" in argv or "--no-dashboard" in argv:
            continue
        address = argv[argv.index("--dashboard-address") + 1] \
            if "--dashboard-address" in argv else None
        if address is not None and address.startswith("127.0.0.1:"):
            continue
        assert argv[:2] == ["dask", "scheduler"], (name, argv)  # workers: loopback always
        because = ALL_INTERFACES_BECAUSE.get(name)
        text = next(p for p in [*DEPLOY.rglob(name), ROOT / "docs" / name]
                    if p.exists()).read_text()
        assert because and because in text, (name, argv)


LISTENING = """
import json, os, sys
import psutil
from distsvm import cluster

def listening(pids):
    return sorted({s.laddr.ip for pid in pids for s in psutil.Process(pid).net_connections("tcp")
                   if s.status == psutil.CONN_LISTEN})

if sys.argv[1] == "in-process":
    c = cluster.embedded_client()
    print(json.dumps(listening([os.getpid()])))
else:
    with cluster.connect(n_workers=1) as c:
        print(json.dumps(listening([os.getpid(), *c.run(os.getpid).values()])))
"""


def _listening(kind: str) -> list[str]:
    import json
    import os
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", LISTENING, kind], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_embedded_cluster_of_processes_listens_on_loopback_only():
    assert _listening("processes") == ["127.0.0.1"]


def test_the_in_process_embedded_cluster_listens_on_loopback_only():
    assert _listening("in-process") == ["127.0.0.1"]
