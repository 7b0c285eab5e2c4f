"""The HTTP door: the API (``api``, served as ``airlock.workers.api:app``), its authentication
(``auth``, ``issuer_keys``), the guard of every request (``guard``), the answers it
gives for the service's errors (``problems``), the schema gate and the approver inbox
(``inbox``). Thin over ``airlock.workers.service``; it imports neither ``airlock.workers.tasks`` nor
``airlock.workers.cli``."""
