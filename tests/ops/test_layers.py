"""The package's import layering (``[tool.importlinter]`` in pyproject.toml) holds,
and the contracts do catch a circle or a layer broken."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(project: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on ``project``'s pyproject.toml, importing its own ``queuestore``."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", str(project / "pyproject.toml")],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(project)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_package_keeps_its_import_contracts() -> None:
    checked = lint_imports(ROOT)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "0 broken" in checked.stdout


@pytest.mark.parametrize(
    ("module", "added", "broken"),
    [
        # the run side importing the callers' side breaks the layers
        ("run/lease.py", "from queuestore.submit.queue import TaskQueue", "Layers"),
        # the core importing the store breaks the layers (the core is the leaf)
        ("core/watch.py", "from queuestore.store.backend import StoreBackend", "Layers"),
        # two modules of the core importing each other, a circle
        ("core/errors.py", "from queuestore.core.cursor import CursorCodec", "No import circles"),
        # the store importing a surface
        ("store/backend.py", "from queuestore.http import app", "Layers"),
    ],
)
def test_an_import_against_the_contracts_is_reported(
    tmp_path: Path, module: str, added: str, broken: str
) -> None:
    shutil.copytree(ROOT / "queuestore", tmp_path / "queuestore")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    source = tmp_path / "queuestore" / module
    source.write_text(source.read_text() + f"\n{added}  # noqa\n")
    checked = lint_imports(tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert broken in checked.stdout.split("Broken contracts", 1)[1]
