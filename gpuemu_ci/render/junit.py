"""JUnit XML: built with ElementTree, one testcase per op x dtype and per kernel x arch.

Outcomes are mapped honestly: a failing op x dtype is a ``<failure>``; one that could not be
judged, or an op that did not load or never ran, is an ``<error>``; a skipped op is
``<skipped>``. Nothing that did not run is ever a pass. Test names are unique in the file
(``softmax[float32]``; a repeated name gets ``#2``), because CI test reporters merge equal names.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from gpuemu_ci.render import text
from gpuemu_ci.render.error_maps import error_map_line
from gpuemu_ci.render.escape import xml_text
from gpuemu_ci.results.kernels import KernelResult, KernelStatus
from gpuemu_ci.results.model import DtypeResult, FailureGroup, OpResult, OpStatus, Results

MESSAGE_LIMIT = 1000  # characters of a failure message attribute; the full text is the element's body


@dataclass
class _Suite:
    name: str
    names: set[str]  # shared by every suite of the document
    element: ET.Element = field(init=False)
    counts: dict[str, int] = field(
        default_factory=lambda: {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    )
    seconds: float = 0.0  # the testcases' times added up

    def __post_init__(self) -> None:
        self.element = ET.Element("testsuite", name=self.name)

    def case(
        self,
        classname: str,
        name: str,
        outcome: str | None = None,
        *,
        kind: str = "",
        message: str = "",
        body: str = "",
        output: str = "",
        seconds: float | None = None,
    ) -> None:
        """Add a testcase; ``outcome`` None passes, else "failure", "error" or "skipped". ``output``
        goes to ``<system-out>`` (a check that could not be carried out, on a passing kernel)."""
        unique, n = name, 1
        while unique in self.names:
            n += 1
            unique = f"{name}#{n}"
        self.names.add(unique)
        case = ET.SubElement(
            self.element,
            "testcase",
            classname=xml_text(classname),
            name=xml_text(unique),
            time=f"{seconds or 0.0:.6f}",
        )
        self.seconds += seconds or 0.0
        self.counts["tests"] += 1
        if output:
            ET.SubElement(case, "system-out").text = xml_text(output)
        if outcome is None:
            return
        self.counts[{"failure": "failures", "error": "errors", "skipped": "skipped"}[outcome]] += 1
        child = ET.SubElement(case, outcome, message=xml_text(text.clip(message, MESSAGE_LIMIT)))
        if kind:
            child.set("type", xml_text(kind))
        if body:
            child.text = xml_text(body)

    def close(self) -> ET.Element:
        """The ``<testsuite>`` element with its counts set."""
        for key, value in self.counts.items():
            self.element.set(key, str(value))
        self.element.set("time", f"{self.seconds:.6f}")
        return self.element


def render_junit(report: Results) -> str:
    """The JUnit XML document as text (UTF-8, with an XML declaration)."""
    return ET.tostring(junit_tree(report), encoding="unicode", xml_declaration=True) + "\n"


def junit_tree(report: Results) -> ET.Element:
    """``<testsuites>``: suite ``gpuemu-ci.ops``, and ``gpuemu-ci.kernels`` when there are kernels.

    Test names are unique across the whole document, not only within a suite."""
    names: set[str] = set()
    ops = _Suite("gpuemu-ci.ops", names)
    failed = {(g.op.name, g.dtype): g for g in report.failure_groups()}
    errored = {(g.op.name, g.dtype): g for g in report.errored_groups()}
    for op in report.ops:
        _op_cases(ops, op, failed, errored)
    suites = [ops.close()]
    if report.kernels:
        kernels = _Suite("gpuemu-ci.kernels", names)
        for kernel in report.kernels:
            _kernel_cases(kernels, kernel, report)
        suites.append(kernels.close())
    interpreted = text.interpreter_line(report)
    if interpreted:  # on the ops suite, where CI systems show suite properties
        properties = ET.Element("properties")
        ET.SubElement(properties, "property", name="triton-interpreter", value=xml_text(interpreted))
        suites[0].insert(0, properties)
    root = ET.Element("testsuites", name="gpuemu-ci")
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in suites)))
    root.set("time", f"{report.summary.duration_s:.3f}")
    for suite in suites:
        root.append(suite)
    return root


def _op_cases(
    suite: _Suite,
    op: OpResult,
    failed: dict[tuple[str, str], FailureGroup],
    errored: dict[tuple[str, str], FailureGroup],
) -> None:
    classname = f"gpuemu.ops.{op.name}"
    if not op.dtypes:  # skipped, not loadable, or never reached: one testcase that says so
        if op.status is OpStatus.SKIPPED:
            suite.case(
                classname,
                op.name,
                "skipped",
                message=f"skipped ({op.skip_reason or 'no reason given'})"
                + (f": {op.message}" if op.message else ""),
            )
        elif op.status is OpStatus.PASSED:
            suite.case(classname, op.name)
        else:
            outcome = "failure" if op.status is OpStatus.FAILED else "error"
            suite.case(classname, op.name, outcome, kind=op.status.value, message=op.message or "no case ran")
        return
    for row in op.dtypes:
        name = f"{op.name}[{row.dtype}]"
        seconds = row.duration_s  # time inside the op's and the reference's calls for this dtype
        if row.status is OpStatus.FAILED:
            group = failed.get((op.name, row.dtype))
            kind = group.worst.kind if group and group.worst else "failed"
            suite.case(
                classname,
                name,
                "failure",
                kind=kind,
                message=_row_message(row, group),
                body=_details(group),
                seconds=seconds,
            )
        elif row.status is OpStatus.ERROR:
            group = errored.get((op.name, row.dtype))
            suite.case(
                classname,
                name,
                "error",
                kind="not-judged",
                message=_row_message(row, group),
                body=_details(group),
                seconds=seconds,
            )
        elif row.status is OpStatus.SKIPPED:
            suite.case(
                classname,
                name,
                "skipped",
                message=row.skip_reason or op.skip_reason or "skipped",
                seconds=seconds,
            )
        elif row.cases_total == 0:
            suite.case(classname, name, "error", kind="not-run", message="no case ran")
        else:
            # Judged and passed; cases that ran but were not judged are said, never counted as a pass.
            suite.case(
                classname,
                name,
                output=text.skipped_row(op, row) if row.cases_skipped else "",
                seconds=seconds,
            )


def _row_message(row: DtypeResult, group: FailureGroup | None) -> str:
    if group is not None:
        return text.group_title(group)
    return f"{row.status.value}: {row.cases_failed} failed, {row.cases_errored} errored of {row.cases_total}"


def _details(group: FailureGroup | None) -> str:
    if group is None:
        return ""
    lines = []
    for failure in group.failures:
        lines += [
            f"{failure.case_id}: {failure.kind}: {text.first_line(failure.message, 2000)}",
            f"  shapes {text.dims(failure.shapes)}; strides {text.dims(failure.strides)}; layouts "
            f"{text.pairs(failure.layouts)}; kwargs {text.kwargs(failure)}; values {failure.distribution}",
            f"  case seed {failure.case_seed}; {text.error_vs_allowed(failure)}",
            *([f"  pattern: {failure.pattern}"] if failure.pattern else []),
            *([f"  where: {failure.where}"] if failure.where else []),
            *([f"  {drawn}"] if (drawn := error_map_line(failure)) else []),
            f"  replay: {failure.replay}",
        ]
    if group.unrecorded:
        lines.append(f"... and {group.unrecorded} more failing case(s) not recorded in results.json")
    return "\n".join(lines)


def _kernel_cases(suite: _Suite, kernel: KernelResult, report: Results) -> None:
    classname = f"gpuemu.kernels.{kernel.name}"
    archs = list(
        dict.fromkeys(
            [*kernel.archs, *(e.arch for e in kernel.entries), *(v.arch for v in kernel.violations)]
        )
    )
    if kernel.error is not None and kernel.error.arch and kernel.error.arch not in archs:
        archs.append(kernel.error.arch)
    if not archs:
        archs = [""]
    for arch in archs:
        name = f"{kernel.name}[{arch}]" if arch else kernel.name
        violations = [v for v in kernel.violations if v.arch == arch or not arch]
        errors = [v for v in violations if v.severity == "error"]
        compile_error = (
            kernel.error if kernel.error and (not kernel.error.arch or kernel.error.arch == arch) else None
        )
        if compile_error is not None:
            where = report.repo_path(compile_error.file) if compile_error.file else kernel.source
            suite.case(
                classname,
                name,
                "failure",
                kind="compile-error",
                message=f"does not compile: {text.first_line(compile_error.message)}",
                body=f"{where}:{compile_error.line or ''}: {compile_error.message}",
            )
        elif errors:
            suite.case(
                classname,
                name,
                "failure",
                kind=errors[0].metric,
                message=errors[0].message,
                body="\n".join(v.message for v in violations),
            )
        elif kernel.status is KernelStatus.ERROR:
            suite.case(classname, name, "error", kind="toolchain", message="the toolchain gave no answer")
        elif kernel.status is KernelStatus.SKIPPED:
            suite.case(classname, name, "skipped", message="not linted")
        else:  # passed here (a failure on another arch is that arch's testcase)
            suite.case(
                classname, name, output="\n".join(f"not checked (allowed): {v.message}" for v in violations)
            )
