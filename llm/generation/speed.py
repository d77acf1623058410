"""How fast a model decodes: the first token's latency and the tokens per second after it, per decoding mode.

What the generation benchmark measures (it stays a thin command line over :func:`decode_speed_table`):

* ``mode``: ``captured`` (static cache, the decode step captured as a CUDA graph), ``eager`` (the same static
  cache and step, not captured), ``dynamic`` (the eager dynamic cache), ``none`` (no cache: the whole prefix
  recomputed per token);
* ``attention``: ``sdpa`` (RoPE on q and k, then SDPA) or ``fused_rope`` (``rope.attention_with_rope``) for the
  cached steps;
* the first token's latency: the prompt, plus the capture of the decode step where one is made (a fresh
  decoder per run: what a new ``llm.generate`` command pays); the decode rate: new tokens of every row per
  second after the first, the device synchronised only at the first token and at the end.

Each point runs once untimed (Triton compiles, cuBLAS set-up) and then ``repeats`` times; the medians are
reported. Greedy decoding of random prompts: the weights and the tokens do not change the time.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import torch

from llm.generation.decode import fed_positions, generate
from llm.generation.sampling import GREEDY
from llm.generation.static import StaticDecoder
from llm.model import GPT

MODES = ("captured", "eager", "dynamic", "none")


@dataclass
class DecodeSpeed:
    """One measured point (times are medians over the repeats)."""

    mode: str
    attention: str
    batch: int
    prompt_len: int
    new_tokens: int
    first_token_ms: float | None = None
    decode_tok_s: float | None = None
    step_ms: float | None = None
    captured: bool = False
    note: str | None = None  # why the step was not captured, or why the point was not measured

    def row(self) -> dict:
        return asdict(self)


def decode_speed(model: GPT, *, batch: int, prompt_len: int, new_tokens: int, mode: str = "captured",
                 attention: str = "sdpa", repeats: int = 3, seed: int = 0) -> DecodeSpeed:
    """Greedy decoding of ``new_tokens`` after random ``prompt_len``-token prompts, ``batch`` rows, timed."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if new_tokens < 2 or repeats < 1:
        raise ValueError(f"new_tokens={new_tokens} must be >= 2 (a first token, then decoding) and repeats={repeats} "
                         ">= 1")
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, model.cfg.vocab_size, (batch, prompt_len), generator=gen).to(device)
    point = DecodeSpeed(mode, attention, batch, prompt_len, new_tokens)
    firsts, rates = [], []
    for run in range(repeats + 1):
        decoder = None
        if mode in ("captured", "eager"):
            decoder = StaticDecoder(model, fed_positions(prompt_len, new_tokens), capture=mode == "captured",
                                    attention=attention)
        cache = "none" if mode == "none" else "dynamic"
        result = generate(model, prompt, new_tokens, GREEDY, use_cache=cache, decoder=decoder, attention=attention,
                          vocab_size=model.cfg.vocab_size, timed=True)
        if decoder is not None:
            point.captured, point.note = decoder.captured, decoder.note
        del decoder
        if run:  # the first run compiles and sets up: untimed
            firsts.append(result.first_token_s)
            rates.append(result.decode_tokens_per_s)
    point.first_token_ms = 1e3 * statistics.median(firsts)
    point.decode_tok_s = statistics.median(rates)
    point.step_ms = 1e3 * batch / point.decode_tok_s
    return point


def decode_speed_table(model: GPT, *, batches: Iterable[int], prompt_lens: Iterable[int], new_tokens: int,
                       modes: Iterable[str] = MODES, attentions: Iterable[str] = ("sdpa",), repeats: int = 3,
                       new_tokens_without_cache: int | None = None,
                       on_point: Callable[[DecodeSpeed], None] | None = None) -> list[DecodeSpeed]:
    """:func:`decode_speed` at every (batch, prompt length, mode, attention); ``none`` (no cache) takes
    ``new_tokens_without_cache`` tokens where given (recomputing a long prefix per token is slow) and SDPA
    only (there is no cache to attend). A point that does not fit the device's memory is kept with a note.
    ``on_point`` sees each point as it is measured (progress)."""
    points = []
    for batch in batches:
        for prompt_len in prompt_lens:
            for mode in modes:
                for attention in (("sdpa",) if mode == "none" else attentions):
                    n = new_tokens_without_cache if mode == "none" and new_tokens_without_cache else new_tokens
                    try:
                        point = decode_speed(model, batch=batch, prompt_len=prompt_len, new_tokens=n, mode=mode,
                                             attention=attention, repeats=repeats)
                    except torch.OutOfMemoryError:
                        point = DecodeSpeed(mode, attention, batch, prompt_len, n, note="out of memory")
                    if torch.cuda.is_available():
                        torch.cuda.empty_cache()
                    points.append(point)
                    if on_point is not None:
                        on_point(point)
    return points
