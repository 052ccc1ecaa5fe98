"""The run side: a worker runs a job on a claimed task, under a lease.

``@job`` (:mod:`~queuestore.run.jobs`) registers a function
(:mod:`~queuestore.run.jobs`) and runs it: claim, check the input against the
function's annotations (:mod:`~queuestore.run.inputs`), call it with a
:class:`TaskContext` (:mod:`~queuestore.run.context`), write the outcome.
A :class:`~queuestore.run.lease.Run` batches the job's reports under its
lease, the heartbeat renews it and hears a cancel, the interrupts keep a
prefork revoke out of store calls, and the message hold acknowledges a long
run's message once the store owns the task; :mod:`~queuestore.run.workarounds`
covers Celery and kombu bugs as a worker starts. It never imports the callers' side.
"""

from queuestore.run.context import InputRequested, TaskContext
from queuestore.run.jobs import Job, execute, job, registered_job, registered_names
from queuestore.run.lease import JobCancelled, Run, RunTimedOut

__all__ = [
    "InputRequested",
    "Job",
    "JobCancelled",
    "Run",
    "RunTimedOut",
    "TaskContext",
    "execute",
    "job",
    "registered_job",
    "registered_names",
]
