"""The CLI door: the ``airlock`` command (``launch`` is its entry point, ``commands``
its commands, ``output`` how they print, ``demo`` the demo and ``airlock dev``).
Thin over ``airlock.workers.service``; it starts the other doors as processes, by name
(``airlock.workers.api:app``, the Celery app's ``include``), never by importing them.

Kept empty: ``launch`` runs before gevent patches the standard library, and imports
nothing but the standard library until then."""
