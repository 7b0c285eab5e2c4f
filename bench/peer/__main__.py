"""``python -m bench.peer``: make (or refresh) the peer's virtualenv, bench/.peer-venv."""

from bench.peer import python

print(python())
