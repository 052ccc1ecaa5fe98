"""Celery's warnings that say nothing under queuestore are dropped, and only those."""

from __future__ import annotations

import logging

import pytest

from queuestore.core.logs import quiet_revoke_bookkeeping


def test_celerys_revoke_bookkeeping_warning_is_dropped_only_for_a_disabled_backend(
    caplog: pytest.LogCaptureFixture,
) -> None:
    quiet_revoke_bookkeeping()  # as TaskQueue(store, app) does
    control = logging.getLogger("celery.worker.control")
    message = "Failed to mark task %s as revoked in backend: %s"
    with caplog.at_level(logging.WARNING, logger="celery.worker.control"):
        control.warning(message, "t1", NotImplementedError("No result backend is configured."))
        control.warning(message, "t2", ConnectionError("backend down"))
        control.warning("Terminating %s (%s)", "t3", 10)

    assert [record.args[0] for record in caplog.records] == ["t2", "t3"]  # type: ignore[index]
    # A record whose args are a mapping is passed on untouched, not misread.
    mapping = logging.LogRecord("celery.worker.control", logging.WARNING, "", 0, message, (), None)
    mapping.args = {"task": "t4", "error": NotImplementedError()}
    assert control.filter(mapping)
