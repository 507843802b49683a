"""Layer 1: the JSON Schema in data/inventory.schema.yml (types, enums, commit ids, checksums),
with each vendor's version matrix from its role (roles/vendors/<vendor>/meta/matrix.schema.yml)."""

from __future__ import annotations

import difflib
import json
import math
import re
from functools import lru_cache

import jsonschema
import yaml

from vllm_fleet import vendors
from vllm_fleet.models import DATA_DIR
from vllm_fleet.validation.problem import _describe, _masked, _numeric, _var_path, secret_path

SCHEMA_FILE = DATA_DIR / "inventory.schema.yml"


@lru_cache(maxsize=1)
def schema() -> dict:
    """The inventory schema, with the vendors of vllm_fleet.vendors (the one list) as the accepted ones."""
    doc = yaml.safe_load(SCHEMA_FILE.read_text())
    # Each vendor's matrix is in its own role (roles/vendors/<vendor>/meta/matrix.schema.yml).
    for name in vendors.VENDORS:
        matrix = vendors.matrix_schema(name)
        if matrix is not None:
            doc["$defs"][f"matrix_{name}"] = matrix
    vendor = doc["$defs"]["accelerator"]["properties"]["vendor"]
    vendor["enum"] = list(vendors.VENDORS)
    vendor["description"] = "one of " + ", ".join(vendors.VENDORS)
    doc["allOf"] = [
        {"if": {"properties": {"fleet_accelerator": {"properties": {"vendor": {"const": name}}, "required": ["vendor"]}},
                "required": ["fleet_accelerator"]},
         "then": {"properties": {"fleet_matrix": {"$ref": f"#/$defs/matrix_{name}"}}}}
        for name in vendors.VENDORS if f"matrix_{name}" in doc["$defs"]]
    return doc


def fleet_variables() -> list[str]:
    """The `fleet_*` variables the schema knows."""
    return sorted(schema()["properties"])

def _format_error(err: jsonschema.ValidationError) -> str:
    path = _var_path(err.absolute_path)
    sch = err.schema if isinstance(err.schema, dict) else {}
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        where = f"{path}.{missing}" if err.absolute_path else missing
        accepted = _lookup_description(err, missing)
        return f"{where} is missing" + (f"; expected {accepted}" if accepted else "")
    if err.validator == "additionalProperties":
        known = sorted((sch.get("properties") or {}).keys())
        extras = [k for k in err.instance if k not in known] if isinstance(err.instance, dict) else []
        hints = []
        for extra in extras:
            close = difflib.get_close_matches(extra, known, n=1)
            hints.append(f"unknown key {extra!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        return f"{path}: {'; '.join(hints)}; accepted keys: {', '.join(known)}"
    accepted = sch.get("description")
    if not accepted:
        if err.validator == "enum":
            accepted = "one of " + ", ".join(map(str, err.validator_value))
        elif err.validator == "type":
            accepted = f"a value of type {err.validator_value}"
        elif err.validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            op = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[err.validator]
            accepted = f"a number {op} {err.validator_value}"
        elif err.validator == "pattern":
            accepted = f"a string matching {err.validator_value}"
        elif err.validator == "propertyNames":
            accepted = "keys matching " + str((err.validator_value or {}).get("pattern"))
        else:
            accepted = err.message
    hint = ""
    if isinstance(err.instance, float) and not math.isfinite(err.instance):
        hint = " (NaN and infinity are no numbers: no bound can hold them)"
    elif isinstance(err.instance, float) and err.validator == "type" and "integer" in str(sch.get("type", "")):
        hint = (f" (a whole number without a decimal point: write {int(err.instance)}"
                if err.instance.is_integer() else " (a whole number") + ")"
    elif isinstance(err.instance, float) and "string" in str(sch.get("type", "")) + str(accepted):
        hint = " (YAML read it as a number: put it in quotes)"
    elif isinstance(err.instance, str) and err.validator == "type" and _numeric(err.instance) \
            and math.isfinite(float(err.instance)):
        # Validation does not know which route the value came by: both ways of writing the number (-e for a
        # variable of its own; a value inside a mapping or list comes with its variable, whole).
        number = json.dumps(int(err.instance) if re.fullmatch(r"\s*[-+]?\d+\s*", err.instance) else float(err.instance))
        hint = f" (a number in quotes is a string: in a YAML file write {number} without quotes"
        if len(err.absolute_path) == 1:
            hint += (f"; -e key=value gives strings, so pass numbers as JSON, e.g. "
                     f"-e '{{\"{err.absolute_path[0]}\": {number}}}'")
        hint += ")"
    shown = _masked(err.instance) if secret_path(err.absolute_path) else _describe(err.instance)
    return f"{path} = {shown}: expected {accepted}{hint}"


def _lookup_description(err: jsonschema.ValidationError, key: str) -> str | None:
    props = (err.schema or {}).get("properties", {}) if isinstance(err.schema, dict) else {}
    sub = props.get(key) or {}
    if "$ref" in sub:
        name = sub["$ref"].rsplit("/", 1)[-1]
        sub = schema()["$defs"].get(name, {})
    return sub.get("description")


def _is_integer(_checker, value) -> bool:
    # JSON Schema counts 9001.0 as an integer; every consumer here (the port registry, a unit's
    # `--port 9001.0`, Ansible's range()) takes it as a float or refuses it: whole numbers are ints.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(_checker, value) -> bool:
    # NaN passes every bound (its comparisons are all false) and infinity every minimum: no
    # consumer means either, so neither is a number here.
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and math.isfinite(value))


#: Draft 2020-12 with exact numbers: an integer is an int (not 9001.0), a number is finite.
ExactValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_number}))


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    return ExactValidator(schema())


def schema_problems(doc: dict) -> list[str]:
    validator = _validator()
    problems = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path]):
        # if/then branches report their own errors; the bare "if" wrapper adds nothing.
        if err.validator in ("if", "then", "allOf") and not err.absolute_path and err.context:
            problems += [_format_error(e) for e in err.context]
            continue
        problems.append(_format_error(err))
    return problems

@lru_cache(maxsize=1)
def _property_validator() -> jsonschema.protocols.Validator:
    """The schema's properties without what a fleet node must have (required, the vendor's
    matrix): for hosts that are no fleet node, whatever fleet_* they set is still typed."""
    doc = {k: v for k, v in schema().items() if k not in ("required", "allOf")}
    return ExactValidator(doc)


def property_problems(doc: dict) -> list[str]:
    return [_format_error(err) for err in sorted(_property_validator().iter_errors(doc),
                                                 key=lambda e: [str(p) for p in e.absolute_path])]


def host_document(host_vars: dict) -> dict:
    """The part of a host's variables that the schema checks."""
    return {k: v for k, v in host_vars.items() if k in schema()["properties"]}
