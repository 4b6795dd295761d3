"""The slurmrestd backend against the devcluster's real slurmrestd (22.05: API v0.0.36-38)."""

from __future__ import annotations

import httpx
import pytest

from slurmtower.devcluster import DevCluster
from slurmtower.errors import NotFound, SlurmRequestError, SlurmUnavailable, Unsupported
from slurmtower.nodeset import parse_nodeset
from slurmtower.settings import Settings
from slurmtower.slurm import CliSlurmClient, RestSlurmClient, make_client

pytestmark = pytest.mark.cluster


@pytest.fixture()
def rest(devcluster: DevCluster) -> RestSlurmClient:
    client = RestSlurmClient(f"http://127.0.0.1:{devcluster.rest_port}", user="root",
                             jwt_key_file=devcluster.jwt_key)
    yield client  # type: ignore[misc]
    client.close()


def test_detects_the_newest_api_version_the_server_offers(rest: RestSlurmClient) -> None:
    caps = rest.capabilities()
    assert caps.backend == "rest"
    assert caps.rest_api_versions == ("v0.0.36", "v0.0.37", "v0.0.38")
    assert (caps.version.major, caps.version.minor) == (22, 5)
    assert caps.rest_node_update is False
    assert "update_nodes" in caps.unsupported and "config" in caps.unsupported


def test_reads_give_the_same_models_as_the_cli(rest: RestSlurmClient, client: CliSlurmClient) -> None:
    rest_nodes = {n.name: n for n in rest.nodes()}
    cli_nodes = {n.name: n for n in client.nodes()}
    assert rest_nodes.keys() == cli_nodes.keys()
    for name, node in cli_nodes.items():
        assert rest_nodes[name].cpus == node.cpus
        assert rest_nodes[name].real_memory_mib == node.real_memory_mib
        assert rest_nodes[name].state == node.state
        assert rest_nodes[name].flags == node.flags
    assert {p.name for p in rest.partitions()} == {p.name for p in client.partitions()}
    assert {j.job_id for j in rest.jobs()} >= {j.job_id for j in client.jobs() if j.state and
                                                j.state.value in ("PENDING", "RUNNING")}
    assert rest.stats().server_thread_count is not None
    assert rest.ping() is True
    with pytest.raises(NotFound):
        rest.nodes(parse_nodeset("n[4-5]"))


def test_says_clearly_what_slurmrestd_2205_cannot_do(rest: RestSlurmClient) -> None:
    with pytest.raises(Unsupported, match="cannot update nodes"):
        rest.drain(parse_nodeset("n1"), reason="x")
    with pytest.raises(Unsupported, match="configuration"):
        rest.config()
    with pytest.raises(Unsupported, match="reservations"):
        rest.create_reservation("x", nodes=parse_nodeset("n1"))


def test_make_client_rest_falls_back_to_the_cli_for_writes(devcluster: DevCluster, settings: Settings) -> None:
    settings.slurm.backend = "rest"
    client = make_client(settings)
    assert isinstance(client, RestSlurmClient)
    assert client.config().cluster_name == "tower"  # through the CLI fallback


def test_bad_token_is_a_refused_request_and_a_closed_port_unavailable(devcluster: DevCluster) -> None:
    bad = RestSlurmClient(f"http://127.0.0.1:{devcluster.rest_port}", token="not-a-jwt")
    with pytest.raises(SlurmRequestError):
        bad.nodes()
    closed = RestSlurmClient("http://127.0.0.1:9", token="x", timeout=2)
    with pytest.raises(SlurmUnavailable):
        closed.nodes()


def test_recorded_transport_seam_parses_newer_releases() -> None:
    """The transport seam lets a test serve a recorded 24.11 slurmrestd without patching."""
    import gzip
    import json
    from pathlib import Path

    base = Path(__file__).parent / "fixtures" / "slurm" / "24.11"
    if not (base / "rest-slurm-nodes.json").exists():
        pytest.skip("24.11 fixtures not copied")
    nodes_doc = (base / "rest-slurm-nodes.json").read_bytes()
    spec_paths = {"paths": {"/slurm/v0.0.42/nodes": {}, "/slurm/v0.0.41/nodes": {}}}
    if (base / "openapi-v3.json.gz").exists():
        spec_paths = json.loads(gzip.decompress((base / "openapi-v3.json.gz").read_bytes()))

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json=spec_paths)
        if request.url.path == "/slurm/v0.0.42/nodes":
            return httpx.Response(200, content=nodes_doc)
        return httpx.Response(404, json={"errors": [{"error": "not recorded"}]})

    rest = RestSlurmClient("http://recorded", token="t", transport=httpx.MockTransport(handler))
    nodes = rest.nodes()
    assert [n.name for n in nodes] == ["m1", "m2", "m3", "m4"]
    assert rest.capabilities().rest_node_update is True
