"""The harness's own rule: a missing server binary skips locally and fails under CI."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.integration.harness import PostgresCluster, RedisServer


@pytest.mark.parametrize("server", [RedisServer, PostgresCluster])
@pytest.mark.parametrize(
    ("ci", "outcome"), [("", pytest.skip.Exception), ("1", pytest.fail.Exception)]
)
def test_a_missing_server_binary_skips_locally_and_fails_under_ci(
    server: type[RedisServer | PostgresCluster],
    ci: str,
    outcome: type[BaseException],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(Path, "glob", lambda self, pattern: iter(()))

    with pytest.raises(outcome, match=r"not installed"):
        server(tmp_path)
