"""Start Dask workers as Slurm jobs with dask-jobqueue and run `distsvm train` on them.

    python deploy/slurm/slurm_train.py STORE MODEL [distsvm train options…]

Run from a login node or, better, from the small coordinator job ``train.sbatch``.  Each
worker job is one node-slice of ``CORES`` cores with one single-threaded Dask worker
process per core (distsvm's kernels are single-threaded and release the GIL).  Set the
partition, account and sizes for your site below or through the environment.
"""

from __future__ import annotations

import os
import sys

from dask_jobqueue import SLURMCluster
from distributed import Client

from distsvm.cli import main

CORES = int(os.environ.get("DISTSVM_WORKER_CORES", "8"))
MEMORY = os.environ.get("DISTSVM_WORKER_MEMORY", "48GB")  # per worker job
JOBS = int(os.environ.get("DISTSVM_WORKER_JOBS", "2"))
NUMBA_CACHE_DIR = os.environ.get("NUMBA_CACHE_DIR", "/tmp/numba-cache")


def cluster() -> SLURMCluster:
    return SLURMCluster(
        cores=CORES,
        processes=CORES,  # one process per core, one thread each
        memory=MEMORY,
        walltime=os.environ.get("DISTSVM_WALLTIME", "04:00:00"),
        queue=os.environ.get("DISTSVM_PARTITION"),
        account=os.environ.get("DISTSVM_ACCOUNT"),
        job_name="distsvm-worker",
        job_script_prologue=[f"export NUMBA_CACHE_DIR={NUMBA_CACHE_DIR}"],
        # dashboards on loopback only (Dask's default is every interface of the nodes):
        # the scheduler's in this process (ssh -L to the node it runs on to see it)
        worker_extra_args=["--nthreads", "1", "--dashboard-address", "127.0.0.1:0"],
        scheduler_options={"dashboard_address": "127.0.0.1:0"},
        log_directory=os.environ.get("DISTSVM_LOG_DIR", "dask-logs"),
    )


def run(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    with cluster() as c, Client(c) as client:
        c.scale(jobs=JOBS)
        client.wait_for_workers(JOBS * CORES, timeout=3600)  # the queue may be slow
        return main(["train", *argv, "--scheduler", c.scheduler_address])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
