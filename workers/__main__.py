"""``python -m airlock.workers``: the ``airlock`` command (see ``airlock.workers.cli.launch``)."""

from airlock.workers.cli.launch import main

main()
