"""The running service: the typed container (:class:`Services`), built in one function
(:func:`build_services`), its periodic tasks in one list (:mod:`slurmtower.runtime.tasks`),
started and stopped in one place (:func:`start`, :func:`stop`)."""

from slurmtower.runtime.build import PARTS, assemble, build_services, running, start, stop
from slurmtower.runtime.services import BackgroundTask, Readiness, Services

__all__ = ["PARTS", "BackgroundTask", "Readiness", "Services", "assemble", "build_services", "running", "start",
           "stop"]
