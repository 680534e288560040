"""Conformance suites for whoever adds a solver or a block reader (as zarr ships ``StoreTests``).

Subclass :class:`SolverTests` (distsvm.testing.solver_tests) for a solver of the registry,
:class:`ReaderTests` (distsvm.testing.reader_tests) for a reader of a store's blocks; the
project's own subclasses are ``tests/test_solvers.py`` and ``tests/test_columns.py``.  The
suites need pytest (the ``test`` extra).
"""

from .reader_tests import ReaderTests
from .solver_tests import Case, Killer, SolverTests, local_client

__all__ = ["Case", "Killer", "ReaderTests", "SolverTests", "local_client"]
