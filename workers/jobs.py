"""Example jobs that behave like long-running MCP tool calls."""

from __future__ import annotations

import time

from queuestore import Artifact, TaskContext, job
from workers import app


@job(app, name="examples.research")
def research(
    ctx: TaskContext, topic: str, sections: int = 5, pause: float = 0.5
) -> dict[str, object]:
    """Write a report section by section, streaming each one as an artifact chunk."""
    for number in range(1, sections + 1):
        ctx.raise_if_cancelled()
        time.sleep(pause)
        chunk = f"Section {number} on {topic}."
        ctx.add_artifact(
            Artifact(
                artifact_id="report", name=f"{topic}.md", media_type="text/markdown", parts=[chunk]
            ),
            append=True,
        )
        ctx.progress(number / sections, f"wrote section {number} of {sections}")
    return {"topic": topic, "sections": sections}


@job(app, name="examples.deploy")
def deploy(ctx: TaskContext, service: str, pause: float = 0.5) -> dict[str, object]:
    """Prepare a deployment, then ask before going live."""
    ctx.progress(0.3, f"built {service}")
    time.sleep(pause)
    answer = ctx.request_input(f"Deploy {service} to production? (yes/no)")
    if str(answer).strip().lower() not in {"yes", "y"}:
        return {"service": service, "deployed": False}
    ctx.progress(0.8, f"rolling out {service}")
    time.sleep(pause)
    return {"service": service, "deployed": True}


@job(app, name="examples.crunch")
def crunch(ctx: TaskContext, seconds: float = 10.0) -> dict[str, object]:
    """Compute for a while, checking for a cancel between steps."""
    steps = max(int(seconds / 0.1), 1)
    for step in range(steps):
        ctx.raise_if_cancelled()
        time.sleep(0.1)
        if step % 10 == 0:
            ctx.progress(step / steps)
    return {"steps": steps}


@job(app, name="examples.flaky")
def flaky(ctx: TaskContext, message: str = "upstream service answered 503") -> None:
    """Fail the way a tool call to a broken service does."""
    ctx.progress(0.1, "calling upstream")
    raise ConnectionError(message)
