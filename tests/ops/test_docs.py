"""docs/: the generated reference pages are never stale; every relative link and
anchor resolves; the README links every page; the commands and options the pages
show exist."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

import queuestore
from queuestore.config import Settings
from queuestore.ops.cli import app
from queuestore.ops.reference import (
    configuration_reference,
    effective_settings,
    python_api_reference,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
CONFIGURATION = DOCS / "reference" / "configuration.md"
PYTHON_API = DOCS / "reference" / "python-api.md"

# The four kinds (Diataxis) and the pages each must have.
LAYOUT = [
    "index.md",
    "tutorial.md",
    "howto/deploy.md",
    "howto/http-server.md",
    "howto/mcp-task-tools.md",
    "howto/a2a-agent.md",
    "howto/testing-your-jobs.md",
    "howto/schedule-tasks.md",
    "howto/run-on-a-schedule.md",
    "howto/retry-jobs.md",
    "howto/durable-work.md",
    "howto/unique-tasks.md",
    "howto/submit-many.md",
    "howto/prioritise-tasks.md",
    "howto/limit-concurrency.md",
    "howto/rate-limits.md",
    "howto/receive-webhooks.md",
    "howto/metrics.md",
    "reference/configuration.md",
    "reference/http-api.md",
    "reference/mcp.md",
    "reference/a2a.md",
    "reference/cli.md",
    "reference/python-api.md",
    "explanation/concepts.md",
    "explanation/glossary.md",
    "explanation/cost-model.md",
    "contributing.md",
    "benchmarks.md",
]


def pages() -> list[Path]:
    """Every Markdown page of the docs, and the README."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def page_ids() -> list[str]:
    return [str(page.relative_to(ROOT)) for page in pages()]


# -- generated pages ------------------------------------------------------------


def test_configuration_reference_is_not_stale() -> None:
    committed = CONFIGURATION.read_text()
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
    assert printed.stdout == CONFIGURATION.read_text()


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


def test_python_api_reference_is_not_stale() -> None:
    assert PYTHON_API.read_text() == python_api_reference(), (
        "docs/reference/python-api.md is stale: run `uv run python -m queuestore.ops.reference "
        "python-api > docs/reference/python-api.md`"
    )


def test_python_api_reference_describes_every_exported_name() -> None:
    reference = python_api_reference()
    for name in queuestore.__all__:
        assert f"\n### `{name}`\n" in reference, name


def test_the_module_prints_the_python_api_reference() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "queuestore.ops.reference", "python-api"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert printed.stdout == PYTHON_API.read_text()


# -- layout and links ------------------------------------------------------------


def test_the_layout_has_every_page() -> None:
    for page in LAYOUT:
        assert (DOCS / page).is_file(), page


def test_readme_links_every_page_and_keeps_its_two_commands() -> None:
    readme = README.read_text()
    for page in sorted(DOCS.rglob("*.md")):
        target = page.relative_to(ROOT).as_posix()
        assert f"]({target})" in readme or f"]({target}#" in readme, target
    assert "uv run queuestore demo" in readme
    assert "uv run pytest" in readme


def test_index_links_every_page() -> None:
    index = (DOCS / "index.md").read_text()
    for page in sorted(DOCS.rglob("*.md")):
        if page.name == "index.md":
            continue
        target = page.relative_to(DOCS).as_posix()
        assert f"]({target})" in index or f"]({target}#" in index, target


FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`[^`]*`")


def prose_lines(text: str) -> Iterator[str]:
    """The lines outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text, lowercased, punctuation dropped,
    spaces made hyphens (a repeated heading gets -1, -2, ... appended)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in prose_lines(page.read_text()):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading is None:
            continue
        slug = github_slug(heading.group(1))
        seen = counts.get(slug, 0)
        found.add(slug if seen == 0 else f"{slug}-{seen}")
        counts[slug] = seen + 1
    return found


def test_github_slug_rule() -> None:
    assert github_slug("Settings (`QUEUESTORE_MCP_*`)") == "settings-queuestore_mcp_"
    assert github_slug("A run, step by step") == "a-run-step-by-step"
    assert github_slug("A task's lifecycle") == "a-tasks-lifecycle"
    assert github_slug("queuestore tasks list") == "queuestore-tasks-list"


def relative_links(page: Path) -> Iterator[str]:
    for line in prose_lines(page.read_text()):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            yield target


@pytest.mark.parametrize("page", pages(), ids=page_ids())
def test_relative_links_resolve(page: Path) -> None:
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.relative_to(ROOT)}: broken link {target}"
        assert not Path(path).is_absolute(), f"{page.relative_to(ROOT)}: absolute link {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), (
                f"{page.relative_to(ROOT)}: no heading #{anchor} in {resolved.relative_to(ROOT)}"
            )


@pytest.mark.parametrize("page", pages(), ids=page_ids())
def test_no_absolute_paths_of_a_machine(page: Path) -> None:
    text = page.read_text()
    assert not re.search(r"(?<![\w.:/])/(?:work|root|home|Users|tmp)/", text), page


# -- commands ------------------------------------------------------------------------

# A command as the pages show it: after `uv run `, a backtick or a `$ ` prompt; up
# to the end of its code span, its line or a shell comment.
SHOWN = re.compile(r"(?:uv run |`|\$ )queuestore((?: [^`\n#]*)?)")


def invocations(text: str) -> Iterator[list[str]]:
    """The words after each `queuestore` the text shows as a command."""
    for match in SHOWN.finditer(text):
        words = [word.strip("[]()|,.;:") for word in match.group(1).split()]
        words = [word for word in words if word]
        if words and (words[0][0].isalpha() or words[0].startswith("--")):
            yield words


def is_group(command: Any) -> bool:
    """A command with subcommands (typer's click groups are typer's own classes)."""
    return hasattr(command, "commands")


def option_names(command: Any) -> set[str]:
    names = {"--help"}
    for parameter in command.params:
        names.update(parameter.opts)
        names.update(parameter.secondary_opts)
    return names


def check(words: list[str]) -> tuple[list[str], list[str]]:
    """The command path `queuestore WORDS` names, and what in it does not exist.

    `tasks watch|show|list` (prose naming several) checks every alternative.
    Options are checked against the command's, except for worker and beat,
    which pass them to Celery; nothing after `--` is an option.
    """
    command: Any = typer.main.get_command(app)
    path: list[str] = []
    problems: list[str] = []
    rest = list(words)
    while rest and is_group(command) and not rest[0].startswith("-"):
        names = rest.pop(0).split("|")
        missing = [name for name in names if name not in command.commands]
        if missing:
            problems.append(f"no command {' '.join([*path, *missing])}")
            return path, problems
        command = command.commands[names[0]]
        path.append(names[0])
    if command.context_settings.get("ignore_unknown_options"):
        return path, problems
    known = option_names(command)
    for word in rest:
        if word == "--":
            break
        if word.startswith("-") and word.split("=")[0] not in known:
            problems.append(f"queuestore {' '.join(path)} has no option {word.split('=')[0]}")
    return path, problems


def shown_commands() -> Iterator[tuple[str, list[str]]]:
    for page in pages():
        for words in invocations(page.read_text()):
            yield str(page.relative_to(ROOT)), words


def test_the_pages_show_commands() -> None:
    shown = {tuple(check(words)[0]) for _, words in shown_commands()}
    for expected in [("demo",), ("worker",), ("tasks", "watch"), ("db", "upgrade"), ("serve",)]:
        assert expected in shown, expected


def test_commands_the_docs_show_exist() -> None:
    runner = CliRunner()
    helped: set[tuple[str, ...]] = set()
    for where, words in shown_commands():
        path, problems = check(words)
        assert not problems, f"{where}: `queuestore {' '.join(words)}`: {problems}"
        if tuple(path) not in helped:
            helped.add(tuple(path))
            result = runner.invoke(app, [*path, "--help"])
            assert result.exit_code == 0, f"{where}: queuestore {' '.join(path)} --help"


@pytest.mark.parametrize(
    ("words", "found"),
    [
        (["tasks", "sho"], "no command tasks sho"),
        (["tasks", "watch|shw"], "no command tasks shw"),
        (["tasks", "list", "--colour"], "has no option --colour"),
        (["nothing"], "no command nothing"),
    ],
)
def test_the_command_check_catches_mistakes(words: list[str], found: str) -> None:
    assert any(found in problem for problem in check(words)[1])


def test_the_command_check_accepts_what_exists() -> None:
    assert check(["tasks", "show", "--", "-x1"]) == (["tasks", "show"], [])
    assert check(["worker", "-A", "reports", "--concurrency", "2"]) == (["worker"], [])
    assert check(["--install-completion"]) == ([], [])
    assert check(["tasks", "list", "--status=working", "--json"]) == (["tasks", "list"], [])


def test_cli_reference_names_every_command_and_option() -> None:
    cli = (DOCS / "reference" / "cli.md").read_text()

    def walk(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, command
        if is_group(command):
            for name, sub in command.commands.items():
                yield from walk(sub, [*path, name])

    for path, command in walk(typer.main.get_command(app), []):
        if path and not is_group(command):
            assert f"### queuestore {' '.join(path)}\n" in cli, path
        for option in option_names(command) - {"--help"}:
            if option.startswith("--"):
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", cli), (
                    f"queuestore {' '.join(path)} {option} is not in docs/reference/cli.md"
                )
