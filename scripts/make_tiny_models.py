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
  draft_graded_15 ... draft_graded_35/
                 the target's weights with seeded Gaussian noise of growing scale: graded agreement,
                 each one's noise scale chosen by bisection so that its offline greedy accept length
                 at k = 3 on specmix (chain_accept_length) is 1.5, 2.0, 2.5, 3.0, 3.5 (within 0.1)
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
# The graded family: draft_graded_<10 x L> for each target accept length L at k = GRADED_K.
GRADED_TARGETS = (1.5, 2.0, 2.5, 3.0, 3.5)
GRADED_NAMES = tuple(f"draft_graded_{round(10 * length)}" for length in GRADED_TARGETS)
MODEL_NAMES = ("target", "draft_self", "draft_random", *GRADED_NAMES)
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

# How the graded drafts' noise scales are chosen (offline, teacher-forced; see grade_drafts()).
GRADED_SEED = 4242          # the noise draw Z, one per tensor, the same for every scale
GRADED_K = 3                # num_speculative_tokens, as conf/drafter/vllm_draft_graded_*.yaml serve
GRADED_DATASET = "datasets/specmix.jsonl"
GRADED_ORDER_SEED = 0       # conf/workload/tiny_specmix.yaml's seed: the rows in the order a load sends them
GRADED_PROMPTS = 16         # the first rows of that order (first turns), rendered with CHAT_TEMPLATE
GRADED_CONTINUATION = 64    # the target's greedy tokens after each prompt (it never emits EOS)
GRADED_TOLERANCE = 0.05     # bisection stops this close to the target accept length
GRADED_MAX_STEPS = 16


def chain_accept_length(matches, k: int) -> tuple[int, int]:
    """(tokens, cycles) of draft-model speculation walked over one continuation under greedy:
    matches[j] is whether the draft's argmax at continuation position j (teacher-forced on the
    target's tokens before it) is the target's token there. From position t a cycle accepts
    the consecutive matches from t, at most k, and yields accepted + 1 tokens (the target's
    own after the last accepted draft); t advances by that. Accept length = tokens / cycles."""
    if k < 1:
        raise ValueError(f"k must be >= 1, not {k}")
    matches = [bool(m) for m in matches]
    t = tokens = cycles = 0
    while t < len(matches):
        accepted = 0
        while accepted < k and t + accepted < len(matches) and matches[t + accepted]:
            accepted += 1
        tokens += accepted + 1
        cycles += 1
        t += accepted + 1
    return tokens, cycles


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
    graded = manifest.get("graded") or {}
    if graded.get("dataset_sha256") != sha256_file(dataset_path()):
        return f"{GRADED_DATASET} changed since the graded drafts' noise scales were chosen"
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


def dataset_path() -> Path:
    return Path(__file__).resolve().parents[1] / GRADED_DATASET


def graded_prompts(tokenizer) -> list[list[int]]:
    """The first GRADED_PROMPTS rows of GRADED_DATASET in the order a load with seed
    GRADED_ORDER_SEED sends them (harness/load/prompts.py DatasetPrompts), first turns, as
    vLLM renders a chat request: CHAT_TEMPLATE with the generation prompt, no special tokens
    added."""
    import random

    rows = [json.loads(line) for line in dataset_path().read_text().splitlines() if line.strip()]
    order = list(range(len(rows)))
    random.Random(GRADED_ORDER_SEED).shuffle(order)
    prompts = []
    for index in order[:GRADED_PROMPTS]:
        row = rows[index]
        text = row["prompt"] if "prompt" in row else row["turns"][0]
        rendered = f"{BOS}<|user|>\n{text}\n<|assistant|>\n"
        ids = tokenizer.encode(rendered, add_special_tokens=False).ids
        prompts.append(ids[-(MAX_LEN - GRADED_CONTINUATION - 1):])
    return prompts


def greedy_continuations(model, prompts: list[list[int]], length: int) -> list[list[int]]:
    """The target's own greedy tokens after each prompt (ignore_eos: it never emits EOS), all
    prompts in one left-padded batch with a KV cache (0.8 s here against 2.4-4.3 s one prompt
    at a time; the same tokens)."""
    import torch

    width, count = max(len(p) for p in prompts), len(prompts)
    ids = torch.zeros((count, width), dtype=torch.long)
    mask = torch.zeros((count, width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    tokens = []
    with torch.no_grad():
        step = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        while True:
            tokens.append(step.logits[:, -1].argmax(-1))
            if len(tokens) == length:
                break
            mask = torch.cat([mask, torch.ones((count, 1), dtype=torch.long)], 1)
            positions = positions[:, -1:] + 1
            step = model(input_ids=tokens[-1][:, None], attention_mask=mask, position_ids=positions,
                         past_key_values=step.past_key_values, use_cache=True)
    return torch.stack(tokens, 1).tolist()


def draft_matches(model, prompts: list[list[int]], continuations: list[list[int]]) -> list[list[bool]]:
    """Teacher-forced on prompt + the target's continuation, one sequence at a time (no padding
    to compute), the head only where a continuation token is predicted: whether the draft's
    argmax predicting continuation token j is that token, for j >= 1 (token 0 is the
    prefill's, not drafted)."""
    import torch

    matches = []
    with torch.no_grad():
        for prompt, cont in zip(prompts, continuations):
            hidden = model.model(torch.tensor([prompt + cont])).last_hidden_state[0]
            start = len(prompt)  # position start + j - 1 predicts token j
            predicted = model.lm_head(hidden[start:start + len(cont) - 1]).argmax(-1).tolist()
            matches.append([got == want for got, want in zip(predicted, cont[1:])])
    return matches


def offline_accept_length(matches: list[list[bool]], k: int = GRADED_K) -> float:
    tokens = cycles = 0
    for sequence in matches:
        t, c = chain_accept_length(sequence, k)
        tokens, cycles = tokens + t, cycles + c
    return tokens / cycles


def grade_drafts(target_dir: Path, tokenizer, work: Path) -> tuple[dict, dict]:
    """draft_graded_<10 L> for each L in GRADED_TARGETS: the target with every weight tensor W
    replaced by W + s * std(W) * Z (Z one seeded standard-normal draw per tensor, the same for
    every s, so agreement falls as s grows; the EOS row of lm_head kept at zero), s chosen by
    bisection so that the offline accept length (draft_matches + chain_accept_length at
    k = GRADED_K) is within GRADED_TOLERANCE of L, or the closest of GRADED_MAX_STEPS tries.
    Returns each model's manifest entry and the method's."""
    import copy

    import torch
    from transformers import LlamaForCausalLM

    started = time.time()
    target = LlamaForCausalLM.from_pretrained(str(target_dir), torch_dtype=torch.float32).eval()
    eos = target.config.eos_token_id
    prompts = graded_prompts(tokenizer)
    continuations = greedy_continuations(target, prompts, GRADED_CONTINUATION)
    self_length = offline_accept_length(draft_matches(target, prompts, continuations))

    base = {name: p.detach().clone() for name, p in target.named_parameters()}
    generator = torch.Generator().manual_seed(GRADED_SEED)
    noise = {name: torch.randn(w.shape, generator=generator, dtype=torch.float32) * w.std()
             for name, w in base.items()}  # std(W) * Z; a constant tensor (a norm's ones) gets none
    draft = copy.deepcopy(target)
    params = dict(draft.named_parameters())

    def set_scale(scale: float) -> None:
        with torch.no_grad():
            for name, w in base.items():
                params[name].copy_(w + scale * noise[name])
            params["lm_head.weight"][eos].zero_()

    tried: dict[float, float] = {0.0: self_length}

    def accept_length(scale: float) -> float:
        if scale not in tried:
            set_scale(scale)
            tried[scale] = offline_accept_length(draft_matches(draft, prompts, continuations))
        return tried[scale]

    high = 0.5
    while accept_length(high) > min(GRADED_TARGETS) - GRADED_TOLERANCE and high < 64:
        high *= 2
    chosen = {}
    for length in GRADED_TARGETS:
        for _ in range(GRADED_MAX_STEPS):
            above = max(s for s, al in tried.items() if al >= length)  # the noisiest still above L
            below = min((s for s, al in tried.items() if al < length and s > above), default=None)
            best = min(tried, key=lambda s: (abs(tried[s] - length), s))
            if abs(tried[best] - length) <= GRADED_TOLERANCE or below is None:
                break
            accept_length(round((above + below) / 2, 6))
        best = min(tried, key=lambda s: (abs(tried[s] - length), s))
        chosen[length] = best

    entries = {}
    for length, name in zip(GRADED_TARGETS, GRADED_NAMES):
        scale = chosen[length]
        set_scale(scale)
        shutil.copytree(target_dir, work / name)
        saved = work / f".{name}.weights"
        draft.save_pretrained(str(saved), safe_serialization=True)
        (saved / "model.safetensors").replace(work / name / "model.safetensors")
        shutil.rmtree(saved)
        entries[name] = {"copy_of": "target", "noise_scale": scale, "noise_seed": GRADED_SEED,
                         "target_accept_length": length,
                         "offline_accept_length": round(tried[scale], 4)}
    method = {
        "k": GRADED_K, "dataset": GRADED_DATASET, "dataset_sha256": sha256_file(dataset_path()),
        "order_seed": GRADED_ORDER_SEED, "prompts": len(prompts),
        "prompt_tokens": sum(len(p) for p in prompts), "continuation_tokens": GRADED_CONTINUATION,
        "tolerance": GRADED_TOLERANCE, "draft_self_offline_accept_length": round(self_length, 4),
        "tried": {f"{s:g}": round(al, 4) for s, al in sorted(tried.items())},
        "seconds": round(time.time() - started, 2),
    }
    return entries, method


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
        graded, grading = grade_drafts(work / "target", tokenizer, work)
        for name, entry in graded.items():
            models[name] = {**models["target"], **entry}
            print(f"{name}: noise scale {entry['noise_scale']:g}, offline accept length "
                  f"{entry['offline_accept_length']:.2f} (k={GRADED_K}, target {entry['target_accept_length']})", flush=True)
        print(f"graded drafts: draft_self offline {grading['draft_self_offline_accept_length']:.2f}, "
              f"{len(grading['tried'])} scales tried in {grading['seconds']}s", flush=True)

        for path in work.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)  # readable by any user (e.g. a container's)
        hashes = file_hashes(work)
        manifest = {
            "format": FORMAT,
            "script_sha256": script_sha256(),
            "versions": {"python": sys.version.split()[0], "packages": package_versions()},
            "seeds": {"tokenizer": TOKENIZER_SEED, **{name: seed for name, (seed, _) in MODELS.items()},
                      "graded_noise": GRADED_SEED},
            "corpus": corpus,
            "tokenizer": {"type": "byte-level BPE", "vocab_size": tokenizer.get_vocab_size(),
                          "special_tokens": {tok: tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS},
                          "chat_template": CHAT_TEMPLATE},
            "models": models,
            "graded": grading,
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
