"""Settings refuse a variable an earlier release read under another name, naming the new one."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from queuestore import Settings
from queuestore.config import RENAMED


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_a_renamed_variable_is_refused_with_its_new_name(
    monkeypatch: pytest.MonkeyPatch, old: str, new: str
) -> None:
    monkeypatch.setenv(old, "3")

    with pytest.raises(ValidationError, match=f"{old} is now {new}"):
        Settings()


def test_the_new_names_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    for new in RENAMED.values():
        monkeypatch.setenv(new, "7")

    settings = Settings()

    assert settings.max_lost_runs == 7
    assert settings.sweep_interval.total_seconds() == 7
