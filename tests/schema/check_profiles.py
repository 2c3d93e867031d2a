"""Checks advertised tool schemas with the model providers' own validators.

Reads a JSON object from stdin: {"<profile>": [{"tool": name, "schema": {...}}, ...], ...}
and prints one JSON object: {"checked": n, "failures": ["<tool> [<profile>] <why>", ...]}.

- every schema, whatever its profile: a valid JSON Schema (Draft 2020-12
  meta-schema, `jsonschema`), which is what Anthropic checks `input_schema`
  against and what Gemini's `parametersJsonSchema` takes;
- `portable`: also Gemini's `parameters`, through google-genai's own
  `types.Schema` (it refuses unknown fields), and the rules of the Gemini API
  that model does not enforce itself: one `type` string per node, no
  `additionalProperties`, string enums only, only the formats it takes
  (strings: `enum`, `date-time`; numbers: `float`, `double`; integers:
  `int32`, `int64`).

Installed by tests/mcp/setup.sh (pinned google-genai and jsonschema).
"""

import json
import sys

import jsonschema
from google.genai import types

GEMINI_FIELDS = {
    "type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems",
    "properties", "required", "minProperties", "maxProperties", "minLength", "maxLength",
    "pattern", "example", "anyOf", "propertyOrdering", "default", "items", "minimum", "maximum",
}

# The formats Gemini's `parameters` take, by type.
GEMINI_FORMATS = {
    "string": {"enum", "date-time"},
    "number": {"float", "double"},
    "integer": {"int32", "int64"},
}


def gemini_rules(schema, path, failures):
    """The Gemini API's rules beyond what types.Schema enforces."""
    if not isinstance(schema, dict):
        failures.append(f"{path}: not an object")
        return
    for key in schema:
        if key not in GEMINI_FIELDS:
            failures.append(f"{path}: field {key!r} is not a Gemini Schema field")
    if "type" in schema and not isinstance(schema["type"], str):
        failures.append(f"{path}: type must be one string, got {schema['type']!r}")
    if "enum" in schema and not all(isinstance(v, str) for v in schema["enum"]):
        failures.append(f"{path}: enum values must be strings")
    if "format" in schema and schema["format"] not in GEMINI_FORMATS.get(schema.get("type"), set()):
        failures.append(f"{path}: format {schema['format']!r} is not one Gemini takes for {schema.get('type')!r}")
    if schema.get("type") == "array" and "items" not in schema:
        failures.append(f"{path}: an array needs items")
    for name, sub in (schema.get("properties") or {}).items():
        gemini_rules(sub, f"{path}/properties/{name}", failures)
    if "items" in schema:
        gemini_rules(schema["items"], f"{path}/items", failures)
    for i, sub in enumerate(schema.get("anyOf") or []):
        gemini_rules(sub, f"{path}/anyOf/{i}", failures)


def main():
    given = json.load(sys.stdin)
    failures = []
    checked = 0
    for profile, schemas in given.items():
        for entry in schemas:
            tool, schema = entry["tool"], entry["schema"]
            checked += 1
            try:
                jsonschema.Draft202012Validator.check_schema(schema)
            except jsonschema.exceptions.SchemaError as e:
                failures.append(f"{tool} [{profile}] not a valid 2020-12 schema: {e.message}")
            if profile == "portable":
                try:
                    types.Schema.model_validate(schema)
                except Exception as e:  # pydantic's ValidationError, and any other refusal
                    first = str(e).splitlines()[:3]
                    failures.append(f"{tool} [portable] google-genai types.Schema refuses it: {first}")
                rules = []
                gemini_rules(schema, "", rules)
                failures.extend(f"{tool} [portable] Gemini: {r}" for r in rules)
    print(json.dumps({"checked": checked, "failures": failures}))


if __name__ == "__main__":
    main()
