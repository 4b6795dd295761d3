"""slurmrestd's job control on every release, against the OpenAPI documents recorded from
22.05, 24.11, 25.11 and 26.05 (tests/fixtures/slurm/<release>/openapi-v3.json.gz): each
request :mod:`slurmtower.slurm.rest_jobctl` sends names an operation, a query parameter and
body fields the release's newest API version declares. Only Debian's 22.05 runs here (its
slurmrestd is exercised live in tests/test_slurm_jobctl.py); the newer ones are checked here."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from slurmtower.slurm.jobctl import JOB_UPDATE_FIELDS

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm"
RELEASES = ("22.05", "24.11", "25.11", "26.05")


def _spec(release: str) -> tuple[str, dict[str, Any]]:
    spec = json.loads(gzip.decompress((FIXTURES / release / "openapi-v3.json.gz").read_bytes()))
    versions = sorted({p.split("/")[2] for p in spec["paths"] if p.startswith("/slurm/v0.0.")},
                      key=lambda v: int(v.rsplit(".", 1)[1]))
    return versions[-1], spec  # the backend uses the newest version it knows: these are all known


def _schema(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = spec["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _body(spec: dict[str, Any], op: dict[str, Any]) -> set[str]:
    content = op["requestBody"]["content"]["application/json"]
    return set(_schema(spec, content["schema"]).get("properties", {}))


@pytest.mark.parametrize("release", RELEASES)
def test_cancel_signal_hold_release_and_update_requests_match_the_release(release: str) -> None:
    api, spec = _spec(release)
    number = int(api.rsplit(".", 1)[1])
    job = spec["paths"][f"/slurm/{api}/job/{{job_id}}"]
    query = {p["name"] for p in job["delete"].get("parameters", []) if p.get("in") == "query"}
    assert "signal" in query  # cancel and signal: DELETE job/{id}?signal=
    assert ("flags" in query) == (number >= 40)  # batch/full: Unsupported before v0.0.40, as the code says
    fields = _body(spec, job["post"])
    assert "hold" in fields  # hold and release: POST job/{id} {"hold": true|false}
    rest_names = {rest for _kw, rest, _kind in JOB_UPDATE_FIELDS.values()}
    assert {"comment", "time_limit", "partition", "qos", "account", "nice", "dependency"} <= fields & rest_names
    # admin_comment: absent from 22.05's job_properties (the action says "AdminComment not set"), there after
    assert ("admin_comment" in fields) == (number >= 40)


@pytest.mark.parametrize("release", RELEASES)
def test_filtered_cancel_and_requeue_exist_where_the_code_expects_them(release: str) -> None:
    api, spec = _spec(release)
    number = int(api.rsplit(".", 1)[1])
    jobs = spec["paths"].get(f"/slurm/{api}/jobs/", {})
    assert ("delete" in jobs) == (number >= 40)
    if "delete" in jobs:
        wanted = {"signal", "user_name", "account", "partition", "job_name", "job_state", "nodes"}
        assert wanted <= _body(spec, jobs["delete"]), release
    requeue = spec["paths"].get(f"/slurm/{api}/jobs/requeue", {})
    assert ("post" in requeue) == (release == "26.05")
    if "post" in requeue:
        assert {"jobs", "flags"} <= _body(spec, requeue["post"])
    # suspend and resume: no operation on any release (the backend says Unsupported)
    assert not any("suspend" in p or "resume" in p for p in spec["paths"] if p.startswith(f"/slurm/{api}/"))
