"""``python -m llm.generate``'s work: check the settings, open the run, stream the samples.

Everything a user can get wrong is checked in the order it costs nothing: the settings (sampling,
counts, device), then the run dir (its config and a checkpoint present), then the RoPE override and
the prompt's length against the model's context; only then are the weights loaded. Each problem is
one :class:`~llm.errors.ConfigError` line naming the key.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import torch

import rope
from llm.errors import ConfigError
from llm.generation.decode import generate
from llm.generation.load import load_run_model, open_run, rope_for_generation, run_tokenizer
from llm.generation.sampling import Sampling
from llm.generation.text import TextStream, cut_at, encode_prompt
from llm.model import rope_cache_len
from llm.training.runtime import autocast_context, resolve_device

DTYPES = ("auto", "float32", "bfloat16")


@dataclass(frozen=True)
class Settings:
    """The checked settings of one ``llm.generate`` call (conf/generate.yaml)."""

    prompt: str
    max_new_tokens: int
    sampling: Sampling
    seed: int
    num_samples: int
    use_cache: bool
    device: torch.device
    dtype: str


def _positive_int(cfg: Mapping, key: str) -> int:
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ConfigError(f"{key}={v!r} must be a positive integer")
    return v


def _number(v: object) -> object:
    """Hydra reads ``temperature=1`` as an int: fine; anything else is passed on for the check to name."""
    return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


def read_prompt(cfg: Mapping) -> str:
    """``prompt=`` text, or the contents of ``prompt_file=`` (not both)."""
    prompt, prompt_file = cfg.get("prompt"), cfg.get("prompt_file")
    prompt = "" if prompt is None else str(prompt)
    if prompt_file in (None, ""):
        return prompt
    if prompt:
        raise ConfigError("prompt= and prompt_file= are both set; give one of them")
    path = Path(str(prompt_file))
    if not path.is_file():
        raise ConfigError(f"prompt_file={prompt_file} is not a file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"prompt_file={prompt_file} is not UTF-8 text") from None


def read_settings(cfg: Mapping) -> Settings:
    """Every setting of conf/generate.yaml checked, before the run is opened."""
    sampling = Sampling(_number(cfg.get("temperature", 0.0)), cfg.get("top_k"), _number(cfg.get("top_p")))
    seed = cfg.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed={seed!r} must be an integer")
    use_cache = cfg.get("cache", True)
    if not isinstance(use_cache, bool):
        raise ConfigError(f"cache={use_cache!r} must be true or false")
    dtype = cfg.get("dtype", "auto")
    if dtype not in DTYPES:
        raise ConfigError(f"dtype={dtype!r}; allowed: {', '.join(DTYPES)}")
    return Settings(read_prompt(cfg), _positive_int(cfg, "max_new_tokens"), sampling, seed,
                    _positive_int(cfg, "num_samples"), use_cache, resolve_device(str(cfg.get("device", "auto"))),
                    dtype)


def generate_from_config(cfg: Mapping, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> list[str]:
    """Stream ``num_samples`` continuations of the prompt to ``out`` (notes to ``err``); return them.

    Each sample is the prompt followed by what the model writes, up to ``max_new_tokens``, the
    end-of-text token, or the end of the model's context (the RoPE cache), whichever comes first.
    """
    s = read_settings(cfg)
    opened = open_run(cfg.get("run"), cfg.get("checkpoint"))
    rope_cfg = rope_for_generation(opened.config.rope, cfg.get("rope"), s.device)
    enc = run_tokenizer(opened)
    ids = encode_prompt(enc, s.prompt)
    context = rope_cache_len(opened.config.model, rope_cfg)
    if len(ids) >= context:
        raise ConfigError(f"prompt: {len(ids)} tokens (with the leading end-of-text token) leave no room in the "
                          f"model's context of {context} positions (the run's RoPE cache, rope.max_seq_len); "
                          "shorten the prompt")
    n_new = min(s.max_new_tokens, context - len(ids))
    loaded = load_run_model(opened, rope_cfg, s.device, enc)
    r = loaded.rope
    label = rope.label(r["name"], None if r["name"] == "none" else r.get("variant"), r.get("compute_dtype"))
    err.write(f"{opened.run_dir}: step {loaded.step}, rope={label}, {s.device}, "
              f"{'KV cache' if s.use_cache else 'no cache (prefix recomputed per token)'}, "
              f"context {context} positions\n")
    generator = torch.Generator(device=s.device).manual_seed(s.seed)
    prompt = torch.tensor([ids], device=s.device)
    texts = []
    for i in range(s.num_samples):
        if s.num_samples > 1:
            out.write(f"--- sample {i + 1}/{s.num_samples} ---\n")
        out.write(s.prompt)
        out.flush()
        stream = TextStream(enc)

        def show(token: torch.Tensor, stream: TextStream = stream) -> None:
            t = int(token[0])
            if t != enc.eot_token:
                out.write(stream.push(t))
                out.flush()

        with autocast_context(s.dtype, s.device):
            result = generate(loaded.model, prompt, n_new, s.sampling, generator=generator, use_cache=s.use_cache,
                              stop_token=enc.eot_token, vocab_size=enc.n_vocab, on_token=show)
        out.write(stream.flush() + "\n")
        out.flush()
        tokens, ended = cut_at(result.tokens[0].tolist(), enc.eot_token)
        texts.append(enc.decode(tokens))
        if ended:
            err.write(f"[end of text after {len(tokens)} tokens]\n")
        elif n_new < s.max_new_tokens:
            err.write(f"[stopped after {n_new} tokens: the sequence reached the model's context of {context} "
                      "positions (the run's RoPE cache, rope.max_seq_len)]\n")
    return texts
