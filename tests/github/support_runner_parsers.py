"""Read workflow commands and file commands back the way the Actions runner reads them.

Shared by the GitHub-layer tests and the entrypoint tests: they assert on what a runner would see,
not on the exact bytes written.
"""

from __future__ import annotations

import re

_COMMAND = re.compile(r"^::(?P<name>[a-z-]+)(?: (?P<props>[^:]*))?::(?P<data>.*)$")


def unescape(value: str, *, prop: bool) -> str:
    """The runner's decoding (ActionCommand.cs), used to check that what we encode survives."""
    pairs = [("%0D", "\r"), ("%0A", "\n")] + ([("%3A", ":"), ("%2C", ",")] if prop else [])
    for encoded, plain in pairs:
        value = value.replace(encoded, plain)
    return value.replace("%25", "%")


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    match = _COMMAND.match(line)
    assert match, line
    props = {}
    for pair in filter(None, (match.group("props") or "").split(",")):
        key, _, value = pair.partition("=")
        props[key] = unescape(value, prop=True)
    return match.group("name"), props, unescape(match.group("data"), prop=False)


def parse_github_output(text: str) -> dict[str, str]:
    """Read GITHUB_OUTPUT as the runner does: ``name=value`` lines or ``name<<DELIM`` blocks."""
    outputs: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line:
            i += 1
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            outputs[name] = "\n".join(lines[i + 1 : end])
            i = end + 1
        else:
            name, value = line.split("=", 1)
            outputs[name] = value
            i += 1
    return outputs
