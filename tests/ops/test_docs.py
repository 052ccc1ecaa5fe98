"""docs/: the configuration reference is generated from the settings and is never stale;
the README links every page; the commands the pages show exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import typer.main

from queuestore.cli import app
from queuestore.config import Settings
from queuestore.reference import configuration_reference, effective_settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = ["getting-started", "concepts", "reference/configuration", "operations", "http", "benchmarks"]


def test_configuration_reference_is_not_stale() -> None:
    committed = (DOCS / "reference" / "configuration.md").read_text()
    assert committed == configuration_reference(), (
        "docs/reference/configuration.md is stale: run `uv run queuestore config reference "
        "> docs/reference/configuration.md`"
    )


def test_the_command_prints_the_same_reference() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "queuestore", "config", "reference"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert printed.stdout == (DOCS / "reference" / "configuration.md").read_text()


def test_reference_has_a_described_row_for_every_setting() -> None:
    reference = configuration_reference()
    for name, field in Settings.model_fields.items():
        row = next(
            line for line in reference.splitlines() if f"`QUEUESTORE_{name.upper()}`" in line
        )
        assert field.description, f"{name} has no description"
        assert row.count("|") >= 5


def test_effective_settings_hide_secrets() -> None:
    settings = Settings(cursor_secret="s3cret", http_tokens={"t0ken": "alice"})
    shown = str(effective_settings(settings))
    assert "s3cret" not in shown
    assert "t0ken" not in shown
    assert effective_settings(settings)["lease"] == 30.0


def test_readme_links_every_page_and_pages_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in PAGES:
        assert (DOCS / f"{page}.md").is_file(), page
        assert f"docs/{page}.md" in readme, page


def test_commands_the_docs_show_exist() -> None:
    group = typer.main.get_command(app)
    known = set(group.commands)  # type: ignore[attr-defined]
    subcommands = {
        name: set(command.commands)
        for name, command in group.commands.items()  # type: ignore[attr-defined]
        if hasattr(command, "commands")
    }
    # A command as the pages show it: after `uv run `, a backtick, or a `$ ` prompt.
    shown = re.compile(r"(?:uv run |`|\$ )queuestore ([a-z]+)(?: ([a-z]+))?")
    for page in ["getting-started", "operations", "concepts"]:
        for first, second in shown.findall((DOCS / f"{page}.md").read_text()):
            if first in {"worker", "beat", "demo", "janitor", "serve"}:
                continue
            assert first in known, f"{page}: queuestore {first}"
            if first in subcommands and second:
                assert second in subcommands[first], f"{page}: queuestore {first} {second}"
