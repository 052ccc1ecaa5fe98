"""Beat's maintenance: the sweep, the reaper and the janitor, one small module each.

:mod:`~queuestore.beat.schedule` registers them as Celery tasks and installs
their beat schedule; each is idempotent, so two beats do no harm.
It imports the broker, the store and the core.
"""

from queuestore.beat.janitor import run_janitor
from queuestore.beat.reaper import reap
from queuestore.beat.schedule import JANITOR_TASK, REAPER_TASK, SWEEP_TASK
from queuestore.beat.sweep import sweep

__all__ = ["JANITOR_TASK", "REAPER_TASK", "SWEEP_TASK", "reap", "run_janitor", "sweep"]
