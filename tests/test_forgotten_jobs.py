"""Jobs slurmctld has forgotten (MinJobAge) read from accounting by the catalogue.

Their jobs end when the session starts (tests/conftest.py ``ForgottenJobs``) and slurmctld
forgets them up to two minutes later, while the modules before this one run.
"""

from __future__ import annotations

import pytest

from slurmtower.actions import Catalogue
from slurmtower.slurm import CliSlurmClient

from .conftest import ForgottenJobs, forgotten, sacct_runs
from .test_actions import catalogue, run  # noqa: F401 - catalogue: the fixture test_actions has

pytestmark = [pytest.mark.cluster, pytest.mark.release]


@pytest.fixture(scope="module")
def forgotten_job(forgotten_jobs: ForgottenJobs | None) -> int:
    """root's job slurmctld has forgotten (MinJobAge=60) but accounting keeps."""
    assert forgotten_jobs is not None
    return forgotten(forgotten_jobs.root)


def test_job_get_from_accounting_after_min_job_age(catalogue: Catalogue, forgotten_job: int) -> None:  # noqa: F811
    env = run(catalogue, "slurm.job.get", {"jobids": [forgotten_job]})
    record = env.result[str(forgotten_job)][0]
    assert record["from_accounting"] is True
    assert record["job_id"] == forgotten_job and record["state"] == "COMPLETED"
    steps = run(catalogue, "slurm.job.step.get", {"jobids": [forgotten_job]}).result[str(forgotten_job)]
    assert steps and all(s["from_accounting"] is True for s in steps.values())
    found = run(catalogue, "slurm.job.find", {"criterias": {"job_id": forgotten_job},
                                              "include_finished": True}).result
    assert found == [forgotten_job]
    assert run(catalogue, "slurm.job.find", {"criterias": {"job_id": forgotten_job}}).result == []


def test_job_get_gives_each_run_of_a_requeued_job(catalogue: Catalogue, client: CliSlurmClient,  # noqa: F811
                                                 requeued_job: int) -> None:
    """From accounting (slurmctld forgot it after MinJobAge), one record per run, the runs
    told apart by sluid on 26.05+ as sacct tells them."""
    forgotten(requeued_job)
    assert requeued_job not in set(client.job_ids())
    records = run(catalogue, "slurm.job.get", {"jobids": [requeued_job]}).result[str(requeued_job)]
    assert all(r["from_accounting"] is True and r["job_id"] == requeued_job for r in records)
    assert [(r["state"], r["sluid"]) for r in records] == \
        [(r["State"], r["SLUID"] or None) for r in reversed(sacct_runs(requeued_job))]
    assert len({r["job_db_inx"] for r in records}) == 2
