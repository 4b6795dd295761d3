"""Route modules of the API; see :data:`slurmtower.api.app.ROUTE_MODULES`."""
