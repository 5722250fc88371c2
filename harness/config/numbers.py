"""Every number of a composed config is checked here, from the schema, before anything
starts: a NaN or an infinity is never a setting (NaN compares unequal to itself, so it slips
past every `<=` check and fails late, as a traceback or a wrong sentence), and a field whose
schema gives it bounds (``bounded(...)`` in harness/config/schema.py) must be within them.

The walk follows the schema's types: dataclasses field by field, ``Dict[str, X]`` value by
value, ``List[X]`` item by item, ``Optional[X]`` when set; ``Any`` blocks (free-form
engine options) are searched for non-finite numbers only. A field's bounds apply to every
number beneath it (a per-arm gate threshold, ``{arm: value}``, bounds each arm's value). Every
number field of the schema has bounds (tests/config/test_numbers.py walks it with
:func:`number_fields`), and no integer is past int64 (what Parquet, numpy and the engines hold).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.bounds import INT64_MAX
from harness.config.schema import Bounds, SpecgateConfig


class NumberError(ValueError):
    """A number in the config that cannot be a setting (one sentence naming the key)."""


def check_numbers(cfg: DictConfig, schema: type = SpecgateConfig) -> None:
    """Raise NumberError for the first non-finite or out-of-bounds number under ``cfg``."""
    walk(OmegaConf.to_container(cfg, resolve=True), schema, "", None)


def walk(value: Any, hint: Any, path: str, bounds: Bounds | None) -> None:
    if value is None:
        return
    hint = optional_inner(hint)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        hints = type_hints(hint)
        for field in dataclasses.fields(hint):
            if field.name in value:
                walk(value[field.name], hints[field.name], join(path, field.name), field.metadata.get("bounds"))
        return
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(value, dict):
        inner = args[1] if origin is dict and len(args) == 2 else Any
        for key, item in value.items():
            walk(item, inner, join(path, str(key)), bounds)
    elif isinstance(value, (list, tuple)):
        inner = args[0] if origin is list and args else Any
        for index, item in enumerate(value):
            walk(item, inner, f"{path}[{index}]", bounds)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        check_number(path, value, bounds)


def check_number(path: str, value: float, bounds: Bounds | None) -> None:
    if not math.isfinite(value):
        raise NumberError(f"{path} must be {bounds.describe() if bounds else 'a finite number'}, got {value}")
    shown = str(value) if isinstance(value, int) else f"{value:g}"
    if bounds is not None and not bounds.holds(value):
        raise NumberError(f"{path} must be {bounds.describe()}, got {shown}")
    if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise NumberError(f"{path} must be an integer that fits in 64 bits (at most {INT64_MAX}), got {shown}")


@functools.cache
def type_hints(schema: type) -> dict[str, Any]:
    """A schema dataclass's field types, resolved once (typing.get_type_hints evaluates every
    annotation anew: half of a check of a whole config's numbers)."""
    return typing.get_type_hints(schema)


def optional_inner(hint: Any) -> Any:
    """X for Optional[X]; the hint itself otherwise."""
    if typing.get_origin(hint) is typing.Union:
        others = [a for a in typing.get_args(hint) if a is not type(None)]
        return others[0] if len(others) == 1 else Any
    return hint


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def number_fields(schema: type = SpecgateConfig, path: str = "") -> list[tuple[str, Any, dataclasses.Field]]:
    """Every place of the schema that holds numbers: (path, the number's type, the field that
    carries its bounds), through nested blocks, engines' option blocks, and the values of
    mappings and lists (``gate.max_ttft_ms[*].p99``, ``server.sim.accept_probs[*]``); ``Any``
    values count, as they may hold numbers."""
    found = []
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        hint, where = optional_inner(hints[field.name]), join(path, field.name)
        while typing.get_origin(hint) in (dict, list):
            hint, where = optional_inner(typing.get_args(hint)[-1]), f"{where}[*]"
        if dataclasses.is_dataclass(hint):
            found += number_fields(hint, where)
        elif hint in (int, float) or hint is Any:
            found.append((where, hint, field))
    return found


def numeric_paths(schema: type = SpecgateConfig, path: str = "") -> list[tuple[str, Bounds | None]]:
    """Every plain number field of the schema (dataclass leaves typed int or float), with its
    bounds: what the tests set to NaN one by one."""
    found = []
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        hint = optional_inner(hints[field.name])
        where = join(path, field.name)
        if dataclasses.is_dataclass(hint):
            found += numeric_paths(hint, where)
        elif hint in (int, float):
            found.append((where, field.metadata.get("bounds")))
    return found
