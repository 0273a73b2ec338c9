"""The program a plan-and-extract planner writes, checked strictly, and the values it names.

A program is a list of steps and an answer template. A step is a tool call, or an
extraction: a typed value the quarantined extractor takes out of a text. A value not yet
known is written as a reference:

- ``{"$ref": "s1.body"}``: step ``s1``'s value, then key ``body`` (``s1.items.0``: an index).
- ``{"$extract": {"from": {"$ref": "s1.body"}, "schema": {...}, "instruction": "..."}}``:
  a value the extractor pulls out of the text ``from`` names, checked against ``schema``.
  An inline extraction becomes a step of its own, just before the step that uses it.

Anything else that looks like a directive (a key starting with ``$``) is refused, as are
unknown tools, references to a step that is not earlier, and schemas outside the small
subset :func:`schema_errors` checks. The check fails closed: what it does not know, it
refuses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ..events import JSON

STEP_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
"""A step's id: a letter, then letters, digits or ``_`` (at most 32 characters)."""

REF = "$ref"
EXTRACT = "$extract"

_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}
_KEYWORDS = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "minItems", "maxItems", "minLength", "maxLength", "pattern", "minimum", "maximum",
    "format", "description", "title",
})
"""The JSON Schema keywords an extraction's schema may use. ``format`` is shown to the
extractor but not checked."""


class ProgramError(ValueError):
    """A program the planner wrote is not valid; the message says why (shown to the
    planner, which wrote everything it names)."""


class MissingValue(LookupError):
    """A reference names a part of a value that is not there."""


# -- schemas -----------------------------------------------------------------------------

def check_schema(schema: Any, where: str) -> None:
    """Refuse a schema outside the checked subset.

    Args:
        schema: The schema.
        where: Where it is in the program, for the message.
    """
    if not isinstance(schema, dict) or not schema:
        raise ProgramError(f"{where}: a schema must be a non-empty JSON object")
    unknown = sorted(set(schema) - _KEYWORDS)
    if unknown:
        raise ProgramError(f"{where}: schema keywords {unknown} are not supported; use "
                           f"{sorted(_KEYWORDS)}")
    kinds = schema.get("type")
    listed = kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []
    if not listed and "enum" not in schema and "const" not in schema:
        raise ProgramError(f"{where}: a schema needs a type, an enum or a const")
    if any(k not in _TYPES for k in listed):
        raise ProgramError(f"{where}: unknown type {kinds!r}; use {sorted(_TYPES)}")
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise ProgramError(f"{where}: enum must be a list")
    if "pattern" in schema:
        try:
            re.compile(str(schema["pattern"]))
        except re.error as exc:
            raise ProgramError(f"{where}: pattern does not compile: {exc}") from None
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        raise ProgramError(f"{where}: properties must be an object")
    for name, sub in props.items():
        check_schema(sub, f"{where}.properties.{name}")
    required = schema.get("required", [])
    if not isinstance(required, list) or any(r not in props for r in required):
        raise ProgramError(f"{where}: required must list properties the schema declares")
    if "additionalProperties" in schema and not isinstance(schema["additionalProperties"],
                                                             bool):
        raise ProgramError(f"{where}: additionalProperties must be true or false")
    if "items" in schema:
        check_schema(schema["items"], f"{where}.items")
    for bound in ("minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum"):
        if bound in schema and (isinstance(schema[bound], bool)
                                or not isinstance(schema[bound], int | float)):
            raise ProgramError(f"{where}: {bound} must be a number")


def schema_errors(value: Any, schema: Mapping[str, Any], path: str = "value") -> list[str]:
    """What is wrong with ``value`` under ``schema`` (a schema :func:`check_schema` took),
    one ``path: message`` each. An object admits only the properties its schema lists,
    unless it says ``additionalProperties: true``.

    Args:
        value: The value.
        schema: The schema.
        path: Where the value is, for the messages.
    """
    kinds = schema.get("type")
    listed = kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []
    if listed and not any(_TYPES[k](value) for k in listed):
        return [f"{path}: expected {' or '.join(listed)}"]
    if "const" in schema and value != schema["const"]:
        return [f"{path}: must be {json.dumps(schema['const'])}"]
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        return [f"{path}: must be one of {json.dumps(schema['enum'])}"]
    out: list[str] = []
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            out.append(f"{path}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            out.append(f"{path}: longer than {schema['maxLength']} characters")
        if "pattern" in schema and not re.search(str(schema["pattern"]), value):
            out.append(f"{path}: does not match the pattern {schema['pattern']!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{path}: less than {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{path}: more than {schema['maximum']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            out.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"{path}: more than {schema['maxItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                out += schema_errors(item, schema["items"], f"{path}[{i}]")
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties", {})
        out += [f"{path}: missing {r!r}" for r in schema.get("required", []) if r not in value]
        if not schema.get("additionalProperties", False):
            out += [f"{path}: unexpected {k!r}" for k in value if k not in props]
        for k, v in value.items():
            if k in props:
                out += schema_errors(v, props[k], f"{path}.{k}")
    return out


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) \
        else a == b


# -- programs ----------------------------------------------------------------------------

def parse_program(raw: Any, *, tools: Collection[str], known: Collection[str],
                  max_steps: int) -> tuple[list[dict[str, Any]], JSON]:
    """Check a program and return its steps, inline extractions made steps of their own,
    and its answer template.

    Args:
        raw: The program as the planner wrote it: ``{"steps": [...], "answer": ...}``.
        tools: The tools it may call.
        known: The ids of steps already done, which it may reference.
        max_steps: The most steps it may have, extractions included.

    Raises:
        ProgramError: Why it is not valid.
    """
    if not isinstance(raw, dict):
        raise ProgramError("the program must be a JSON object with `steps` and `answer`")
    extra = sorted(set(raw) - {"steps", "answer"})
    if extra:
        raise ProgramError(f"the program has unknown fields {extra}")
    given = raw.get("steps", [])
    if not isinstance(given, list):
        raise ProgramError("`steps` must be a list")
    defined: list[str] = list(known)
    out: list[dict[str, Any]] = []
    ids = [s.get("id") for s in given if isinstance(s, dict)]
    for n, step in enumerate(given):
        where = f"steps[{n}]"
        if not isinstance(step, dict):
            raise ProgramError(f"{where}: a step must be an object")
        sid = step.get("id")
        if not isinstance(sid, str) or not STEP_ID.match(sid):
            raise ProgramError(f"{where}: id must match {STEP_ID.pattern}")
        if sid in defined or ids.count(sid) > 1:
            raise ProgramError(f"{where}: the id {sid!r} is used twice")
        if "tool" in step:
            extra = sorted(set(step) - {"id", "tool", "args"})
            if extra:
                raise ProgramError(f"{where}: unknown fields {extra}")
            if step["tool"] not in tools:
                raise ProgramError(f"{where}: no tool {step['tool']!r}; use one of "
                                   f"{sorted(tools)}")
            args = step.get("args", {})
            if not isinstance(args, dict):
                raise ProgramError(f"{where}: args must be an object")
            inline: list[dict[str, Any]] = []
            args = _template(args, f"{where}.args", defined, inline, sid, ids)
            out += inline
            defined += [x["id"] for x in inline]
            out.append({"id": sid, "tool": step["tool"], "args": args})
        elif "extract" in step:
            extra = sorted(set(step) - {"id", "extract"})
            if extra:
                raise ProgramError(f"{where}: unknown fields {extra}")
            out.append({"id": sid, **_extraction(step["extract"], f"{where}.extract",
                                                  defined)})
        else:
            raise ProgramError(f"{where}: a step has a `tool` or an `extract`")
        defined.append(sid)
    inline = []
    answer = _template(raw.get("answer"), "answer", defined, inline, "answer", ids)
    out += inline
    if len(out) > max_steps:
        raise ProgramError(f"the program has {len(out)} steps; at most {max_steps}")
    return out, answer


def _extraction(spec: Any, where: str, defined: list[str]) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise ProgramError(f"{where}: an extraction is an object with from, schema and "
                           "instruction")
    extra = sorted(set(spec) - {"from", "schema", "instruction"})
    if extra:
        raise ProgramError(f"{where}: unknown fields {extra}")
    source = spec.get("from")
    if not (isinstance(source, dict) and set(source) == {REF}):
        raise ProgramError(f"{where}.from must be a reference {{\"$ref\": \"<step>...\"}}")
    _check_ref(source[REF], f"{where}.from", defined)
    check_schema(spec.get("schema"), f"{where}.schema")
    instruction = spec.get("instruction", "")
    if not isinstance(instruction, str):
        raise ProgramError(f"{where}.instruction must be text")
    return {"extract": {"from": source[REF], "schema": spec["schema"],
                        "instruction": instruction}}


def _check_ref(ref: Any, where: str, defined: list[str]) -> None:
    if not isinstance(ref, str) or not ref:
        raise ProgramError(f"{where}: a reference is a string like \"s1.body\"")
    head, *path = ref.split(".")
    if head not in defined:
        raise ProgramError(f"{where}: {ref!r} names no earlier step (known: {defined})")
    if any(not p for p in path):
        raise ProgramError(f"{where}: {ref!r} has an empty part")


def _template(value: Any, where: str, defined: list[str], inline: list[dict[str, Any]],
              owner: str, ids: list[Any]) -> Any:
    """``value`` with its references checked and its inline extractions moved to
    ``inline`` (named ``<owner>_x<n>``)."""
    if isinstance(value, dict):
        directives = [k for k in value if str(k).startswith("$")]
        if directives:
            if len(value) != 1 or directives[0] not in (REF, EXTRACT):
                raise ProgramError(f"{where}: {sorted(value)} is not a directive; use "
                                   f"{{\"{REF}\": ...}} or {{\"{EXTRACT}\": ...}} alone")
            if directives[0] == REF:
                _check_ref(value[REF], where, defined + [x["id"] for x in inline])
                return {REF: value[REF]}
            xid = f"{owner}_x{len(inline) + 1}"
            if xid in defined or xid in ids:
                raise ProgramError(f"{where}: the id {xid!r} of this extraction is taken")
            step = {"id": xid, **_extraction(value[EXTRACT], where,
                                              defined + [x["id"] for x in inline])}
            inline.append(step)
            return {REF: xid}
        return {k: _template(v, f"{where}.{k}", defined, inline, owner, ids)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_template(v, f"{where}[{i}]", defined, inline, owner, ids)
                for i, v in enumerate(value)]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise ProgramError(f"{where}: not a JSON value")


# -- values ------------------------------------------------------------------------------

def lookup(ref: str, values: Mapping[str, Any]) -> Any:
    """The value ``ref`` names in ``values`` (step id -> value).

    Args:
        ref: The reference (``s1.items.0.id``).
        values: The values of the steps done.

    Raises:
        MissingValue: A part of the path is not there.
    """
    head, *path = ref.split(".")
    if head not in values:
        raise MissingValue(ref)
    value = values[head]
    for part in path:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise MissingValue(ref)
    return value


def refs_in(template: Any) -> list[str]:
    """Every reference in ``template``, in order.

    Args:
        template: A program's arguments or answer.
    """
    if isinstance(template, dict):
        if set(template) == {REF}:
            return [str(template[REF])]
        return [r for v in template.values() for r in refs_in(v)]
    if isinstance(template, list):
        return [r for v in template for r in refs_in(v)]
    return []


def fill(template: Any, values: Mapping[str, Any]) -> Any:
    """``template`` with each reference replaced by the value it names.

    Args:
        template: A program's arguments or answer.
        values: The values of the steps done.

    Raises:
        MissingValue: A reference names a part that is not there.
    """
    if isinstance(template, dict):
        if set(template) == {REF}:
            return lookup(str(template[REF]), values)
        return {k: fill(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, values) for v in template]
    return template


def ref_paths(template: Any, path: str) -> list[tuple[str, str]]:
    """Where in the filled ``template`` each reference's value lands: (path, reference).

    Args:
        template: A program's answer.
        path: The path of the template itself.
    """
    if isinstance(template, dict):
        if set(template) == {REF}:
            return [(path, str(template[REF]))]
        return [p for k, v in template.items() for p in ref_paths(v, f"{path}.{k}")]
    if isinstance(template, list):
        return [p for i, v in enumerate(template) for p in ref_paths(v, f"{path}[{i}]")]
    return []


def leaf_paths(template: Any, path: str) -> list[str]:
    """The paths of the literal strings and numbers of ``template`` (not its references).

    Args:
        template: A program's answer.
        path: The path of the template itself.
    """
    if isinstance(template, dict):
        if set(template) == {REF}:
            return []
        return [p for k, v in template.items() for p in leaf_paths(v, f"{path}.{k}")]
    if isinstance(template, list):
        return [p for i, v in enumerate(template) for p in leaf_paths(v, f"{path}[{i}]")]
    if isinstance(template, str | int | float) and not isinstance(template, bool):
        return [path]
    return []


def describe(step: Mapping[str, Any]) -> str:
    """One line naming a program step, for the journal's plan.

    Args:
        step: The step.
    """
    if "tool" in step:
        return f"{step['id']}: {step['tool']}({json.dumps(step['args'], sort_keys=True)})"
    x = step["extract"]
    return f"{step['id']}: extract from {x['from']} ({json.dumps(x['schema'], sort_keys=True)})"
