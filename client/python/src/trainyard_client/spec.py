"""Job specs from dicts and TOML files, checked before anything is sent.

The checks and their words are the CLI's (common/spec/: spec_input.cc, schema.cc), so a
typo reads the same from Python as from `trainyard submit`:

    unknown key training.stpes (did you mean training.steps?)
    training.steps: expected integer, got string 'five'

The sections and keys are read from the generated JobSpec message, which mirrors the
spec core's schema field for field (spec_proto_test checks that), so a key added there
is known here without a change. Rules on values (ranges, layouts) stay the
controller's: it answers InvalidArgument naming the field and the rule."""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from ._stubs import spec_pb2

_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1
_UINT64_MAX = 2**64 - 1
# The spec core suggests a key only for a close miss (a typo): edit distance below 3.
_SUGGEST_BELOW = 3


class SpecError(ValueError):
    """A spec that cannot be a JobSpec (an unknown section or key, a wrong type); found
    before anything is sent. Rules on values are the controller's: InvalidArgument."""


def _quote(text: Any, limit: int = 100) -> str:
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _sections() -> Dict[str, Dict[str, FieldDescriptor]]:
    return {s.name: {f.name: f for f in s.message_type.fields}
            for s in spec_pb2.JobSpec.DESCRIPTOR.fields}


_SECTIONS = _sections()


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        diag, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            up = row[j]
            row[j] = min(row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1]))
            diag = up
    return row[len(b)]


def _suggestion(section: Optional[str], name: str) -> str:
    """' (did you mean training.steps?)' for a close miss, else ''; schema.cc's
    Suggestion: the first candidate at the smallest distance below 3."""
    best, best_distance = "", _SUGGEST_BELOW
    candidates = ([(s, s) for s in _SECTIONS] if section is None
                  else [(k, f"{section}.{k}") for k in _SECTIONS[section]])
    for candidate, shown in candidates:
        if abs(len(name) - len(candidate)) >= best_distance:
            continue
        d = _edit_distance(name, candidate)
        if d < best_distance:
            best, best_distance = shown, d
    return f" (did you mean {best}?)" if best else ""


def _type_name(value: Any) -> str:
    """The spec core's words for a value's type (KindName, TomlTypeName)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def _kind_name(f: FieldDescriptor) -> str:
    if f.cpp_type in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
        return "float"
    if f.cpp_type == FieldDescriptor.CPPTYPE_BOOL:
        return "boolean"
    if f.cpp_type == FieldDescriptor.CPPTYPE_STRING:
        return "string"
    return "integer"


def _check_value(path: str, f: FieldDescriptor, value: Any) -> None:
    """SpecError when `value` cannot be field f's (spec_input.cc's SpecInput::Set)."""
    def wrong() -> SpecError:
        shown = f" {_quote(value)}" if isinstance(value, str) else ""
        return SpecError(f"{path}: expected {_kind_name(f)}, got {_type_name(value)}{shown}")

    if value is None:  # proto3 JSON: not set
        return
    cpp = f.cpp_type
    if cpp == FieldDescriptor.CPPTYPE_UINT64:
        # The seed: a number, or proto3 JSON's decimal string (what Job.spec holds).
        if isinstance(value, str) and value.isascii() and value.isdigit():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise wrong()
        if not 0 <= value <= _UINT64_MAX:
            raise SpecError(f"{path}: {value} is out of range (must be a non-negative integer)")
    elif cpp in (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT32):
        if not isinstance(value, int) or isinstance(value, bool):
            raise wrong()
        if not _INT32_MIN <= value <= _INT32_MAX:
            raise SpecError(f"{path}: {value} is out of range (must fit in a 32-bit signed integer, "
                            f"{_INT32_MIN} to {_INT32_MAX})")
    elif cpp in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise wrong()
        if not math.isfinite(value):
            raise SpecError(f"{path}: expected a finite number, got {value!r}")
    elif cpp == FieldDescriptor.CPPTYPE_BOOL:
        if not isinstance(value, bool):
            raise wrong()
    elif not isinstance(value, str):
        raise wrong()


def _field(section: str, key: str) -> FieldDescriptor:
    if section not in _SECTIONS:
        raise SpecError(f"unknown section [{section}]{_suggestion(None, section)} "
                        f"(known: {', '.join(_SECTIONS)})")
    fields = _SECTIONS[section]
    if key not in fields:
        raise SpecError(f"unknown key {section}.{key}{_suggestion(section, key)}")
    return fields[key]


def check_spec_dict(spec: Mapping[str, Any]) -> None:
    """SpecError for the first unknown section or key, then the first value of a wrong
    type, in the order the spec core reports them."""
    if not isinstance(spec, Mapping):
        raise SpecError(f"expected a dict of sections, got {_type_name(spec)}")
    for section, body in spec.items():
        section = str(section)
        if section not in _SECTIONS:
            _field(section, "")
        if body is None:
            continue
        if not isinstance(body, Mapping):
            raise SpecError(f"{section}: expected a table, got {_type_name(body)}")
        for key in body:
            _field(section, str(key))
    for section, body in spec.items():
        for key, value in (body or {}).items():
            _check_value(f"{section}.{key}", _SECTIONS[str(section)][str(key)], value)


def spec_from_dict(spec: Mapping[str, Any]) -> "spec_pb2.JobSpec":
    """A JobSpec from a dict in the job file's shape ({"model": {"preset": "tiny"}, ...});
    SpecError naming the field, as the CLI does, for what cannot be one."""
    check_spec_dict(spec)
    try:
        return json_format.ParseDict(dict(spec), spec_pb2.JobSpec())
    except json_format.ParseError as e:  # a case check_spec_dict does not know yet
        raise SpecError(str(e).splitlines()[0][:300]) from None


def load_job_file(path: str, overrides: Optional[Mapping[str, Any]] = None) -> dict:
    """A TOML job file (examples/debug.toml documents every key) as a dict for submit(),
    with `overrides` {"training.steps": 5} applied like the CLI's --set. Errors name the
    file or the override: "examples/tiny.toml: unknown key training.stpes (did you mean
    training.steps?)", "override training.steps: expected integer, got string 'five'"."""
    import tomllib  # Python 3.11

    with open(path, "rb") as f:
        try:
            spec = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise SpecError(f"{path}: {e}") from None
    try:
        check_spec_dict(spec)
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None
    for key, value in (overrides or {}).items():
        section, dot, name = str(key).partition(".")
        if not dot or not section or not name or "." in name:
            raise SpecError(f"override {_quote(key)}: expected SECTION.KEY (e.g. training.steps)")
        try:
            field = _field(section, name)
        except SpecError as e:
            raise SpecError(f"override {_quote(key)}: {e}") from None
        try:
            _check_value(f"{section}.{name}", field, value)
        except SpecError as e:  # the message starts with the key, as the CLI's --set does
            raise SpecError(f"override {e}") from None
        spec.setdefault(section, {})[name] = value
    return spec
