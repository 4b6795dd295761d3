"""Route modules of the API; see :data:`slurmtower.api.app.ROUTE_MODULES`. Each is imported by
name (:func:`slurmtower.api.app.create_app`): the package itself exports nothing."""

__all__: list[str] = []
