"""`gpuemu-ci render FORMAT RESULTS`: results.json -> PR comment, step summary, SARIF, JUnit, HTML or
annotations, on stdout or into a file. Exit 0 when rendered (whatever the verdict), 2 when the
results file is missing, unreadable or not a results document."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

import click

from gpuemu_ci.files import atomic_write, cannot_write
from gpuemu_ci.render.annotations import render_annotations
from gpuemu_ci.render.html import render_html
from gpuemu_ci.render.junit import render_junit
from gpuemu_ci.render.links import Links
from gpuemu_ci.render.markdown import render_comment, render_summary
from gpuemu_ci.render.sarif import render_sarif
from gpuemu_ci.results.codec import read_results
from gpuemu_ci.results.model import Results


class Format(StrEnum):
    """What `render` produces."""

    COMMENT = "comment"
    SUMMARY = "summary"
    SARIF = "sarif"
    JUNIT = "junit"
    HTML = "html"
    ANNOTATIONS = "annotations"


@click.command("render")
@click.argument("kind", metavar="FORMAT", type=click.Choice([f.value for f in Format]))
@click.argument("results", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to this file (default: stdout).",
)
@click.option(
    "--job",
    help="Job key for the comment's hidden marker and the SARIF category "
    "(default: the run's job from results.json).",
)
@click.option("--run-url", help="URL of the workflow run, linked from the reports.")
@click.option(
    "--artifact-url", help="URL of the report artifact (results.json, snapshots), linked from the reports."
)
@click.option(
    "--source-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Repository checkout, to point kernel findings at the entry's line.",
)
def render_command(
    kind: str,
    results: Path,
    output: Path | None,
    job: str | None,
    run_url: str | None,
    artifact_url: str | None,
    source_root: Path,
) -> int:
    """Render RESULTS (results.json) as FORMAT: comment | summary | sarif | junit | html | annotations.

    comment and summary are Markdown (the PR comment is capped at 60,000 bytes, the step summary at
    1 MiB, both cut gracefully and saying what was cut); sarif is SARIF 2.1.0; junit is JUnit XML;
    html is a standalone page; annotations are ::error/::warning workflow commands.
    """
    report = read_results(results)
    links = Links.for_results(report, run_url, artifact_url)
    text = RENDERERS[Format(kind)](report, links, job, source_root, results.parent)
    data = text.encode("utf-8")
    if output is None:
        # click.echo writes bytes to the binary stdout (click.get_binary_stream is deprecated from click 8.5).
        click.echo(data, nl=False)
    else:
        try:
            atomic_write(output, data)
        except OSError as exc:
            raise cannot_write(output, exc) from None
        click.echo(f"gpuemu-ci: wrote the {kind} ({len(data):,} bytes) to {output}", err=True)
    return 0


Renderer = Callable[[Results, Links, "str | None", Path, Path], str]  # (..., source root, results dir)

# One entry per Format (a test checks that none is missing).
RENDERERS: dict[Format, Renderer] = {
    Format.COMMENT: lambda report, links, job, root, here: render_comment(report, links, job=job),
    Format.SUMMARY: lambda report, links, job, root, here: render_summary(report, links),
    Format.SARIF: lambda report, links, job, root, here: render_sarif(report, job=job, source_root=root),
    Format.JUNIT: lambda report, links, job, root, here: render_junit(report),
    Format.HTML: lambda report, links, job, root, here: render_html(report, links, here),
    Format.ANNOTATIONS: lambda report, links, job, root, here: render_annotations(report, source_root=root),
}
