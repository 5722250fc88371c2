"""Configs written before build kinds became recipes (records replayed, users' own conf
trees): `build.kind: vllm_cpu` named the engine and the recipe at once. Each old kind is
read as the recipe it was and the engine it carried, so old records replay unchanged."""

from __future__ import annotations

from typing import Any, MutableMapping

# old build.kind -> (recipe, engine, the recipe's fields the old kind implied)
LEGACY_BUILD_KINDS: dict[str, tuple[str, str, dict[str, str]]] = {
    "sim": ("simulator", "sim", {}),
    "sglang_release": ("release", "sglang", {}),
    "sglang_patched": ("patched", "sglang", {"context": "containers/sglang"}),
    "vllm_release": ("release", "vllm", {}),
    "vllm_cpu": ("host_venv", "vllm", {"context": "containers/vllm-cpu", "suite": "bookworm",
                                        "image_python": "python3.11"}),
}
# before the simulator was an engine of its own, its servers said engine: sglang
SIMULATOR_WAS = "sglang"


def upgrade_config(cfg: MutableMapping[str, Any]) -> bool:
    """Rewrite an old build.kind in place (a dict or an open DictConfig); True if it was one."""
    build = cfg.get("build")
    if not build or build.get("kind") not in LEGACY_BUILD_KINDS:
        return False
    recipe, engine, implied = LEGACY_BUILD_KINDS[build["kind"]]
    build["kind"] = recipe
    build["engine"] = engine  # the old kind named it
    for key, value in implied.items():
        if not build.get(key):
            build[key] = value
    server = cfg.get("server")
    if server is not None and engine == "sim" and server.get("engine") in (None, SIMULATOR_WAS):
        server["engine"] = engine
    return True
