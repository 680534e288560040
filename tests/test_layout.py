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
