"""Dependencies point one way: distsvm → workers → storage."""

import ast
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN = {"storage": {"workers", "distsvm"}, "workers": {"distsvm", "distributed"}}


def _imports(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


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


def test_namesakes_say_how_they_differ():
    """A module of distsvm/ that shares its file name with another module of distsvm/,
    workers/ or storage/ names that namesake in its docstring — but a solver's own three,
    one name by the layout's rule: distsvm/solvers/<name>.py (the coordinator),
    workers/<name>.py (its per-block tasks), workers/kernels/<name>.py (its kernels).
    (The namesakes under storage/ and workers/ are another's to write.)"""
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
            if p.parts[0] != "distsvm":
                continue
            doc = ast.get_docstring(ast.parse((REPO / p).read_text())) or ""
            missing += [f"{p} does not name {q}" for q in paths if q != p
                        and ".".join(q.with_suffix("").parts) not in doc]
    assert not missing, missing
