"""The HTTP door: the API (``api``, served as ``workers.api:app``), its authentication
(``auth``, ``issuer_keys``), the guard of every request (``guard``), the answers it
gives for the service's errors (``problems``), the schema gate and the approver inbox
(``inbox``). Thin over ``workers.service``; it imports neither ``workers.tasks`` nor
``workers.cli``."""
