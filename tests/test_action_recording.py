"""Recording an action around the act: the intent before, the outcome after, idempotency
keys, retention of executions, and read-only envelopes kept only when asked (issue 12 item 9).

The store is made unwritable for real: a SQLite trigger that raises on the insert of an
intent or of an outcome, a PostgreSQL role without UPDATE on the executions.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, text, update

from slurmtower.actions import ActionStore, Catalogue
from slurmtower.actions.envelope import UNRECORDED_EXIT_CODE
from slurmtower.actions.store import StoreError
from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.errors import Conflict, NotFound
from slurmtower.runtime import Services
from slurmtower.settings import Settings, TokenEntry
from slurmtower.slurm import CliSlurmClient
from slurmtower.store.schema import action_audit, action_executions

from .conftest import node_states, sh
from .test_actions_api import Http
from .test_actions_cli import SCRIPT

pytestmark = pytest.mark.cluster

PG_URL = "postgresql+psycopg://postgres@127.0.0.1/test"
OPERATOR = "o-token-recording"


@pytest.fixture()
def catalogue(settings: Settings, client: CliSlurmClient) -> Iterator[Catalogue]:
    cat = Catalogue.from_settings(settings, client=client)
    yield cat
    cat.store.close()


def sqlite_trigger(cat: Catalogue, table: str, when: str) -> None:
    """Make the store refuse inserts into ``table`` matching ``when`` (as a full disk would)."""
    with cat.store.engine.begin() as conn:
        conn.execute(text(f"CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} WHEN {when} "
                          "BEGIN SELECT RAISE(ABORT, 'store unwritable'); END"))


def drain(cat: Catalogue, nodes: str, reason: str, key: str | None = None) -> Any:
    return cat.execute("slurm.node.drain", {"nodes": nodes, "reason": reason}, principal="alice", via="cli",
                       idempotency_key=key)


def reason_of(node: str) -> str:
    line = sh("scontrol", "-o", "show", "node", node)
    return line.split("Reason=", 1)[1].split(" [", 1)[0] if "Reason=" in line else ""


def test_intent_unwritable_refuses_and_changes_nothing(catalogue: Catalogue, clean_nodes: Any) -> None:
    sqlite_trigger(catalogue, "action_executions", "1")
    before = node_states()
    with pytest.raises(StoreError, match="cannot record the intent") as exc:
        drain(catalogue, "n1", "no store")
    assert exc.value.http_status == 503 and exc.value.exit_code == 69
    assert node_states() == before and "DRAIN" not in before["n1"]
    assert catalogue.store.list_audit() == []


def test_outcome_unwritable_keeps_the_intent_and_says_not_recorded(catalogue: Catalogue,
                                                                    clean_nodes: Any) -> None:
    sqlite_trigger(catalogue, "action_audit", "NEW.outcome <> 'intent'")
    env = drain(catalogue, "n1", "outcome lost", key="k-unrecorded")
    assert env.status == "succeeded" and not env.recorded
    assert env.exit_code == UNRECORDED_EXIT_CODE
    assert "ran (Slurm may have changed) but its outcome was not recorded" in env.stderr
    assert "DRAIN" in node_states()["n1"]  # the change was made
    records = catalogue.store.list_audit(execution_id=env.execution_id)
    assert [(r.outcome, r.nodes, r.who) for r in records] == [("intent", "n1", "alice")]
    assert "outcome is unknown" in records[0].message
    with pytest.raises(Conflict, match="no recorded outcome"):
        catalogue.get_execution(env.execution_id)
    # a retry with the key does not act on an unknown outcome
    sh("scontrol", "update", "nodename=n1", "state=resume")
    with pytest.raises(Conflict, match="no recorded outcome") as exc:
        drain(catalogue, "n1", "outcome lost", key="k-unrecorded")
    assert exc.value.http_status == 409
    assert "DRAIN" not in node_states()["n1"]


def test_outcome_unwritable_over_http_and_cli(settings: Settings, client: CliSlurmClient, clean_nodes: Any,
                                              devcluster: Any, tmp_path: Any) -> None:
    settings.auth.tokens = [TokenEntry(name="op", role="operator", sha256=hash_token(OPERATOR))]
    http = Http(create_app(services=Services(settings=settings, client=client)))
    cat = http.app.state.services.action_catalogue()
    sqlite_trigger(cat, "action_audit", "NEW.outcome <> 'intent'")
    resp = http.post("/actions/slurm.node.drain", json={"nodes": "n2", "reason": "http lost"},
                     headers={"Authorization": f"Bearer {OPERATOR}"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["recorded"] is False and body["exit_code"] == UNRECORDED_EXIT_CODE
    assert "not recorded" in body["stderr"] and "Traceback" not in resp.text
    assert "DRAIN" in node_states()["n2"]
    import os
    import subprocess

    env = {**os.environ, "SLURM_CONF": str(devcluster.slurm_conf), "SLURMTOWER_CONFIG": str(devcluster.tower_conf),
           "SLURMTOWER_STATE_DIR": str(tmp_path)}
    env.pop("SUDO_USER", None)
    proc = subprocess.run([SCRIPT, "run", "slurm.node.drain", "nodes=n3", "reason=cli lost"], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    assert proc.returncode == UNRECORDED_EXIT_CODE, proc.stderr
    assert any(line.startswith("slurmtower: error: slurm.node.drain ran (Slurm may have changed) but its "
                               "outcome was not recorded") for line in proc.stderr.splitlines()), proc.stderr
    assert "Traceback" not in proc.stderr and "DRAIN" in node_states()["n3"]
    with cat.store.engine.begin() as conn:
        conn.execute(text("DROP TRIGGER refuse_action_audit"))
        conn.execute(text("CREATE TRIGGER refuse_action_executions BEFORE INSERT ON action_executions "
                          "BEGIN SELECT RAISE(ABORT, 'store unwritable'); END"))
    before = node_states()
    resp = http.post("/actions/slurm.node.drain", json={"nodes": "n4", "reason": "no intent"},
                     headers={"Authorization": f"Bearer {OPERATOR}"})
    assert resp.status_code == 503 and resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["title"] == "action store unavailable"
    proc = subprocess.run([SCRIPT, "run", "slurm.node.drain", "nodes=n4", "reason=no intent"], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 69, proc.stderr
    assert node_states() == before


@pytest.fixture()
def pg_role_store(settings: Settings) -> Iterator[tuple[str, str, Any]]:
    """A store in a scratch PostgreSQL schema, opened by a role that may insert and read."""
    admin = create_engine(PG_URL, connect_args={"connect_timeout": 3})
    try:
        with admin.connect():
            pass
    except Exception as exc:  # noqa: BLE001 - no PostgreSQL: skip
        pytest.skip(f"no PostgreSQL at {PG_URL}: {exc}")
    schema, role = f"st_rec_{uuid.uuid4().hex[:10]}", f"st_rec_{uuid.uuid4().hex[:10]}"
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        conn.execute(text(f'CREATE ROLE "{role}" LOGIN'))
    ActionStore(f"{PG_URL}?options=-csearch_path%3D{schema}").close()
    with admin.begin() as conn:
        conn.execute(text(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"'))
        conn.execute(text(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"'))
        conn.execute(text(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{schema}" TO "{role}"'))
    url = f"postgresql+psycopg://{role}@127.0.0.1/test?options=-csearch_path%3D{schema}"
    yield url, f'"{schema}"."action_executions" FROM "{role}"', admin
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        conn.execute(text(f'DROP ROLE "{role}"'))
    admin.dispose()


def test_postgresql_role_losing_update_keeps_the_intent(settings: Settings, client: CliSlurmClient,
                                                        clean_nodes: Any, pg_role_store: tuple[str, str, Any]) -> None:
    url, grant_target, admin = pg_role_store
    cat = Catalogue(client, ActionStore(url), settings=settings)
    try:
        ok = drain(cat, "n1", "pg recorded")
        assert ok.recorded and cat.get_execution(ok.execution_id).status == "succeeded"
        with admin.begin() as conn:  # the store loses the outcome path between two actions
            conn.execute(text(f"REVOKE UPDATE ON {grant_target}"))
        env = drain(cat, "n2", "pg lost")
        assert not env.recorded and env.exit_code == UNRECORDED_EXIT_CODE and "DRAIN" in node_states()["n2"]
        assert [r.outcome for r in cat.store.list_audit(execution_id=env.execution_id)] == ["intent"]
        with admin.begin() as conn:
            conn.execute(text(f"REVOKE INSERT ON {grant_target}"))
        with pytest.raises(StoreError):
            drain(cat, "n3", "pg no intent")
        assert "DRAIN" not in node_states()["n3"]
    finally:
        cat.store.close()


def test_an_audit_page_bound_past_every_seq_reads_from_the_newest(pg_role_store: tuple[str, str, Any]) -> None:
    """``GET /audit?before=`` takes any id up to 2**63-1; the seq is a 32-bit integer on
    PostgreSQL, where a larger bound was an "integer out of range" (a 503)."""
    store = ActionStore(pg_role_store[0])
    try:
        for i in range(3):
            store.append_audit(execution_id=f"x{i}", at=datetime.now(UTC), who="t", via="api", action="a",
                               parameters={}, nodes=None, before={}, after={}, outcome="intent")
        newest = store.list_audit(limit=3)
        assert [r.execution_id for r in newest] == ["x2", "x1", "x0"]
        assert store.list_audit(limit=3, before=54518813158) == newest
        assert store.list_audit(limit=3, before=2**63 - 1) == newest
        assert [r.execution_id for r in store.list_audit(before=newest[0].seq)] == ["x1", "x0"]
    finally:
        store.close()


def test_retry_with_the_same_key_does_not_drain_twice(catalogue: Catalogue, clean_nodes: Any,
                                                      runner: Any) -> None:
    first = drain(catalogue, "n2", "psu swap", key="retry-1")
    assert first.status == "succeeded" and first.recorded
    assert reason_of("n2") == "psu swap"
    calls: list[str] = []
    runner.observers.append(lambda kind, _s, _ok: calls.append(kind))
    try:
        again = drain(catalogue, "n2", "psu swap", key="retry-1")
    finally:
        runner.observers.pop()
    assert again == first and calls == []  # the first envelope, and not one Slurm command
    assert reason_of("n2") == "psu swap"
    drains = catalogue.store.list_audit(action="slurm.node.drain")
    assert [(r.outcome, r.execution_id) for r in drains] == [("succeeded", first.execution_id),
                                                             ("intent", first.execution_id)]
    with pytest.raises(Conflict, match="another action or other parameters") as exc:
        drain(catalogue, "n2", "other reason", key="retry-1")
    assert exc.value.extra["param"] == "idempotency_key" and reason_of("n2") == "psu swap"
    # keys are per principal: bob's retry-1 is his own
    bob = catalogue.execute("slurm.node.drain", {"nodes": "n2", "reason": "psu swap", "force": True},
                            principal="bob", via="cli", idempotency_key="retry-1")
    assert bob.execution_id != first.execution_id


def test_idempotency_key_header_over_http(settings: Settings, client: CliSlurmClient, clean_nodes: Any) -> None:
    settings.auth.tokens = [TokenEntry(name="op", role="operator", sha256=hash_token(OPERATOR))]
    http = Http(create_app(services=Services(settings=settings, client=client)))
    headers = {"Authorization": f"Bearer {OPERATOR}", "Idempotency-Key": "http-1"}
    body = {"nodes": "n3", "reason": "fan"}
    first = http.post("/actions/slurm.node.drain", json=body, headers=headers)
    again = http.post("/actions/slurm.node.drain", json=body, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    other = http.post("/actions/slurm.node.drain", json={**body, "reason": "other"}, headers=headers)
    assert other.status_code == 409 and other.json()["param"] == "idempotency_key"
    store = http.app.state.services.action_catalogue().store
    assert [r.outcome for r in store.list_audit(action="slurm.node.drain")] == ["succeeded", "intent"]
    assert reason_of("n3") == "fan"


def test_retention_purges_old_executions(settings: Settings, client: CliSlurmClient) -> None:
    settings.actions.retention_days = 30
    services = Services(settings=settings, client=client)
    create_app(services=services)
    cat = services.action_catalogue()
    old = cat.execute("slurm.node.drain", {"nodes": "n1", "reason": "x", "dry_run": True}, principal="alice", via="cli")
    new = cat.execute("slurm.node.drain", {"nodes": "n1", "reason": "x", "dry_run": True}, principal="alice", via="cli")
    with cat.store.engine.begin() as conn:
        conn.execute(update(action_executions).where(action_executions.c.execution_id == old.execution_id)
                     .values(started_at=datetime.now(UTC) - timedelta(days=31)))
    task = next(t for t in services.background if t.name == "execution-purge")
    assert task.needs_leader and task.role == "archiver"
    assert asyncio.run(task.run()) == settings.actions.purge_interval
    with pytest.raises(NotFound):
        cat.get_execution(old.execution_id)
    assert cat.get_execution(new.execution_id) == new
    assert len(cat.store.list_audit(execution_id=old.execution_id)) == 2  # the audit log is kept
    cat.store.close()


def test_read_only_envelopes_are_kept_only_when_asked(settings: Settings, client: CliSlurmClient) -> None:
    cat = Catalogue.from_settings(settings, client=client)
    env = cat.execute("slurm.node.get", {"nodes": "n1"}, principal="alice", via="cli")
    with pytest.raises(NotFound):
        cat.get_execution(env.execution_id)
    settings.actions.record_reads = True
    env = cat.execute("slurm.node.get", {"nodes": "n1"}, principal="alice", via="cli")
    assert cat.get_execution(env.execution_id) == env
    assert cat.store.list_audit() == []  # reads are never audited
    cat.store.close()


def test_db_purge_removes_executions_past_the_retention(settings: Settings, client: CliSlurmClient,
                                                        devcluster: Any, tmp_path: Any) -> None:
    import json
    import os
    import subprocess

    cat = Catalogue.from_settings(settings, client=client)
    old = cat.execute("slurm.node.drain", {"nodes": "n1", "reason": "x", "dry_run": True}, principal="alice", via="cli")
    new = cat.execute("slurm.node.drain", {"nodes": "n1", "reason": "x", "dry_run": True}, principal="alice", via="cli")
    with cat.store.engine.begin() as conn:
        conn.execute(update(action_executions).where(action_executions.c.execution_id == old.execution_id)
                     .values(started_at=datetime.now(UTC) - timedelta(days=91)))
        # The old run's audit records: 401 days old, past actions.audit_retention_days (400).
        conn.execute(update(action_audit).where(action_audit.c.execution_id == old.execution_id)
                     .values(at=datetime.now(UTC) - timedelta(days=401)))
    env = {**os.environ, "SLURM_CONF": str(devcluster.slurm_conf), "SLURMTOWER_CONFIG": str(devcluster.tower_conf),
           "SLURMTOWER_STATE_DIR": str(tmp_path)}
    proc = subprocess.run([SCRIPT, "db", "purge", "--output", "json"], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert {k: v for k, v in json.loads(proc.stdout).items() if "purged" in k} == {"purged": 1, "audit_purged": 2}
    with pytest.raises(NotFound):
        cat.get_execution(old.execution_id)
    assert cat.get_execution(new.execution_id) == new
    assert cat.store.list_audit(execution_id=old.execution_id) == []
    assert [r.outcome for r in cat.store.list_audit(execution_id=new.execution_id)] == ["dry_run", "intent"]
    cat.store.close()


def test_two_concurrent_retries_with_one_key_drain_once(settings: Settings, client: CliSlurmClient,
                                                        clean_nodes: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    cats = [Catalogue.from_settings(settings, client=client) for _ in range(2)]  # two processes' stores

    def attempt(cat: Catalogue) -> str:
        try:
            return drain(cat, "n4", "raced", key="race-1").execution_id
        except Conflict as exc:  # the first one is still running: not run again
            assert "no recorded outcome" in exc.message
            return "conflict"

    try:
        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(attempt, cats))
        audit = cats[0].store.list_audit(action="slurm.node.drain")
        intents = [r for r in audit if r.outcome == "intent"]
        assert len(intents) == 1 and [r.outcome for r in audit] == ["succeeded", "intent"]
        assert set(outcomes) <= {intents[0].execution_id, "conflict"} and intents[0].execution_id in outcomes
        assert reason_of("n4") == "raced"
    finally:
        for cat in cats:
            cat.store.close()
