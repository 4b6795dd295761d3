"""The dashboard's views: what its pages show, built from the library's models and snapshots
(node map cells, the queue's paging, the timeline, the overview), and its templates. Its
routes are the API's (:mod:`slurmtower.api.routes.dashboard` and the ``ui_*`` modules); this
package never imports the API. Import the modules themselves."""

__all__: list[str] = []
