"""Installing slurmtower on a site: ``slurmtower init``'s files (:mod:`.init`, from the
settings' schema :mod:`.conffile`, the units :mod:`.units` and what :mod:`.discover` finds)
and ``slurmtower doctor``'s checks (:mod:`.doctor`, against the release table :mod:`.releases`)."""

from __future__ import annotations

from slurmtower.deploy.conffile import render_config
from slurmtower.deploy.discover import AccountingDatabase, SlurmSite, discover
from slurmtower.deploy.doctor import CHECKS, CheckResult, doctor_failed, run_checks
from slurmtower.deploy.init import InitPlan, PlannedFile, plan_init, write_plan
from slurmtower.deploy.releases import ADVISORIES, Advisory, judge_release
from slurmtower.deploy.units import UnitParams, api_unit, nginx_snippet, sensor_unit

__all__ = [
    "ADVISORIES",
    "CHECKS",
    "AccountingDatabase",
    "Advisory",
    "CheckResult",
    "InitPlan",
    "PlannedFile",
    "SlurmSite",
    "UnitParams",
    "api_unit",
    "discover",
    "doctor_failed",
    "judge_release",
    "nginx_snippet",
    "plan_init",
    "render_config",
    "run_checks",
    "sensor_unit",
    "write_plan",
]
