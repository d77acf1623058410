"""Decoding over a static KV cache, its one-token step captured once as a CUDA graph and replayed per token.

Why: at nanoGPT sizes a decode step is a hundred or more small kernels, and the host launching them one by
one is what a user waits for (several ms a step while the GPU works for a fraction of it). A CUDA graph
replays the whole step with one launch. What capture needs, :class:`~llm.kv_cache.StaticKVCache` gives: the
same buffers every step, the step's position read from device memory, no host value in the step.

The capture is PyTorch's own (``torch.cuda.CUDAGraph`` and ``torch.cuda.graph``, after warm-up steps on a
side stream, as its documentation prescribes): the eager step is what is captured, so whatever a RoPE
implementation launches is captured with it. Where capture cannot work (no CUDA device,
``scaling.type=dynamic_ntk``, whose tables follow the length on the host, or an implementation whose
launches refuse capture) the decoder runs the same step eagerly and says why in :attr:`StaticDecoder.note`.
Captured or not, a step computes the same thing with the same kernels: greedy output is the same.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

import rope
from llm.checks import is_positive_int
from llm.model import GPT

#: Eager steps run before capture (on a side stream): lazy initialisations (cuBLAS workspaces, Triton
#: compiles, a RoPE module's cached launch plans) must happen outside the graph.
WARMUP_STEPS = 2


class StaticDecoder:
    """Prefill and decode steps of ``model`` over one :class:`~llm.kv_cache.StaticKVCache` of ``max_len`` positions.

    Build it once and decode many sequences with it (:meth:`prefill`, then :meth:`step` per token): the cache's
    buffers and the captured graph are kept; a batch of another size allocates them anew. ``capture``: capture
    the step on a CUDA device (False: run it eagerly, e.g. to compare); ``attention``: ``"sdpa"`` or
    ``"fused_rope"`` (see :mod:`llm.kv_cache`); ``prefill_chunk``: feed a prompt in chunks of at most this many
    tokens (the first chunk by SDPA over its own keys, the later ones over the cache; with ``"fused_rope"`` the later
    ones at most :data:`rope.ATTENTION_MAX_QUERIES`, what the fused kernel takes), None for all at once.
    """

    def __init__(self, model: GPT, max_len: int, *, capture: bool = True, attention: str = "sdpa",
                 prefill_chunk: int | None = None) -> None:
        if prefill_chunk is not None and not is_positive_int(prefill_chunk):
            raise ValueError(f"prefill_chunk must be a positive int or None, got {prefill_chunk!r}")
        self.model, self.max_len, self.attention, self.prefill_chunk = model, max_len, attention, prefill_chunk
        self.cache = model.new_cache(max_len, static=True, attention=attention)
        self.want_capture = capture
        self.graph: torch.cuda.CUDAGraph | None = None
        self.note: str | None = None  # why the step is not captured, when capture was asked for
        self._tokens: Tensor | None = None  # (B, 1) the step's input, a buffer the graph reads
        self._logits: Tensor | None = None  # (B, padded_vocab) the captured step's output, overwritten by each replay
        self._batch: int | None = None

    @property
    def captured(self) -> bool:
        return self.graph is not None

    @torch.no_grad()  # decoding needs no graph for a backward (and the fused attention has none)
    def prefill(self, prompt: Tensor) -> Tensor:
        """Start new sequences: run the (B, T) prompt through the model into the cache and return the logits
        (B, padded_vocab) of the token after it (:meth:`GPT.next_logits`: slice them to the tokenizer's ``n_vocab``
        before picking, as ``generate(vocab_size=...)`` does). The first call also captures the decode step (its
        cost belongs to the first token's latency, not to the decoding)."""
        B, T = prompt.shape
        if T == 0:  # no token to run: no logits to return (the chunk loop below would run nothing)
            raise ValueError("prompt must hold at least one token, got shape (B, 0)")
        if T > self.max_len:  # a prompt filling the cache still gives the logits of one new token (never fed)
            raise ValueError(f"a prompt of {T} tokens does not fit the decoder's {self.max_len} positions")
        if B != self._batch:
            self.cache = self.model.new_cache(self.max_len, static=True, attention=self.attention)
            self.graph, self._logits, self._batch = None, None, B
            self._tokens = torch.zeros(B, 1, dtype=torch.long, device=prompt.device)
        self.cache.reset()
        chunk, start = self.prefill_chunk or T, 0
        while start < T:
            n = chunk
            if start and self.attention == "fused_rope":
                # a later chunk longer than the fused kernel takes would go to SDPA, which the static cache gives
                # no mask under fused_rope: it would attend to the chunk's later tokens and the empty slots
                n = min(n, rope.ATTENTION_MAX_QUERIES)
            logits = self.model.next_logits(prompt[:, start:start + n], self.cache)
            start += n
        if self.graph is None and self.note is None and self.want_capture and T < self.max_len:
            self._capture(prompt.device)  # (a full cache takes no step: nothing to capture, no room to capture it in)
        return logits

    @torch.no_grad()
    def step(self, token: Tensor) -> Tensor:
        """Feed the (B,) tokens at the next position; the logits (B, padded_vocab) of the token after them (slice
        them to the tokenizer's ``n_vocab`` before picking, as :meth:`prefill`'s). A captured step's logits live in
        the graph's buffer: read them before the next step."""
        if self._tokens is None or self.cache.length == 0:
            raise ValueError("step() before prefill(): start the sequences with prefill(prompt) first")
        if not isinstance(token, Tensor) or token.shape != (self._batch,):
            # copy_ would broadcast a (1,) token to every row, or fail on another shape inside torch
            shape = tuple(token.shape) if isinstance(token, Tensor) else type(token).__name__
            raise ValueError(f"token must be a ({self._batch},) tensor, one per row of the prompt, got {shape}")
        self.cache.check_room(1)
        self._tokens.copy_(token[:, None])
        if self.graph is None:
            return self.model.next_logits(self._tokens, self.cache)
        self.cache.prepare_step()
        self.graph.replay()
        self.cache.advance(1)
        return self._logits

    def _capture(self, device: torch.device) -> None:
        """Capture one decode step (at the cache's current position, which the first real step rewrites)."""
        if device.type != "cuda":  # a CUDA graph is CUDA's: the eager step is the step, and the caller is told
            self.note = f"capture needs a CUDA device; decoding eagerly on {device.type}"
            return
        reason = capture_refusal(self.model)
        if reason:
            self.note = reason
            return
        cache, length = self.cache, self.cache.length
        try:
            with _autocast_without_cache(device):
                side = torch.cuda.Stream(device)
                side.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(side):
                    for _ in range(WARMUP_STEPS):
                        self.model.next_logits(self._tokens, cache)
                        cache.length = length
                torch.cuda.current_stream(device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    logits = self.model.next_logits(self._tokens, cache)
        except RuntimeError as exc:  # an operation that capture refuses: the eager step still works
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self.note = f"decode step not captured ({first[:160]}); decoding eagerly"
            return
        finally:
            cache.length = length
        self.graph, self._logits = graph, logits


def capture_refusal(model: GPT) -> str | None:
    """Why ``model``'s decode step cannot be captured, known before trying (None: try)."""
    scaling = getattr(model.rotary, "scaling", {}) or {}
    if scaling.get("type") == "dynamic_ntk":
        return ("rope.scaling.type=dynamic_ntk rebuilds its tables as the length grows, a host decision each "
                "step: decode step not captured; decoding eagerly")
    return None


def _autocast_without_cache(device: torch.device) -> contextlib.AbstractContextManager:
    """The caller's autocast, without its cache of cast weights: a graph must not read casts that the cache
    frees when the caller's autocast ends (PyTorch's CUDA graph notes). Nothing when autocast is off."""
    if not torch.is_autocast_enabled(device.type):
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.get_autocast_dtype(device.type), cache_enabled=False)


def cast_weights(model: GPT, dtype: torch.dtype) -> GPT:
    """``model``'s parameters cast to ``dtype`` in place (the RoPE tables, buffers, stay float32), as inference
    engines run a model: no per-step casts of the weights, which autocast would launch (or capture) each step."""
    with torch.no_grad():
        for p in model.parameters():
            p.data = p.data.to(dtype)
    return model
