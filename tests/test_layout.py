"""Dependencies point one way: distsvm → workers → storage."""

import ast
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN = {"storage": {"workers", "distsvm"}, "workers": {"distsvm", "distributed"}}


def _floor(module: str) -> str:
    """The floor a module belongs to: distsvm.workers.x → workers, distsvm.storage → storage,
    distsvm.jobs → distsvm; anything else → its top-level name."""
    parts = module.split(".")
    return parts[1] if parts[0] == "distsvm" and parts[1:2] in (["workers"], ["storage"]) else parts[0]


def _imports(path):
    """(line, floor) of each import in a file; a relative import that climbs out of the
    workers or storage package (``from .. import``) lands in distsvm."""
    tree = ast.parse(path.read_text(), filename=str(path))
    depth = len(path.relative_to(REPO).parts) - 1  # workers/kernels/x.py: 2 levels to its top
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, _floor(a.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, _floor(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > depth:
            yield node.lineno, "distsvm"


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_reverse_imports(package):
    bad = [f"{p.relative_to(REPO)}:{line} imports {mod}"
           for p in sorted((REPO / package).rglob("*.py"))
           for line, mod in _imports(p) if mod in FORBIDDEN[package]]
    assert not bad, "imports against distsvm → workers → storage: " + "; ".join(bad)


def test_the_check_sees_imports():
    """The scan above must find real imports, or it could never fail."""
    found = {mod for p in (REPO / "distsvm").rglob("*.py") for _, mod in _imports(p)}
    assert {"workers", "storage"} <= found
    assert [m for _, m in _imports(REPO / "workers" / "kernels" / "dcd.py")] != []


def _python_files():
    for folder in ("distsvm", "workers", "storage", "tests", "benchmarks", "deploy", "docs"):
        yield from sorted((REPO / folder).rglob("*.py"))


def test_nothing_imports_the_generic_top_level_names():
    """workers and storage are distsvm.workers and distsvm.storage (issue 29.1): an import of a
    top-level ``storage`` or ``workers`` would find a user's own storage.py first."""
    bad = []
    for p in _python_files():
        for node in ast.walk(ast.parse(p.read_text(), filename=str(p))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                     else [])
            bad += [f"{p.relative_to(REPO)}:{node.lineno} imports {n}" for n in names
                    if n and n.split(".")[0] in ("storage", "workers")]
    assert not bad, bad


def test_the_installed_packages_are_the_folders():
    """pyproject's package list names every package folder of the three floors, and each
    under distsvm (nothing generic at the top of site-packages)."""
    import tomllib

    conf = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    where = {"distsvm": "distsvm", **conf["package-dir"]}
    folders = {p.parent.relative_to(REPO).as_posix() for floor in ("distsvm", "workers", "storage")
               for p in (REPO / floor).rglob("__init__.py")}
    listed = {}
    for name in conf["packages"]:
        assert name.split(".")[0] == "distsvm", name
        head = max((k for k in where if name == k or name.startswith(k + ".")), key=len)
        listed[name] = "/".join([where[head], *name[len(head):].split(".")[1:]])
    assert set(listed.values()) == folders


def _distsvm_modules() -> dict[str, pathlib.Path]:
    """{dotted name: file} of every module under distsvm/ (a package by its own name)."""
    mods = {}
    for p in sorted((REPO / "distsvm").rglob("*.py")):
        parts = p.relative_to(REPO).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return mods


def _imported(name: str, path: pathlib.Path, mods: dict):
    """(line, module, names taken) of each distsvm module that ``name`` imports — anywhere
    in it, inside functions too; the package itself (its ``__version__``) is no module of
    this check."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found = [(a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            found = [(f"{base}.{a.name}", ()) if f"{base}.{a.name}" in mods
                     else (base, (a.name,)) for a in node.names]
        else:
            continue
        for module, names in found:
            while module not in mods and "." in module:
                module = module.rpartition(".")[0]
            if module in mods and module not in (name, "distsvm"):
                yield node.lineno, module, names


def _cycles(graph: dict) -> list[list]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_under_distsvm():
    """No two modules of distsvm/ import each other, however indirectly, not even by an
    import inside a function (which hides a cycle from the import machinery)."""
    mods = _distsvm_modules()
    graph = {n: {m for _, m, _ in _imported(n, p, mods)} for n, p in mods.items()}
    assert _cycles(graph) == [], _cycles(graph)


def test_the_cycle_check_sees_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    mods = _distsvm_modules()
    assert {"distsvm.jobs", "distsvm.solvers.registry"} <= {  # inside functions too
        m for _, m, _ in _imported("distsvm.cli", mods["distsvm.cli"], mods)}


def test_no_module_takes_another_s_private_names():
    """No distsvm module imports a private name (``_name``) of another, nor reads one off a
    module it imported."""
    mods = _distsvm_modules()
    bad = []
    for name, path in mods.items():
        imported = list(_imported(name, path, mods))
        bad += [f"{path.relative_to(REPO)}:{line} imports {m}.{n}" for line, m, names in imported
                for n in names if n.startswith("_") and not n.startswith("__")]
        aliases = {m.rpartition(".")[2] for _, m, names in imported if not names}
        bad += [f"{path.relative_to(REPO)}:{node.lineno} reads {node.value.id}.{node.attr}"
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr.startswith("_")
                and not node.attr.startswith("__")]
    assert not bad, bad


def _dotted(path: pathlib.Path) -> str:
    """A module's import name: workers/dcd.py → distsvm.workers.dcd."""
    parts = path.with_suffix("").parts
    return ".".join(parts if parts[0] == "distsvm" else ("distsvm", *parts))


def test_namesakes_say_how_they_differ():
    """A module that shares its file name with another module of distsvm/, workers/ or
    storage/ names that namesake in its docstring (as it imports: distsvm.storage.ingest) —
    but a solver's own three, one name by the layout's rule: distsvm/solvers/<name>.py (the
    coordinator), workers/<name>.py (its per-block tasks), workers/kernels/<name>.py (its
    kernels)."""
    by_name: dict = {}
    for package in ("distsvm", "workers", "storage"):
        for p in (REPO / package).rglob("*.py"):
            if p.name != "__init__.py":
                by_name.setdefault(p.stem, []).append(p.relative_to(REPO))
    solver = {pathlib.Path("distsvm/solvers"), pathlib.Path("workers"),
              pathlib.Path("workers/kernels")}
    missing = []
    for paths in by_name.values():
        if len(paths) < 2 or {p.parent for p in paths} <= solver:
            continue
        for p in paths:
            doc = ast.get_docstring(ast.parse((REPO / p).read_text())) or ""
            missing += [f"{p} does not name {q}" for q in paths if q != p
                        and _dotted(q) not in doc]
    assert not missing, missing


def test_the_installed_distribution_is_one_namespace(tmp_path):
    """Installed (``pip install .``), distsvm is the only package at the top of
    site-packages, and a user's own storage.py and workers/ beside their script shadow
    nothing: the estimator fits and the workers' kernels run (issue 29.1)."""
    site, src = tmp_path / "site", tmp_path / "src"  # a copy: pip builds in the tree it gets
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for floor in ("distsvm", "workers", "storage"):
        shutil.copytree(REPO / floor, src / floor, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--target", str(site), str(src)], check=True, capture_output=True, timeout=300)
    top = sorted(p.name for p in site.iterdir() if not p.name.endswith(".dist-info") and p.name != "bin")
    assert top == ["distsvm"], top
    assert (site / "distsvm" / "workers" / "kernels" / "dcd.py").is_file()
    assert (site / "distsvm" / "storage" / "dataset.py").is_file()
    proj = tmp_path / "proj"
    (proj / "workers").mkdir(parents=True)
    (proj / "storage.py").write_text("x = 1\n")
    (proj / "workers" / "__init__.py").write_text("raise ImportError('the user s own workers')\n")
    code = ("import numpy as np, distsvm\n"
            "rng = np.random.default_rng(0)\n"
            "X = rng.normal(size=(200, 5)); y = np.where(X[:, 0] + 0.1 * X[:, 1] > 0, 1, -1)\n"
            "m = distsvm.LinearSVC().fit(X, y)\n"
            "print(distsvm.__file__); print(m.score(X, y))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=proj, env={**env, "PYTHONPATH": str(site)},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    where, score = out.stdout.split()
    assert where.startswith(str(site)) and float(score) > 0.95
