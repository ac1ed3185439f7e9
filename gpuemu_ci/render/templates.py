"""The report templates (`gpuemu_ci/templates/*.j2`), read and compiled once, when a renderer is imported.

Jinja2's file loaders read a template when it is first used and again whenever its file changes. The Action's
process, which holds the token, renders the comment and the summary after the code under test ran; where that
code can write the installation (the fallback confinements: root without capabilities, or the Action running
as the children's own user), an expression appended to a template would run in that process. So every
template is read into memory and compiled before any code under test starts (the Action imports the renderers
first: action/step.py, PUBLISHING_MODULES), and nothing is read from a file afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

import jinja2


def template_sources(suffix: str) -> dict[str, str]:
    """Every template of the package whose name ends in `suffix` (".md.j2"), by name, read now."""
    folder = resources.files("gpuemu_ci") / "templates"
    return {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(suffix) and entry.is_file()
    }


def compiled_environment(suffix: str, filters: Mapping[str, Any], **options: Any) -> jinja2.Environment:
    """An environment over the package's templates ending in `suffix`, as they are now, every one compiled
    already: its loader is a dict in memory and it never reloads (`auto_reload` off, no cache limit)."""
    sources = template_sources(suffix)
    env = jinja2.Environment(loader=jinja2.DictLoader(sources), auto_reload=False, cache_size=-1, **options)
    env.filters.update(filters)
    for name in sources:
        env.get_template(name)
    return env
