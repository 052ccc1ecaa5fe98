"""A prefork revoke's SIGUSR1 is held back inside store calls and dropped once redundant."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from billiard.pool import soft_timeout_sighandler
from celery.exceptions import SoftTimeLimitExceeded

from queuestore.run.interrupts import Interrupts


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


def test_outside_a_run_billiards_handler_still_answers(interrupts: Interrupts) -> None:
    with pytest.raises(SoftTimeLimitExceeded):
        _signal_self()


def test_in_a_run_outside_store_calls_the_signal_interrupts_at_once(
    interrupts: Interrupts,
) -> None:
    with interrupts.running(lambda: False), pytest.raises(SoftTimeLimitExceeded):
        _signal_self()


def test_inside_a_store_call_the_signal_is_raised_when_the_call_returns(
    interrupts: Interrupts,
) -> None:
    reached = []

    def store_call() -> None:
        with interrupts.deferred():
            _signal_self()
            reached.append("the store call finished")

    with interrupts.running(lambda: False), pytest.raises(SoftTimeLimitExceeded):
        store_call()
    assert reached == ["the store call finished"]


def test_nested_store_calls_raise_only_when_the_outermost_returns(
    interrupts: Interrupts,
) -> None:
    reached = []

    def nested() -> None:
        with interrupts.deferred():
            with interrupts.deferred():
                _signal_self()
            reached.append("after the inner block")

    with interrupts.running(lambda: False), pytest.raises(SoftTimeLimitExceeded):
        nested()
    assert reached == ["after the inner block"]


def test_a_block_that_drops_the_signal_raises_neither_then_nor_later(
    interrupts: Interrupts,
) -> None:
    reached = []
    with interrupts.running(lambda: False):
        with interrupts.deferred(then_raise=False):
            _signal_self()
        reached.append("after the block")
        with interrupts.deferred():  # a signal left pending would be raised on leaving this
            reached.append("in the next store call")
        reached.append("after the next store call")
    assert reached == ["after the block", "in the next store call", "after the next store call"]


def test_a_run_that_already_knows_it_is_cancelled_is_not_interrupted_again(
    interrupts: Interrupts,
) -> None:
    cleanup = []
    with interrupts.running(lambda: True):
        _signal_self()
        cleanup.append("the job's cleanup ran to its end")
    assert cleanup == ["the job's cleanup ran to its end"]


def test_only_the_first_signal_of_a_run_is_delivered(interrupts: Interrupts) -> None:
    cleanup = []
    with interrupts.running(lambda: False):
        try:
            _signal_self()
        except SoftTimeLimitExceeded:
            _signal_self()  # a second revoke lands in the job's cleanup
            cleanup.append("the cleanup was not interrupted")
    assert cleanup == ["the cleanup was not interrupted"]


def test_outside_a_run_a_store_call_holds_the_signal_until_it_returns(
    interrupts: Interrupts,
) -> None:
    steps: list[str] = []

    def store_call() -> None:
        with interrupts.deferred():
            _signal_self()
            steps.append("the call went on")

    with pytest.raises(SoftTimeLimitExceeded):
        store_call()
    assert steps == ["the call went on"]
