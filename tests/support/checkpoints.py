"""Checkpoint folders for tests that check a drafter against its target: a config.json and,
for an EAGLE-3 head, a safetensors file whose header has the shapes the fit check reads."""

import json
import struct


def write_checkpoint(folder, config, weights=None):
    """A checkpoint folder: config.json and, for a head, a safetensors file with these shapes
    (a valid header over zero-filled float32 data; an Eagle3 head gets an fc over 3 layers)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    if weights is None and "Eagle3" in " ".join(config.get("architectures") or []):
        hidden = config.get("hidden_size") or 8
        weights = {"fc.weight": [hidden, 3 * hidden]}
    if weights:
        write_safetensors(folder / "model.safetensors", weights)
    return str(folder)


def write_safetensors(path, shapes):
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4 * shape[0] * shape[1]
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + bytes(offset))
