"""The tool's own packages, as backends/import_order.py protects them, are every package gpuemu-ci runs on."""

from __future__ import annotations

import importlib.metadata as metadata

import pytest
from packaging.requirements import Requirement

from gpuemu_ci.backends.import_order import TOOL_PACKAGES, is_tool_package


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _required_distributions() -> set[str]:
    """gpuemu-ci and everything it requires, transitively (extras left out), as installed here."""
    seen: set[str] = set()
    todo = ["gpuemu-ci"]
    while todo:
        name = _normal(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.distribution(name).requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


@pytest.mark.slow
def test_every_top_level_module_of_the_tool_and_its_dependencies_is_protected() -> None:
    wanted = _required_distributions()
    modules = {
        module
        for module, distributions in metadata.packages_distributions().items()
        if any(_normal(d) in wanted for d in distributions) and not module.startswith("__")
    }
    assert "numpy" in modules and "jinja2" in modules  # the closure was found at all
    assert modules <= TOOL_PACKAGES, sorted(modules - TOOL_PACKAGES)


def test_the_standard_library_is_the_tools_and_the_users_packages_are_theirs() -> None:
    assert is_tool_package("json") and is_tool_package("gpuemu_ci") and is_tool_package("torch")
    assert not is_tool_package("kernels") and not is_tool_package("pluggy")
