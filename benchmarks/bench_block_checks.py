"""Benchmark: the cost of checking a block's contents on load (issue 19 item 1).

Run from the repository root (the shared datasets must be present):

    python benchmarks/bench_block_checks.py [--block-mb 8]

Ingests a9a and news20 (8 MB blocks by default) into a temporary directory, then reads
every block three times with :func:`storage.read_row_block` (CRC-32 checks, decode and the
content checks) and times :func:`distsvm.storage.dataset.check_row_block` alone on the same
blocks; prints the medians and the checks' share of a read.
"""

from __future__ import annotations

import argparse
import lzma
import pathlib
import tempfile
import time

import numpy as np
from sklearn.datasets import load_svmlight_file

from distsvm.ingest import ingest
from distsvm.storage import dataset as ds

SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "datasets"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--block-mb", type=float, default=8)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, n in (("a9a", 123), ("news20", 1355191)):
            with lzma.open(SHARED / f"{name}.xz") as f:
                X, y = load_svmlight_file(f, n_features=n)
            d = ingest((X.astype(np.float32), y), f"{tmp}/{name}.zarr", block_mb=a.block_mb)
            limits = d.meta.blocks[0].limits
            reads, checks = [], []
            for _ in range(3):
                for info in d.meta.blocks:
                    t = time.perf_counter()
                    b = ds.read_row_block(d.url, info)
                    reads.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    ds.check_row_block(d.url, "rows/x", b, *limits)
                    checks.append(time.perf_counter() - t)
            r, c = np.median(reads), np.median(checks)
            print(f"{name}: {d.n_blocks} blocks of ~{d.meta.nnz // d.n_blocks} non-zeros: read "
                  f"{r * 1e3:.2f} ms (median, checks included), checks {c * 1e3:.3f} ms "
                  f"({100 * c / r:.1f}% of a read)")


if __name__ == "__main__":
    main()
