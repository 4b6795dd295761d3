"""An action's parameters are what their JSON Schema says (issue 41, item 9): a client that
generates them from ``GET /actions/{name}`` (or the OpenAPI document, which carries the same
schema as each action's body) sends what the validators take, and what the schema refuses,
the validators refuse.

Generated from each schema by schemathesis (as ``bench/openapi.py`` does against a server),
checked with the catalogue's own validation: no Slurm, no server, a few seconds.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from pydantic import ValidationError
from schemathesis import GenerationMode

from slurmtower.actions import Catalogue
from slurmtower.actions.jobs import JobCancelParams, JobUpdateParams
from slurmtower.actions.params import check_program
from slurmtower.errors import SlurmtowerError

from . import openapi_formats  # noqa: F401 - the node set format, registered

#: The actions whose parameters are checked here: all but slurm.reservation.*, being written beside
#: this change (issue 45), whose schemas are their author's to declare.
CHECKED = ("slurm.config.get", "slurm.job.cancel", "slurm.job.find", "slurm.job.get", "slurm.job.hold",
           "slurm.job.release", "slurm.job.requeue", "slurm.job.resume", "slurm.job.signal", "slurm.job.step.get",
           "slurm.job.suspend", "slurm.job.update", "slurm.job.why", "slurm.node.down", "slurm.node.drain",
           "slurm.node.get", "slurm.node.maintain", "slurm.node.reserve", "slurm.node.resume",
           "slurm.node.unreserve", "slurm.node.update", "slurm.trigger.set", "slurm.trigger.unset")
EXAMPLES = 15
#: Whose refusals of what their schema refuses happen as they run, not in the model: no negative
#: case is counted for them here (bench/openapi.py's runs count them, against the service).
RUN_CHECKED = {"slurm.job.find": "each criterion's value against its job field's type (impl._criterion_value)"}
#: LAX: the models read a value as the command line and rules hand it (pydantic's lax mode): 1 or
#: "yes" for true, "5" or true for 5. The schemas say JSON's own types, which is what a client
#: sending JSON means; a body the schema refuses only for such a value is not counted here.


def _operation(name: str) -> schemathesis.APIOperation:
    body = Catalogue.spec(name).schema(ref_template="#/components/schemas/{model}")
    document = {
        "openapi": "3.1.0", "info": {"title": name, "version": "1"},
        "paths": {"/run": {"post": {
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {"200": {"description": "ran"}}}}},
        "components": {"schemas": body.pop("$defs", {})},
    }
    return next(iter(schemathesis.openapi.from_dict(document).get_all_operations())).ok()


def _validate(name: str, body: Any, *, allowlist: bool = False, strict: bool = False) -> str | None:
    """Why the catalogue refuses ``body`` from an HTTP caller (the parameters' model; with
    ``allowlist``, then a program the allowlist, here empty, does not name: a 403, which the
    document allows); None: taken."""
    try:
        params = Catalogue.spec(name).params.model_validate(body if body is not None else {}, strict=strict)
        program = getattr(params, "program", None) or getattr(params, "check", None)
        if allowlist and program is not None:
            check_program(None, program, shown=program, what="program", param="program")
    except (ValidationError, SlurmtowerError) as exc:
        return str(exc)
    return None


def _disagreements(name: str, operation: schemathesis.APIOperation, mode: GenerationMode) -> list[str]:
    negative = mode is GenerationMode.NEGATIVE
    wrong: list[str] = []

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case: schemathesis.Case) -> None:
        if negative and (not isinstance(case.body, dict) or name in RUN_CHECKED):
            return  # not an object at all: the route refuses it before the catalogue sees it
        # The document offers a part of the programs the model takes; beyond it, the allowlist refuses.
        refused = _validate(name, case.body, allowlist=negative)
        if negative and refused is None and _validate(name, case.body, strict=True) is not None:
            return  # taken only as pydantic's lax mode reads 1 for true, "5" or true for 5: see LAX
        if (refused is not None) != negative:
            wrong.append(f"{mode.value}: {(refused or 'taken')[:400]} <- {case.body!r:.300}")

    check()
    return wrong


@pytest.mark.parametrize("name", CHECKED)
def test_every_body_the_schema_allows_is_taken_and_every_other_refused(name: str) -> None:
    assert name in Catalogue.names()
    operation = _operation(name)
    wrong = [w for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
             for w in _disagreements(name, operation, mode)]
    assert wrong == []


def test_a_json_integer_written_as_5_0_is_an_integer() -> None:
    """JSON Schema's ``integer`` is any whole number; a float job id made a 500 (not iterable)."""
    assert JobCancelParams(jobids=1281.0).jobids == ["1281"]
    assert JobCancelParams(jobids=[5.0, "7"]).jobids == ["5", "7"]
    assert JobUpdateParams(jobids="5", infos={"time_min": 2390.0}).infos == {"time_min": 2390}
    assert _validate("slurm.job.cancel", {"jobids": 1.5}) is not None
    assert _validate("slurm.node.update", {"nodes": "n1", "infos": {"weight": 3.0}}) is None
