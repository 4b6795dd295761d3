"""``sacctmgr -P show assoc`` of the running devcluster parses into what the cluster holds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from slurmtower.accounting import AccountingDB
from slurmtower.devcluster import DevCluster
from slurmtower.models.accounting import Association
from slurmtower.settings import Settings
from slurmtower.slurm import adapters as ad

from .conftest import sh

pytestmark = pytest.mark.cluster

#: The associations ``slurmtower devcluster up`` creates (root/root comes with the cluster).
CREATED = {("physics", "alice"), ("physics", "bob"), ("physics", "root"), ("chemistry", "bob"), ("root", "root")}
LIMITS_ACCOUNT = "st_assoc_limits"


def _show_assoc(*args: str) -> list[Association]:
    return ad.parse_associations_text(sh("sacctmgr", "-P", "show", "assoc", *args))


def test_sacctmgr_text_gives_the_accounts_and_users_the_devcluster_created(devcluster: DevCluster) -> None:
    mine = [a for a in _show_assoc() if a.cluster == devcluster.cluster_name]
    # Other tests may add partition associations (alice in short); the base ones have none.
    base = [a for a in mine if a.partition is None]
    assert {a.account for a in base if a.user is None} >= {"root", "physics", "chemistry"}
    assert {(a.account, a.user) for a in base if a.user is not None} == CREATED
    assert all(a.shares is not None and a.id is None for a in mine)


def test_ids_and_parents_asked_for_by_format_match_slurmdbd(devcluster: DevCluster, settings: Settings) -> None:
    text = _show_assoc("format=ID,Cluster,Account,User,Partition,ParentName,Share", f"cluster={devcluster.cluster_name}")
    parents = {a.account: a.parent_account for a in text if a.user is None}
    assert (parents["root"], parents["physics"], parents["chemistry"]) == (None, "root", "root")
    from_db = {(a.account, u.name, a.partition): a.id for u in AccountingDB.from_settings(settings).users()
               for a in u.associations}
    from_text = {(a.account, a.user, a.partition): a.id for a in text if a.user is not None}
    assert from_text == from_db
    assert all(isinstance(i, int) and i > 0 for i in from_text.values())


@pytest.fixture()
def limited_association(devcluster: DevCluster) -> Iterator[str]:
    """A throwaway account with alice in it and every limit sacctmgr's default columns show."""
    sh("sacctmgr", "-i", "add", "account", LIMITS_ACCOUNT, "Description=slurmtower test", "Organization=tests",
       "Fairshare=parent", "GrpTRES=cpu=4,mem=2G", "GrpWall=2-00:00:00")
    try:
        sh("sacctmgr", "-i", "add", "user", "alice", f"Account={LIMITS_ACCOUNT}")
        sh("sacctmgr", "-i", "modify", "user", "where", "name=alice", f"account={LIMITS_ACCOUNT}", "set",
           "GrpTRES=cpu=4,mem=2G", "MaxTRES=cpu=2,mem=1000M,node=1", "MaxTRESPerNode=cpu=1",
           "MaxWall=1-12:00:00", "MaxJobs=3", "GrpJobs=6", "GrpSubmit=10", "MaxSubmit=5",
           "MaxTRESMins=cpu=600", "GrpTRESMins=cpu=6000,mem=3G", "Priority=9")
        yield LIMITS_ACCOUNT
    finally:
        sh("sacctmgr", "-i", "delete", "user", "alice", f"account={LIMITS_ACCOUNT}", check=False)
        sh("sacctmgr", "-i", "delete", "account", LIMITS_ACCOUNT, check=False)


def test_limits_set_with_sacctmgr_parse_like_slurmdbd_stores_them(
    limited_association: str, devcluster: DevCluster, settings: Settings
) -> None:
    by_user = {a.user: a for a in _show_assoc(f"account={limited_association}", f"cluster={devcluster.cluster_name}")}
    assert set(by_user) == {None, "alice"}
    account, alice = by_user[None], by_user["alice"]
    assert account.shares == 0x7FFFFFFF  # Fairshare=parent
    assert account.limits.grp_tres == {"cpu": 4, "mem": 2048} and account.limits.grp_wall_minutes == 2 * 24 * 60
    limits = alice.limits
    assert limits.max_tres_per_job == {"cpu": 2, "mem": 1000, "node": 1}
    assert limits.max_tres_per_node == {"cpu": 1}
    assert limits.max_wall_minutes == 36 * 60
    assert (limits.max_jobs, limits.grp_jobs, limits.grp_submit_jobs, limits.max_submit_jobs) == (3, 6, 10, 5)
    assert limits.max_tres_minutes_per_job == {"cpu": 600}
    assert limits.grp_tres_minutes == {"cpu": 6000, "mem": 3072}
    assert (alice.priority, alice.shares, alice.qos) == (9, 1, ["normal"])
    (stored,) = [a for u in AccountingDB.from_settings(settings).users("alice") for a in u.associations
                 if a.account == limited_association]
    assert stored.limits == alice.limits
    assert (stored.priority, stored.shares) == (alice.priority, alice.shares)
