"""Configs written in older shapes (records replayed, users' own conf trees), read as
today's, so old records replay unchanged and old conf trees still compose:

- before build kinds became recipes, `build.kind: vllm_cpu` named the engine and the
  recipe at once: each old kind is read as the recipe it was and the engine it carried;
- before each engine had its own options block, vLLM's options were shared server keys
  (`server.dtype`, `server.max_model_len`, `server.max_num_seqs`): each is moved into
  its engine's block (`server.vllm.dtype`, ...)."""

from __future__ import annotations

from typing import Any, MutableMapping

from harness.engines import ENGINE_OPTIONS

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
# old shared server key -> the engine whose options block holds it now
MOVED_SERVER_KEYS: dict[str, str] = {"dtype": "vllm", "max_model_len": "vllm", "max_num_seqs": "vllm"}


def upgrade_config(cfg: MutableMapping[str, Any]) -> bool:
    """Rewrite old shapes in place (a dict or an open DictConfig); True if build.kind was an old one."""
    move_server_options(cfg)
    return upgrade_build_kind(cfg)


def move_server_options(cfg: MutableMapping[str, Any]) -> None:
    """`server.dtype: float32` -> `server.vllm.dtype: float32` (the old key left null). Set,
    the old spelling wins over the block: the conf tree's blocks are today's defaults, and an
    old key is what a command line or a user's own config written before set on purpose."""
    server = cfg.get("server")
    if server is None:
        return
    for key, engine in MOVED_SERVER_KEYS.items():
        if server.get(key) is None:
            continue
        if server.get(engine) is None:  # a record's plain dict, or the schema's typed block
            server[engine] = {} if isinstance(server, dict) else ENGINE_OPTIONS[engine]()
        server[engine][key] = server[key]
        server[key] = None


def upgrade_build_kind(cfg: MutableMapping[str, Any]) -> bool:
    """Rewrite an old build.kind in place; True if it was one."""
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
