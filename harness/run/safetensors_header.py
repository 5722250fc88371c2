"""Tensor names and shapes of a ``.safetensors`` file, from its header alone: 8 bytes of
little-endian header length, then that many bytes of JSON ({name: {dtype, shape,
data_offsets}}, plus an optional ``__metadata__``). No torch, no reading of the weights, so
the drafter-fit check can look inside a checkpoint of any size before a server starts."""

from __future__ import annotations

import json
import struct
from pathlib import Path

# a header larger than this is no safetensors header (the format caps it at 100 MB)
MAX_HEADER_BYTES = 100 * 1024 * 1024


class SafetensorsError(Exception):
    """The file is not a readable safetensors file (one sentence)."""


def tensor_shapes(path: Path) -> dict[str, list[int]]:
    """{tensor name: shape} from the header of the safetensors file at ``path``."""
    try:
        with Path(path).open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise SafetensorsError(f"{path} is too short to be a safetensors file")
            (length,) = struct.unpack("<Q", prefix)
            if not 0 < length <= MAX_HEADER_BYTES:
                raise SafetensorsError(f"{path} is not a safetensors file (header length {length})")
            header = json.loads(handle.read(length))
    except OSError as exc:
        raise SafetensorsError(f"{path} cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise SafetensorsError(f"{path} is not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path} is not a safetensors file (its header is not a JSON object)")
    return {name: list(entry.get("shape") or []) for name, entry in header.items()
            if name != "__metadata__" and isinstance(entry, dict)}
