"""The decoding loop: prompt in, new tokens out, with or without the KV cache.

With the cache (the default) the prompt runs through the model once and every later step feeds
one position per row: the model stores each layer's rotated keys and values, and RoPE rotates the
new q and k at their absolute positions (``positions=``). Without it every step recomputes the
whole prefix: the reference the cache must reproduce, and the baseline of the speed benchmark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from llm.generation.sampling import Sampling, pick_next
from llm.model import GPT


@dataclass
class Generated:
    """New tokens (B, n) and why decoding stopped: ``"max_new_tokens"`` or ``"stop_token"`` (every row
    produced it). A row that produced the stop token earlier keeps the tokens drawn after it; the
    caller cuts at the first one."""

    tokens: Tensor
    reason: str


@torch.no_grad()
def generate(model: GPT, prompt: Tensor, max_new_tokens: int, sampling: Sampling, *,
             generator: torch.Generator | None = None, use_cache: bool = True, stop_token: int | None = None,
             vocab_size: int | None = None, on_token: Callable[[Tensor], None] | None = None) -> Generated:
    """Continue the (B, T) token ids ``prompt`` by up to ``max_new_tokens`` tokens.

    ``prompt`` plus the new tokens must fit the model's context (:attr:`GPT.context_len`: the RoPE
    cache); the caller shortens ``max_new_tokens`` first and says why. ``vocab_size`` masks the
    padded rows of the head (never a real token). ``on_token`` sees each step's (B,) tokens as they
    come (streaming). The model runs in eval mode and is put back as it was.
    """
    B, T0 = prompt.shape
    if T0 == 0 or max_new_tokens < 0 or T0 + max_new_tokens > model.context_len:
        raise ValueError(f"a prompt of {T0} tokens plus {max_new_tokens} new ones must fit the model's context of "
                         f"{model.context_len} positions (and the prompt must not be empty)")
    was_training = model.training
    model.eval()
    try:
        cache = model.new_cache(T0 + max_new_tokens) if use_cache else None
        out, seq, step_input = [], prompt, prompt
        done = torch.zeros(B, dtype=torch.bool, device=prompt.device)
        for i in range(max_new_tokens):
            logits = model.next_logits(step_input, cache) if use_cache else model.next_logits(seq)
            if vocab_size is not None:
                logits = logits[:, :vocab_size]
            token = pick_next(logits, sampling, generator)
            out.append(token)
            if on_token is not None:
                on_token(token)
            if stop_token is not None:
                done |= token == stop_token
                if bool(done.all()):
                    return Generated(torch.stack(out, dim=1), "stop_token")
            if i + 1 < max_new_tokens:  # the last token is never fed back
                step_input = token[:, None]
                if not use_cache:
                    seq = torch.cat([seq, step_input], dim=1)
        new = torch.stack(out, dim=1) if out else prompt.new_empty((B, 0))
        return Generated(new, "max_new_tokens")
    finally:
        model.train(was_training)
