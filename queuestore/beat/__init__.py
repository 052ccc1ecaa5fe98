"""Beat's maintenance: the sweep, the reaper, the janitor and the schedules' tick, one small
module each.

:mod:`~queuestore.beat.schedule` registers them as Celery tasks and installs
their beat schedule; each is idempotent, so two beats do no harm (a schedule's
tick still makes one task, :mod:`~queuestore.beat.schedules`).
It imports the broker, the store and the core.
"""

from queuestore.beat.janitor import run_janitor
from queuestore.beat.reaper import reap
from queuestore.beat.schedule import JANITOR_TASK, REAPER_TASK, SCHEDULES_TASK, SWEEP_TASK
from queuestore.beat.schedules import run_schedules
from queuestore.beat.sweep import sweep

__all__ = [
    "JANITOR_TASK",
    "REAPER_TASK",
    "SCHEDULES_TASK",
    "SWEEP_TASK",
    "reap",
    "run_janitor",
    "run_schedules",
    "sweep",
]
