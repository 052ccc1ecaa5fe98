"""``python -m queuestore``: the same as the ``queuestore`` command."""

from queuestore.cli import app

app(prog_name="queuestore")
