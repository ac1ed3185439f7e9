"""Check fake API responses against GitHub's published OpenAPI description (the vendored subset).

``tests/fixtures/github-openapi/api.github.com.subset.json`` is GitHub's own text for the
operations the fake serves (see ``extract.py`` there). OpenAPI 3.0 schemas are JSON Schema draft 4
plus ``nullable``; this module turns ``nullable: true`` into a ``null`` alternative, points every
``$ref`` at one registered resource, and validates with ``jsonschema``'s Draft4 validator.

A status the operation does not document (GitHub lists no 429 or 5xx for most operations) is
checked against the generic ``basic-error`` schema, which is what GitHub sends for those.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

SPEC_PATH = Path(__file__).resolve().parents[1] / "fixtures" / "github-openapi" / "api.github.com.subset.json"
_URI = "urn:github-openapi-subset"


def _to_json_schema(node: Any) -> Any:
    """OpenAPI 3.0 schema objects -> draft 4: ``nullable`` and local ``$ref``s."""
    if isinstance(node, list):
        return [_to_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_json_schema(v) for k, v in node.items() if k != "nullable"}
    if isinstance(out.get("$ref"), str) and out["$ref"].startswith("#"):
        out["$ref"] = _URI + out["$ref"]
    if node.get("nullable") is True:
        if "type" in out and "$ref" not in out:
            types = out["type"] if isinstance(out["type"], list) else [out["type"]]
            out["type"] = [*types, "null"]
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
        else:
            return {"anyOf": [out, {"type": "null"}]}
    return out


class OpenApiContract:
    """Validates (operation, status, body) triples against the vendored description."""

    def __init__(self, path: Path = SPEC_PATH) -> None:
        self.raw = json.loads(path.read_text(encoding="utf-8"))
        self.doc = _to_json_schema(copy.deepcopy(self.raw))
        resource = Resource.from_contents(self.doc, default_specification=DRAFT4)
        self._registry = Registry().with_resource(_URI, resource)

    def operation(self, path_template: str, method: str) -> dict[str, Any]:
        try:
            result: dict[str, Any] = self.doc["paths"][path_template][method.lower()]
            return result
        except KeyError:
            raise AssertionError(f"{method} {path_template} is not in the vendored OpenAPI subset") from None

    def response_spec(self, path_template: str, method: str, status: int) -> dict[str, Any] | None:
        """The documented response object for ``status`` (``$ref`` resolved), or None."""
        response = self.operation(path_template, method)["responses"].get(str(status))
        if response is None:
            return None
        ref = response.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            response = self.doc["components"]["responses"][name]
        result: dict[str, Any] | None = response
        return result

    def validate(
        self, path_template: str, method: str, status: int, body: Any, headers: dict[str, str] | None = None
    ) -> None:
        """Raise if ``body`` (decoded JSON or None) does not match the spec for this response."""
        spec = self.response_spec(path_template, method, status)
        if spec is None:
            if status < 400:
                raise AssertionError(f"{method} {path_template} does not document status {status}")
            self._check({"$ref": f"{_URI}#/components/schemas/basic-error"}, body)
            return
        for header in spec.get("headers", {}):
            if header.lower() == "location" and headers is not None:
                assert headers.get("location"), f"{method} {path_template} {status} needs a Location header"
        content = spec.get("content")
        if not content:
            assert body in (None, b"", ""), f"{method} {path_template} {status} documents no body"
            return
        self._check(content["application/json"]["schema"], body)

    def _check(self, schema: dict[str, Any], body: Any) -> None:
        validator = jsonschema.Draft4Validator(
            schema, registry=self._registry, format_checker=jsonschema.FormatChecker()
        )
        validator.validate(body)


@cache
def contract() -> OpenApiContract:
    """The process-wide contract (parsing the subset once)."""
    return OpenApiContract()
