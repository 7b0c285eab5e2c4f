"""``python -m workers``: the ``airlock`` command (see ``workers.cli.launch``)."""

from workers.cli.launch import main

main()
