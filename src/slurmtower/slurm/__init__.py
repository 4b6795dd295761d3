"""The only code that talks to slurmctld: the SlurmClient protocol and its backends."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from slurmtower.errors import ConfigError
from slurmtower.settings import Settings
from slurmtower.slurm.cli_backend import CliSlurmClient
from slurmtower.slurm.client import (
    NODE_STATES_SETTABLE,
    NODE_UPDATE_FIELDS,
    TRIGGER_EVENTS,
    Capabilities,
    SlurmActs,
    SlurmClient,
    SlurmReads,
)
from slurmtower.slurm.jobctl import (
    JOB_UPDATE_FIELDS,
    CliJobControl,
    JobControl,
    JobRef,
    JobResults,
    job_control,
    parse_job_ids,
)
from slurmtower.slurm.runner import CallObserver, CommandResult, CommandRunner

if TYPE_CHECKING:
    from slurmtower.slurm.rest_backend import RestSlurmClient

__all__ = [
    "JOB_UPDATE_FIELDS",
    "NODE_STATES_SETTABLE",
    "NODE_UPDATE_FIELDS",
    "TRIGGER_EVENTS",
    "CallObserver",
    "Capabilities",
    "CliJobControl",
    "CliSlurmClient",
    "CommandResult",
    "CommandRunner",
    "JobControl",
    "JobRef",
    "JobResults",
    "RestSlurmClient",
    "SlurmActs",
    "SlurmClient",
    "SlurmReads",
    "job_control",
    "make_client",
    "make_rest_client",
    "parse_job_ids",
]


def make_client(settings: Settings, observers: list[CallObserver] | None = None) -> SlurmClient:
    """The client the settings ask for. A REST client falls back to the CLI for what
    slurmrestd cannot do (writes on 22.05, config, triggers, steps)."""
    runner = CommandRunner(timeout=settings.slurm.command_timeout, env=settings.slurm_env(),
                           observers=observers if observers is not None else [])
    cli = CliSlurmClient(runner, slurm_user=settings.slurm.slurm_user)
    if settings.slurm.backend == "cli":
        return cli
    if not settings.slurm.rest_url:

        raise ConfigError("slurm.backend = 'rest' needs slurm.rest_url", key="slurm.rest_url")
    return make_rest_client(settings, settings.slurm.rest_url, fallback=cli, observers=runner.observers)


def make_rest_client(settings: Settings, url: str, *, fallback: SlurmClient | None = None,
                     observers: list[CallObserver] | None = None) -> RestSlurmClient:
    """A slurmrestd client at ``url`` with the settings' user, token or key, timeout and pin."""
    from slurmtower.slurm.rest_backend import RestSlurmClient  # deferred: httpx and jwt, REST only

    token = settings.slurm.rest_token.get_secret_value() if settings.slurm.rest_token else None
    return RestSlurmClient(
        url,
        user=settings.slurm.rest_user,
        token=token,
        jwt_key_file=settings.slurm.rest_jwt_key_file,
        timeout=settings.slurm.command_timeout,
        fallback=fallback,
        observers=observers,
        api_version=settings.slurm.rest_api_version,
    )


def __getattr__(name: str) -> Any:
    # The REST backend (httpx, jwt: 0.15 s) is loaded when a REST client is made or named.
    if name == "RestSlurmClient":
        return importlib.import_module("slurmtower.slurm.rest_backend").RestSlurmClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
