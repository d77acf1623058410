"""The decoding loop: prompt in, new tokens out, with a static or a dynamic KV cache, or without one.

With a cache the prompt runs through the model once and every later step feeds one position per row:
the model stores each layer's rotated keys and values, and RoPE rotates the new q and k at their
absolute positions (``positions=``). ``cache="static"`` decodes through a
:class:`~llm.generation.static.StaticDecoder` (preallocated buffers, the step captured as a CUDA graph on a
GPU: what makes decoding fast there); ``"dynamic"`` (``True``) through a :class:`~llm.kv_cache.KVCache`,
eagerly; ``"none"`` (``False``) recomputes the whole prefix every step: the reference the caches must
reproduce, and the baseline of the speed benchmark.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from llm.generation.sampling import Sampling, pick_next
from llm.generation.static import StaticDecoder
from llm.kv_cache import ATTENTIONS
from llm.model import GPT

#: The ``cache`` choices of :func:`generate` (True and False are "dynamic" and "none").
CACHES = ("static", "dynamic", "none")


@dataclass
class Generated:
    """New tokens (B, n) and why decoding stopped: ``"max_new_tokens"`` or ``"stop_token"`` (every row
    produced it). A row that produced the stop token earlier keeps the tokens drawn after it; the
    caller cuts at the first one. With ``timed``: the seconds to the first new token (the prompt, and a
    capture of the decode step if one is made) and those of the steps after it."""

    tokens: Tensor
    reason: str
    first_token_s: float | None = None
    decode_s: float | None = None

    @property
    def decode_tokens_per_s(self) -> float | None:
        """New tokens of every row per second after the first one (None when untimed or nothing after it)."""
        steps = self.tokens.shape[1] - 1
        if self.decode_s is None or steps <= 0 or self.decode_s <= 0:
            return None
        return self.tokens.shape[0] * steps / self.decode_s


def fed_positions(prompt_len: int, max_new_tokens: int) -> int:
    """The positions a decoding runs the model at: the prompt's and every new token's but the last (the loop stops
    once it is drawn), which is what a cache must hold and the context must fit."""
    return prompt_len + max(max_new_tokens - 1, 0)


def new_tokens_room(prompt_len: int, context: int) -> int:
    """How many new tokens a prompt of ``prompt_len`` leaves room for in ``context`` positions: the most
    :func:`fed_positions` allows (the last new token is never fed, so a prompt filling the context gets one)."""
    return context - prompt_len + 1


def cache_kind(cache: bool | str) -> str:
    """``cache`` as one of :data:`CACHES` (True: ``"dynamic"``, False: ``"none"``)."""
    kind = {True: "dynamic", False: "none"}.get(cache, cache) if isinstance(cache, bool) else cache
    if kind not in CACHES:
        raise ValueError(f"cache must be one of {', '.join(CACHES)} (or True / False), got {cache!r}")
    return kind


@torch.no_grad()
def generate(model: GPT, prompt: Tensor, max_new_tokens: int, sampling: Sampling, *,
             generator: torch.Generator | None = None, use_cache: bool | str = True, stop_token: int | None = None,
             vocab_size: int | None = None, on_token: Callable[[Tensor], None] | None = None,
             decoder: StaticDecoder | None = None, attention: str = "sdpa", timed: bool = False,
             never: Sequence[int] = ()) -> Generated:
    """Continue the (B, T) token ids ``prompt`` by up to ``max_new_tokens`` tokens.

    The positions fed must fit the model's context (:attr:`GPT.context_len`: the RoPE cache): the prompt and every
    new token but the last, which is only predicted, never fed back (:func:`fed_positions`); so a prompt filling
    the context still gets one new token. The caller shortens ``max_new_tokens`` first and says why.
    ``use_cache``: ``"static"``, ``"dynamic"`` (``True``) or ``"none"`` (``False``), see the module docstring;
    ``decoder``: a :class:`StaticDecoder` to decode with (reused across calls: its cache and captured step are
    kept), else one is built for ``"static"``; ``attention`` (``"sdpa"`` / ``"fused_rope"``): how the caches built here
    attend. ``vocab_size`` masks the padded rows of the head (never a real token), ``never`` the ids below it that
    are no token to write (:func:`llm.generation.text.never_written`). ``on_token`` sees each
    step's (B,) tokens as they come (streaming). ``timed`` synchronises the device after the first token
    and at the end, to time them (:class:`Generated`). The model runs in eval mode and is put back as it was.
    """
    B, T0 = prompt.shape
    if T0 == 0 or max_new_tokens < 0 or fed_positions(T0, max_new_tokens) > model.context_len:
        raise ValueError(f"a prompt of {T0} tokens plus {max_new_tokens} new ones must fit the model's context of "
                         f"{model.context_len} positions (and the prompt must not be empty)")
    kind = "static" if decoder is not None else cache_kind(use_cache)
    if attention not in ATTENTIONS:  # checked here as well: without a cache nothing else would read it
        raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")
    was_training = model.training
    model.eval()
    try:
        sync = torch.cuda.synchronize if timed and prompt.device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        first, step = _steps(model, prompt, max_new_tokens, kind, decoder, attention)
        banned = torch.tensor(sorted(set(never)), dtype=torch.long, device=prompt.device) if never else None
        logits = first()
        out, t1 = [], None
        done = torch.zeros(B, dtype=torch.bool, device=prompt.device)
        reason = "max_new_tokens"
        for i in range(max_new_tokens):
            if vocab_size is not None:
                logits = logits[:, :vocab_size]
            if banned is not None:  # a copy: a captured step's logits buffer stays the graph's
                logits = logits.index_fill(-1, banned, -math.inf)
            token = pick_next(logits, sampling, generator)
            out.append(token)
            if timed and i == 0:
                sync()
                t1 = time.perf_counter()
            if on_token is not None:
                on_token(token)
            if stop_token is not None:
                done |= token == stop_token
                if bool(done.all()):
                    reason = "stop_token"
                    break
            if i + 1 < max_new_tokens:  # the last token is never fed back
                logits = step(token)
        sync()
        t2 = time.perf_counter()
        new = torch.stack(out, dim=1) if out else prompt.new_empty((B, 0))
        if not timed:
            return Generated(new, reason)
        return Generated(new, reason, (t1 or t2) - t0, t2 - (t1 or t2))
    finally:
        model.train(was_training)


def _steps(model: GPT, prompt: Tensor, max_new_tokens: int, kind: str, decoder: StaticDecoder | None,
           attention: str) -> tuple[Callable[[], Tensor], Callable[[Tensor], Tensor]]:
    """(the prompt's next-token logits, one step's from the (B,) tokens fed) for a cache kind."""
    B, T0 = prompt.shape
    fed = fed_positions(T0, max_new_tokens)  # the caches hold these: the last new token is never fed
    if kind == "static":
        if decoder is None:
            decoder = StaticDecoder(model, fed, attention=attention)
        elif decoder.model is not model:
            raise ValueError("decoder was built for another model")
        elif fed > decoder.max_len:
            raise ValueError(f"a prompt of {T0} tokens plus {max_new_tokens} new ones do not fit the decoder's "
                             f"{decoder.max_len} positions (the last new token is not fed)")
        return lambda: decoder.prefill(prompt), decoder.step
    if kind == "dynamic":
        cache = model.new_cache(fed, attention=attention)
        return lambda: model.next_logits(prompt, cache), lambda token: model.next_logits(token[:, None], cache)
    seq = [prompt]

    def recompute(token: Tensor) -> Tensor:
        seq[0] = torch.cat([seq[0], token[:, None]], dim=1)
        return model.next_logits(seq[0])

    return lambda: model.next_logits(prompt), recompute
