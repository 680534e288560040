"""Airflow DAG: the distsvm scheduled batch pipeline, daily, one interval per run.

Each run points the pipeline at that day's partition directory; the exit codes of
``distsvm pipeline run`` (docs/pipeline.md) decide the task's state: 0 (promoted or
nothing to do) succeeds, 3 (candidate not promoted) is skipped so it stands out without
failing the DAG, 2 (bad input) fails without retry, 1 (failure) fails and is retried.
Re-running a day (clear the task) is safe: the pipeline is idempotent.
"""

from __future__ import annotations

import datetime
import subprocess

from airflow.decorators import dag, task
from airflow.exceptions import AirflowFailException, AirflowSkipException

SPEC = "/etc/distsvm/pipeline.yaml"  # partitions: /incoming/a9a/{{ ds }}/*.svm
DISTSVM = "/opt/distsvm/venv/bin/distsvm"


@dag(schedule="15 2 * * *", start_date=datetime.datetime(2026, 1, 1), catchup=False,
     default_args={"retries": 2, "retry_delay": datetime.timedelta(minutes=30)},
     tags=["distsvm"])
def distsvm_pipeline():
    @task
    def retrain(ds=None):
        # --ds: the interval's date replaces {{ ds }} in the spec's strings
        code = subprocess.run([DISTSVM, "pipeline", "run", SPEC, "--ds", ds,
                               "--json"]).returncode
        if code == 3:
            raise AirflowSkipException("candidate not promoted (worse on the holdout)")
        if code == 2:
            raise AirflowFailException("bad input: see the task log")
        if code != 0:
            raise RuntimeError(f"distsvm pipeline failed with exit status {code}")

    retrain()


distsvm_pipeline()
