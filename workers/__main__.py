"""``python -m workers``: the ``airlock`` command (see ``workers.launch``)."""

from workers.launch import main

main()
