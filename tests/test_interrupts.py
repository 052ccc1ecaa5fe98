"""A prefork revoke's SIGUSR1 is held back while a run is inside a store call."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from billiard.pool import soft_timeout_sighandler
from celery.exceptions import SoftTimeLimitExceeded

from queuestore.interrupts import Interrupts


def _signal_self() -> None:
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.05)  # the Python-level handler runs at the next bytecode boundary


@pytest.fixture
def interrupts() -> Iterator[Interrupts]:
    previous = signal.signal(signal.SIGUSR1, soft_timeout_sighandler)
    deferring = Interrupts()
    deferring.install()
    try:
        yield deferring
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_install_takes_over_billiards_handler(interrupts: Interrupts) -> None:
    assert signal.getsignal(signal.SIGUSR1) == interrupts._handle


def test_outside_a_deferred_block_the_signal_interrupts_at_once(interrupts: Interrupts) -> None:
    with pytest.raises(SoftTimeLimitExceeded):
        _signal_self()


def test_inside_a_deferred_block_the_signal_is_raised_when_the_block_ends(
    interrupts: Interrupts,
) -> None:
    reached = []

    def store_call() -> None:
        with interrupts.deferred():
            _signal_self()
            reached.append("the store call finished")

    with pytest.raises(SoftTimeLimitExceeded):
        store_call()
    assert reached == ["the store call finished"]


def test_nested_blocks_raise_only_when_the_outermost_ends(interrupts: Interrupts) -> None:
    reached = []

    def nested() -> None:
        with interrupts.deferred():
            with interrupts.deferred():
                _signal_self()
            reached.append("after the inner block")

    with pytest.raises(SoftTimeLimitExceeded):
        nested()
    assert reached == ["after the inner block"]


def test_a_block_that_drops_the_signal_does_not_raise(interrupts: Interrupts) -> None:
    with interrupts.deferred(then_raise=False):
        _signal_self()
    time.sleep(0.05)  # nothing is left pending to surface later either
