"""The PR comment and the step summary: Markdown from Jinja2 templates, sized to fit.

Escaping is automatic, as HTML autoescaping is: every ``{{ value }}`` in a Markdown template is
escaped as Markdown text unless an escape filter (``cell``, ``code``, ``cellcode``, ``block``,
``link``) already made it safe, so a template cannot print an untrusted string raw by forgetting
a filter. Templates live in ``gpuemu_ci/templates`` and ship inside the wheel.

Size: GitHub refuses comments over 65,536 characters and drops step summaries over 1 MiB. The
renderer budgets 60,000 UTF-8 bytes for the comment (marker line included) and degrades in
steps, each stated in the comment: first the passing-ops table goes, then the further failing
cases of each op x dtype, then the detail blocks, then table rows; a last resort keeps only the
verdict and the links.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import jinja2

from gpuemu_ci.render import escape, text
from gpuemu_ci.render.coverage import coverage_rows, dtypes_not_run
from gpuemu_ci.render.links import Links
from gpuemu_ci.render.mutation import mutation_markdown
from gpuemu_ci.render.templates import compiled_environment
from gpuemu_ci.results.hints import layout_hint
from gpuemu_ci.results.kernels import KernelResult, KernelStatus
from gpuemu_ci.results.model import Failure, Headline, OpStatus, Results

COMMENT_LIMIT = 60_000  # UTF-8 bytes; GitHub counts up to 65,536 characters, bytes >= characters
SUMMARY_LIMIT = 1024 * 1024 - 1024  # GitHub drops a step summary over 1 MiB; room for other writers
MARKER_PREFIX = "<!-- gpuemu-ci:v1 key="
VALUE_LIMIT = 1_000  # characters of one value (a name, a message) in Markdown
BLOCK_LIMIT = 10_000  # characters of one code block (a replay command list)
DETAIL_FLOOR = 3  # detail blocks kept while table rows can still be cut instead
TRITON_WARNINGS_SHOWN = 10  # warnings of the Triton layer in a comment; results.json has every one
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._/:+=@-]")


class Md(str):
    """Markdown an escape function produced: the template's auto-escape lets it through."""


@dataclass(frozen=True)
class UnverifiedSource:
    """The comment is made from results that another run uploaded and that this repository cannot verify:
    the artifact of a fork's pull request, commented on by the `workflow_run` companion. `conclusion` is the
    uploading run's conclusion as GitHub reported it in the event (trusted); the document is not."""

    conclusion: str | None
    head_repository: str | None = None

    @property
    def confirmed_pass(self) -> bool:
        """Only a run that GitHub says succeeded can back a "passed" document."""
        return self.conclusion == "success"


@dataclass(frozen=True)
class Limits:
    """How much of the report to show; each None is "all"."""

    passes: bool = True
    more_failures: bool = True  # the collapsed further failing cases of each op x dtype
    detail_groups: int | None = None
    failure_rows: int | None = None
    lint_rows: int | None = None
    diff_rows: int | None = None
    other_rows: int | None = None  # errored and skipped ops
    message_chars: int = 500


def comment_key(key: str | None) -> str:
    """``key`` reduced to characters that are safe inside the marker (``--`` would end the comment)."""
    cleaned = _KEY_UNSAFE.sub("_", (key or "").strip())
    while "--" in cleaned:
        cleaned = cleaned.replace("--", "-")
    return cleaned[:200] or "default"


def comment_marker(key: str | None) -> str:
    """The hidden first line that identifies the comment of job ``key``."""
    return f"{MARKER_PREFIX}{comment_key(key)} -->"


def render_comment(
    report: Results,
    links: Links | None = None,
    *,
    job: str | None = None,
    marker: bool = True,
    limit: int = COMMENT_LIMIT,
    unverified: UnverifiedSource | None = None,
) -> str:
    """The PR comment: the marker line (``marker=False`` leaves it to the poster, but the budget still
    counts it), a one-line verdict, failures first, then lint, errors, the baseline diff, skips and
    the collapsed passes; at most ``limit`` UTF-8 bytes. With ``unverified`` the comment says where its
    figures come from and the uploading run's conclusion, and is never a pass unless that run succeeded."""
    key = job or (report.run.job if report.run else None)
    head = comment_marker(key) + "\n"
    body = _fit(report, links or Links(), "comment.md.j2", limit - len(head.encode("utf-8")), unverified)
    return (head if marker else "") + body


def render_summary(report: Results, links: Links | None = None, *, limit: int = SUMMARY_LIMIT) -> str:
    """The step summary (``GITHUB_STEP_SUMMARY``): the comment's content with the run's details."""
    return _fit(report, links or Links(), "summary.md.j2", limit)


def _fit(
    report: Results, links: Links, template: str, limit: int, unverified: UnverifiedSource | None = None
) -> str:
    """The fullest rendering of ``template`` that fits in ``limit`` bytes (see the module docstring)."""
    fitter = _Fitter(report, links, template, limit, unverified)
    groups = len(report.failure_groups())
    floor = min(DETAIL_FLOOR, groups)
    attempt = Limits()
    for step in (
        attempt,
        replace(attempt, passes=False),
        replace(attempt, passes=False, more_failures=False, message_chars=300),
    ):
        attempt = step
        if fitter.lower_bound(attempt) <= limit and fitter.fits(attempt):
            return fitter.rendered
    # Detail blocks go before table rows, but the first few stay as long as the tables can shrink.
    attempt = fitter.largest(attempt, "detail_groups", floor, groups)
    for field, total in (
        ("diff_rows", _diff_total(report)),
        ("lint_rows", len(_lint_rows(report))),
        ("failure_rows", groups),
        ("detail_groups", floor),
        ("other_rows", len(report.ops)),
    ):
        if fitter.fits(attempt):
            return fitter.rendered
        attempt = fitter.largest(attempt, field, 0, total)
    if fitter.fits(attempt):
        return fitter.rendered
    minimal = _render(report, links, "minimal.md.j2", attempt, unverified)
    return minimal if _size(minimal) <= limit else _hard_cut(minimal, limit)


def _hard_cut(rendered: str, limit: int) -> str:
    """A last guarantee for absurd budgets: whole lines up to ``limit`` bytes, then a cut mark."""
    return text.clip_utf8(rendered, limit, "\n… (cut to fit)\n", whole_lines=True)


class _Fitter:
    """Renders attempts and finds the largest count that fits, remembering the last rendering."""

    def __init__(
        self, report: Results, links: Links, template: str, limit: int, unverified: UnverifiedSource | None
    ) -> None:
        self.report, self.links, self.template, self.limit = report, links, template, limit
        self.unverified = unverified
        self.rendered = ""
        self._replays = [
            (g, tuple(len(f.replay.encode("utf-8")) for f in g.failures)) for g in report.failure_groups()
        ]

    def fits(self, limits: Limits) -> bool:
        """Render ``limits`` (kept in `rendered`) and say whether it is within the budget."""
        self.rendered = _render(self.report, self.links, self.template, limits, self.unverified)
        return _size(self.rendered) <= self.limit

    def lower_bound(self, limits: Limits) -> int:
        """Bytes the replay commands alone take (they are shown verbatim): skips hopeless renders."""
        shown = self._replays if limits.detail_groups is None else self._replays[: limits.detail_groups]
        return sum(sum(sizes) if limits.more_failures else sum(sizes[:1]) for _, sizes in shown)

    def largest(self, base: Limits, field: str, low: int, high: int) -> Limits:
        """``base`` with ``field`` at the largest count in [low, high] that fits (``low`` if none does)."""
        current = getattr(base, field)
        high = min(high, current) if current is not None else high
        if high <= low:
            return _with(base, field, max(0, min(low, high)))
        if not self.fits(_with(base, field, low)):
            return _with(base, field, low)
        # Every item renders to 20 bytes at least: no point trying more than fit in the budget.
        high = min(high, low + self.limit // 20)
        while low < high:
            mid = (low + high + 1) // 2
            if self.fits(_with(base, field, mid)):
                low = mid
            else:
                high = mid - 1
        return _with(base, field, low)


def _with(limits: Limits, field: str, count: int) -> Limits:
    """`limits` with one of its row counts set."""
    changed: Limits = replace(limits, **{field: count})  # type: ignore[arg-type]  # field is a count field
    return changed


def _size(rendered: str) -> int:
    return len(rendered.encode("utf-8"))


def _take(items: list[Any] | tuple[Any, ...], limit: int | None) -> tuple[list[Any], int]:
    shown = list(items) if limit is None else list(items)[:limit]
    return shown, len(items) - len(shown)


def _lint_rows(report: Results) -> list[tuple[KernelResult, Any]]:
    return [(k, v) for k in report.kernels for v in k.violations]


def _diff_total(report: Results) -> int:
    return sum(1 for e in report.diff.entries if e.classification != "unchanged") if report.diff else 0


def _verdict_line(report: Results, unverified: UnverifiedSource | None) -> tuple[str, str]:
    """(icon, headline text): the document's, except that an unverified "passed" whose run did not succeed is
    shown as what it is."""
    if unverified is not None and report.headline is Headline.PASSED and not unverified.confirmed_pass:
        how = f"concluded {unverified.conclusion}" if unverified.conclusion else "reported no conclusion"
        return text.ICONS[Headline.ERROR], (
            f"not a pass: the run that tested this pull request {how}, while its uploaded results say passed"
        )
    return text.ICONS[report.headline], text.headline(report)


def _context(
    report: Results, links: Links, limits: Limits, unverified: UnverifiedSource | None = None
) -> dict[str, Any]:
    groups = report.failure_groups()
    rows, rows_hidden = _take(groups, limits.failure_rows)
    details, details_hidden = _take(groups, limits.detail_groups)
    lint, lint_hidden = _take(_lint_rows(report), limits.lint_rows)
    changed = [e for e in report.diff.entries if e.classification != "unchanged"] if report.diff else []
    diff_rows, diff_hidden = _take(changed, limits.diff_rows)
    errored_ops = [op for op in report.ops if op.status is OpStatus.ERROR]
    errored, errored_hidden = _take(errored_ops, limits.other_rows)
    skipped, skipped_hidden = _take(
        [op for op in report.ops if op.status is OpStatus.SKIPPED], limits.other_rows
    )
    skipped_rows, skipped_rows_hidden = _take(
        [(op, row) for op, row in report.skipped_rows() if op.status is not OpStatus.SKIPPED or op.dtypes],
        limits.other_rows,
    )
    passes = [(op, row) for op in report.ops for row in op.dtypes if row.status is OpStatus.PASSED]
    near, near_hidden = _take(list(report.near_limit()), limits.other_rows)
    more_hidden = sum(max(0, len(g.failures) - 1) for g in details) if not limits.more_failures else 0
    cut = []
    if not limits.passes and passes:
        cut.append(f"the table of {len(passes)} passing op × dtype results")
    if more_hidden:
        cut.append(f"{more_hidden} further failing case(s) (the worst case of each op × dtype is shown)")
    if details_hidden:
        cut.append(f"the details of {details_hidden} failing op × dtype result(s)")
    if rows_hidden:
        cut.append(f"{rows_hidden} row(s) of the failures table")
    if lint_hidden:
        cut.append(f"{lint_hidden} lint violation(s)")
    if diff_hidden:
        cut.append(f"{diff_hidden} baseline change(s)")
    if near_hidden:
        cut.append(f"{near_hidden} warning(s) of op × dtype results close to their limit")
    if errored_hidden or skipped_hidden or skipped_rows_hidden:
        cut.append(
            f"{errored_hidden + skipped_hidden + skipped_rows_hidden} errored or skipped op(s) or row(s)"
        )
    icon, headline_text = _verdict_line(report, unverified)
    return {
        "report": report,
        "headline_text": headline_text,
        "icon": icon,
        "unverified": unverified,
        "links": links,
        "limits": limits,
        "rows": rows,
        "rows_hidden": rows_hidden,
        "details": details,
        "hints": [(op, hint) for op in report.ops if (hint := layout_hint(op))],
        "errored_groups": {g.op.name: g for g in report.errored_groups()},
        "errored": errored,
        "skipped": [op for op in skipped if not op.dtypes],  # whole ops; rows with skipped cases below
        "skipped_rows": [text.skipped_row(op, row) for op, row in skipped_rows],
        "skipped_more": skipped_hidden + skipped_rows_hidden,
        "interpreter_line": text.interpreter_line(report),
        "triton_warnings": text.triton_warning_lines(report, TRITON_WARNINGS_SHOWN),
        "triton_precisions": text.triton_precision_lines(report),
        "near_limit": [
            text.near_limit(op, row, used, report.warn_threshold or 0.0) for op, row, used in near
        ],
        "lint": lint,
        "compile_errors": [
            k for k in report.kernels if k.error is not None and k.status is KernelStatus.FAILED
        ],
        "kernel_problems": [
            k for k in report.kernels if k.status in (KernelStatus.ERROR, KernelStatus.SKIPPED)
        ],
        "passing_kernels": [k for k in report.kernels if k.status is KernelStatus.PASSED],
        "diff_rows": diff_rows,
        "diff_unchanged": (len(report.diff.entries) - len(changed)) if report.diff else 0,
        "passes": passes,
        "cut": cut,
        "not_run": dtypes_not_run(report),
        "coverage": coverage_rows(report) if limits.passes else [],
        "mutation": Md(mutation_markdown(report.mutation)) if report.mutation is not None else None,
    }


def _render(
    report: Results, links: Links, template: str, limits: Limits, unverified: UnverifiedSource | None = None
) -> str:
    rendered = _ENVIRONMENT.get_template(template).render(_context(report, links, limits, unverified))
    # Blank lines separate blocks; more than one in a row is template whitespace, never content.
    return re.sub(r"\n{3,}", "\n\n", rendered).lstrip("\n")


def _finalize(value: Any) -> str:
    """The auto-escape: what a ``{{ }}`` prints. Md passes; numbers are formatted; text is escaped."""
    if isinstance(value, Md):
        return value
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return text.number(value)
    return escape.markdown_text(_clip(value))


def _clip(value: Any, limit: int | None = None) -> str:
    # One value from the document never takes more than this, so that no single name or message
    # can push a comment over its budget in a place the size ladder cannot shorten.
    return text.clip(str(value), limit or VALUE_LIMIT)


def _link(label: Any, url: str | None) -> Md:
    safe = escape.safe_url(url)
    shown = escape.markdown_text(label)
    return Md(f"[{shown}]({safe})" if safe else shown)


def _failure_facts(failure: Failure) -> str:
    return (
        f"shapes {text.dims(failure.shapes)}; strides {text.dims(failure.strides)}; layouts "
        f"{text.pairs(failure.layouts)}; kwargs {text.kwargs(failure)}; values {failure.distribution}"
    )


def _environment() -> jinja2.Environment:
    return compiled_environment(
        ".md.j2",
        {
            "cell": lambda v: Md(escape.markdown_cell(_clip(v))),
            "code": lambda v: Md(escape.markdown_code_span(_clip(v))),
            "cellcode": lambda v: Md(escape.markdown_code_span(_clip(v), table_cell=True)),
            "block": lambda v, lang="": Md(escape.markdown_code_block(_clip(v, BLOCK_LIMIT), lang)),
            "link": _link,
            "headroom": lambda v: Md(text.headroom(v)),
            "gradients": lambda row: Md(escape.markdown_cell(text.gradients(row))),
            "num": lambda v: Md(text.number(v)),
            "first_line": text.first_line,
            "clip": text.clip,
            "dims": text.dims,
            "pairs": text.pairs,
            "kwargs": text.kwargs,
            "facts": _failure_facts,
            "error_vs_allowed": text.error_vs_allowed,
            "group_title": text.group_title,
            "repo_path": lambda path, report: report.repo_path(path),
            "rest": lambda group: group.failures[1:],  # the cases after the worst, shown collapsed
        },
        autoescape=False,  # Markdown, not HTML: _finalize escapes instead
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


_ENVIRONMENT = _environment()
