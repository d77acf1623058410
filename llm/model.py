"""A GPT with a pluggable rotary position embedding.

The attention layer gets its RoPE from ``rope.build`` (the registry) and knows nothing else about
it, so every registered kernel trains the very same model. For generation the model also runs
incrementally: given a :class:`~llm.kv_cache.KVCache` or :class:`~llm.kv_cache.StaticKVCache`, each call
feeds only the new tokens, rotated at their absolute positions through RoPE's ``positions=``, and attends
to the cached keys and values (by SDPA, or, with the cache's ``attention="fused_rope"``, by
``rope.attention_with_rope``, which rotates the queries inside the attention kernel). Without a cache
(training, evaluation) the forward is exactly the full-sequence one.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import rope as rope_registry
from llm.checks import positive_int
from llm.config_schema import REFUSED_KEYS
from llm.doc_attention import DocumentMask, document_attention
from llm.kv_cache import KVCache, LayerKV, StaticKVCache, StaticLayerKV

# cl100k_base's size: the memory check's stand-in before the tokenizer is loaded
_PLACEHOLDER_VOCAB = 100277


@dataclass
class GPTConfig:
    vocab_size: int
    seq_len: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int | None = None  # None: same as n_head; fewer: grouped-query attention
    n_embd: int = 128
    d_ff: int | None = None  # None: 4 * n_embd
    mlp: str = "gelu"  # gelu | silu (plain MLP with that activation)
    dropout: float = 0.0
    bias: bool = False
    tie_embeddings: bool = True
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(n_embd)
    norm_eps: float = 1e-6
    vocab_multiple: int = 128

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def padded_vocab(self) -> int:
        m = self.vocab_multiple
        return (self.vocab_size + m - 1) // m * m

    def validate(self) -> None:
        """Refuse shapes the model cannot build, naming the config keys (positivity first: no division by 0)."""
        for key in ("seq_len", "n_layer", "n_head", "n_embd", "vocab_size"):
            positive_int(getattr(self, key), f"model.{key}", error=ValueError)
        # vocab_multiple divides the vocabulary's padding: 0 divides by zero, a negative one pads below vocab_size
        positive_int(self.vocab_multiple, "model.vocab_multiple", error=ValueError)
        for key in ("n_kv_head", "d_ff"):
            positive_int(getattr(self, key), f"model.{key}", allow_none=True, error=ValueError)
        for key in ("bias", "tie_embeddings", "scale_embeddings"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"model.{key}={getattr(self, key)!r} must be true or false")
        if self.n_embd % self.n_head:
            raise ValueError(f"model.n_embd={self.n_embd} must be divisible by model.n_head={self.n_head}")
        kv = self.n_kv_head or self.n_head
        if self.n_head % kv:
            raise ValueError(f"model.n_head={self.n_head} must be divisible by model.n_kv_head={kv}")
        if self.mlp not in ("gelu", "silu"):
            raise ValueError(f"model.mlp must be one of gelu, silu; got {self.mlp!r}")
        if not (isinstance(self.dropout, (int, float)) and 0 <= self.dropout < 1):
            raise ValueError(f"model.dropout={self.dropout!r} must be in [0, 1)")
        # RMSNorm adds eps under a square root: a negative or non-finite one turns activations into NaN
        eps = self.norm_eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < math.inf:
            raise ValueError(f"model.norm_eps={eps!r} must be a finite number >= 0")

    def param_count(self) -> int:
        """Parameter count without building the model (a tied head counts once), for the memory check."""
        d, L, kv, d_ff = self.n_embd, self.n_layer, self.n_kv_head or self.n_head, self.d_ff or 4 * self.n_embd
        attn = d * (self.n_head + 2 * kv) * self.head_dim + d * d
        mlp = 2 * d * d_ff
        if self.bias:  # qkv, attention out, MLP in and out
            attn += (self.n_head + 2 * kv) * self.head_dim + d
            mlp += d_ff + d
        embed = self.padded_vocab * d * (1 if self.tie_embeddings else 2)
        return embed + L * (attn + mlp + 2 * d) + d

    def training_memory_bytes(self, batch_size: int, dense_attention: bool) -> int:
        """A lower bound of what one training step allocates (float32 weights, AdamW state, logits and
        their gradient, the activations kept for backward, and the T x T scores when attention is
        not a fused kernel). Used to refuse a config that cannot fit before any work is done."""
        B, T, d, L = batch_size, self.seq_len, self.n_embd, self.n_layer
        weights = 16 * self.param_count()  # weight, grad, two AdamW moments (float32)
        logits = 8 * B * T * self.padded_vocab  # float32 logits and their gradient
        activations = 4 * L * B * T * (10 * d + 2 * (self.d_ff or 4 * d))
        scores = 8 * L * B * self.n_head * T * T if dense_attention else 0
        return weights + logits + activations + scores


def _refuse_vocab_size(model_cfg: Mapping) -> None:
    # vocab_size is the tokenizer's, never the model group's: given there it would be passed to GPTConfig twice
    if "vocab_size" in model_cfg:
        raise ValueError(REFUSED_KEYS["model.vocab_size"])


def check_model_config(model_cfg: Mapping) -> GPTConfig:
    """Validate a ``model`` config group before any work (vocab not yet known: a placeholder is used)."""
    fields = GPTConfig.__dataclass_fields__
    _refuse_vocab_size(model_cfg)
    unknown = sorted(k for k in model_cfg if k not in fields and k != "name")
    if unknown:
        raise ValueError(f"model.{unknown[0]} is not a model setting; allowed: "
                         f"{', '.join(k for k in fields if k != 'vocab_size')}")
    cfg = GPTConfig(vocab_size=_PLACEHOLDER_VOCAB, **{k: v for k, v in model_cfg.items() if k != "name"})
    cfg.validate()
    return cfg


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, rotary: nn.Module) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.n_kv_head = cfg.n_kv_head or cfg.n_head
        self.head_dim = cfg.head_dim
        self.qkv = nn.Linear(cfg.n_embd, (self.n_head + 2 * self.n_kv_head) * self.head_dim, bias=cfg.bias)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.rotary = rotary
        self.dropout = cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, kv: LayerKV | StaticLayerKV | None = None, positions: Tensor | None = None,
                doc_mask: DocumentMask | None = None) -> Tensor:
        """Causal self-attention of ``x`` (B, T, C); with ``kv``, ``x`` holds only the new tokens (at
        absolute ``positions``) and attends to the cached ones too; with ``doc_mask`` (document-aligned
        windows, ``positions`` restarting at each document), each token attends only inside its document."""
        B, T, C = x.shape
        qkv = self.qkv(x)
        if kv is not None and kv.fused(T):
            y = self._attend_fused(qkv, kv, positions)
        else:
            # q, k, v are strided views of the fused projection (kernels take them without copies); the
            # RoPE module splits them so that an implementation can also write d qkv in one pass.
            q, k, v = self.rotary.rotate_qkv(qkv, self.n_head, self.n_kv_head, positions=positions)
            if doc_mask is not None:
                y = document_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), doc_mask,
                                       self.dropout if self.training else 0.0, self.n_kv_head != self.n_head)
            elif kv is None:
                y = self._attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, True)
            else:
                keys, values, mask, causal = kv.update(k, v, positions)
                y = self._attend(q.transpose(1, 2), keys, values, mask, causal)
            y = y.transpose(1, 2)
        return self.resid_drop(self.proj(y.reshape(B, T, C)))

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, dropout_p=self.dropout if self.training else 0.0,
            enable_gqa=self.n_kv_head != self.n_head,
        )

    def _attend_fused(self, qkv: Tensor, kv: LayerKV | StaticLayerKV, positions: Tensor) -> Tensor:
        """A cached step through ``rope.attention_with_rope`` (the cache's ``attention="fused_rope"``): the new
        keys rotated once by the RoPE module into the cache, the queries left as projected and rotated by the
        attention kernel as it loads them. Returns (B, T, n_head, head_dim)."""
        B, T, _ = qkv.shape
        H, H_kv, D = self.n_head, self.n_kv_head, self.head_dim
        q, k, v = qkv.split([H * D, H_kv * D, H_kv * D], dim=-1)
        k = self.rotary(k.view(B, T, H_kv, D), positions=positions)
        keys, values = kv.write(k, v.view(B, T, H_kv, D), positions)
        return rope_registry.attention_with_rope(q.view(B, T, H, D), keys, values, kv.rope_positions(positions),
                                                 self.rotary)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        d_ff = cfg.d_ff or 4 * cfg.n_embd
        self.fc = nn.Linear(cfg.n_embd, d_ff, bias=cfg.bias)
        self.proj = nn.Linear(d_ff, cfg.n_embd, bias=cfg.bias)
        self.act = nn.GELU(approximate="tanh") if cfg.mlp == "gelu" else nn.SiLU()
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, rotary: nn.Module) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(cfg.n_embd, eps=cfg.norm_eps)
        self.attn = CausalSelfAttention(cfg, rotary)
        self.norm2 = nn.RMSNorm(cfg.n_embd, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor, kv: LayerKV | StaticLayerKV | None = None,
                positions: Tensor | None = None, doc_mask: DocumentMask | None = None) -> Tensor:
        x = x + self.attn(self.norm1(x), kv, positions, doc_mask)
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """Decoder-only transformer; ``rotary`` is any module from the RoPE registry."""

    def __init__(self, cfg: GPTConfig, rotary: nn.Module) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.rotary = rotary  # one module (one cos/sin cache) shared by every layer
        self.embed = nn.Embedding(cfg.padded_vocab, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, rotary) for _ in range(cfg.n_layer))
        self.norm = nn.RMSNorm(cfg.n_embd, eps=cfg.norm_eps)
        self.head = nn.Linear(cfg.n_embd, cfg.padded_vocab, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight
            self.register_load_state_dict_pre_hook(_refuse_untied_state)
            self.register_load_state_dict_post_hook(_retie_head)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):  # GPT-2 scaled init of residual projections
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        """Unique parameters (a tied head counts once)."""
        return sum(p.numel() for p in self.parameters())

    @property
    def context_len(self) -> int:
        """The most positions the model can attend over: the rows of its RoPE cos/sin cache
        (``rope.max_seq_len``, by default ``model.seq_len``)."""
        return self.rotary.max_seq_len

    def new_cache(self, max_len: int | None = None, *, static: bool = False,
                  attention: str = "sdpa") -> KVCache | StaticKVCache:
        """An empty KV cache for up to ``max_len`` positions (default and limit: :attr:`context_len`):
        :class:`~llm.kv_cache.StaticKVCache` with ``static`` (what a captured decode step needs), else
        :class:`~llm.kv_cache.KVCache`; ``attention`` (``"sdpa"`` / ``"fused_rope"``) is how cached steps attend."""
        max_len = self.context_len if max_len is None else max_len
        if max_len > self.context_len:
            raise ValueError(f"a KV cache of {max_len} positions exceeds the model's context of {self.context_len} "
                             "(the RoPE cache, rope.max_seq_len)")
        if attention == "fused_rope" and self.cfg.head_dim > rope_registry.ATTENTION_MAX_HEAD_DIM:
            raise ValueError(f"attention=fused_rope: heads of {self.cfg.head_dim}; the fused kernel takes heads up to "
                             f"{rope_registry.ATTENTION_MAX_HEAD_DIM}, as flash-attention kernels do; attention=sdpa "
                             "takes any")
        return (StaticKVCache if static else KVCache)(self.cfg.n_layer, max_len, attention)

    def hidden(self, idx: Tensor, cache: KVCache | StaticKVCache | None = None, *, positions: Tensor | None = None,
               doc_mask: DocumentMask | None = None) -> Tensor:
        """The final normed hidden states (B, T, n_embd) of ``idx``; with ``cache``, ``idx`` holds the
        tokens after the cached ones, which the cache then includes. ``positions`` and ``doc_mask`` lay a
        whole window out by document (``data.packing=documents``, :mod:`llm.data.packing`): each token is
        rotated at its position in its document and attends only inside it."""
        T = idx.shape[1]
        if cache is None:
            if T > self.context_len:
                raise ValueError(f"sequence length {T} > the model's context of {self.context_len} positions "
                                 "(the RoPE cache: rope.max_seq_len, default model.seq_len)")
            if doc_mask is not None and tuple(doc_mask.doc_ids.shape) != tuple(idx.shape):
                # a mask of other rows would broadcast (one row's documents imposed on every row) or fail inside SDPA
                raise ValueError(f"doc_mask.doc_ids has shape {tuple(doc_mask.doc_ids.shape)}; the tokens' is "
                                 f"{tuple(idx.shape)}: a document mask must be built from the same (B, T) window")
        elif positions is not None or doc_mask is not None:
            raise ValueError("positions and doc_mask are for whole windows, not for decoding with a KV cache")
        else:
            cache.check_room(T)
        # A fused_rope cache's step that needs what only SDPA gives (gradients: rope.attention_with_rope has no
        # backward; attention dropout: the kernel has none) runs with the cache switched to sdpa for the step, as the
        # cache's fused(T) decides both a layer's path and how a static cache lays the step out.
        as_sdpa = cache is not None and cache.attention == "fused_rope" and self._step_needs_sdpa(cache)
        if as_sdpa:
            cache.attention = "sdpa"
        try:
            if cache is not None:
                positions = cache.positions(T, idx.device)
            x = self.embed(idx)
            if self.cfg.scale_embeddings:
                x = x * math.sqrt(self.cfg.n_embd)
            x = self.drop(x)
            for i, block in enumerate(self.blocks):
                x = block(x, None if cache is None else cache.layer(i), positions, doc_mask)
        finally:
            if as_sdpa:
                cache.attention = "fused_rope"
        if cache is not None:
            cache.advance(T)
        return self.norm(x)

    def _step_needs_sdpa(self, cache: KVCache | StaticKVCache) -> bool:
        """Whether a cached step must attend by SDPA: attention dropout is on, or autograd records the step (grad
        mode on and a parameter that takes gradients, or a cache an earlier recorded step wrote into: its buffers
        are then part of that graph, whatever the parameters ask now)."""
        if self.training and self.cfg.dropout > 0:
            return True
        return torch.is_grad_enabled() and (any(p.requires_grad for p in self.parameters())
                                            or bool(cache.keys is not None and cache.keys.requires_grad))

    def forward(self, idx: Tensor, targets: Tensor | None = None, *, cache: KVCache | StaticKVCache | None = None,
                positions: Tensor | None = None, doc_mask: DocumentMask | None = None) -> tuple[Tensor, Tensor | None]:
        """Logits (B, T, padded_vocab) and, with targets, the mean cross-entropy. With ``cache``:
        logits of the new tokens ``idx``, which are appended to the cache. ``positions`` and ``doc_mask``: see
        :meth:`hidden`."""
        logits = self.head(self.hidden(idx, cache, positions=positions, doc_mask=doc_mask))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def next_logits(self, idx: Tensor, cache: KVCache | StaticKVCache | None = None) -> Tensor:
        """Logits (B, padded_vocab) of the token after ``idx``: the head runs on the last position only
        (what decoding needs; the full head over a long prefix would dominate a step). The rows past the tokenizer's
        vocabulary (``model.vocab_multiple``'s padding) are untrained and may score highest: slice the logits to the
        tokenizer's ``n_vocab`` before picking, as ``generate(vocab_size=...)`` does."""
        return self.head(self.hidden(idx, cache)[:, -1])

    def flops_per_token(self) -> float:
        """PaLM estimate of training FLOPs per token: 6N + 12·L·d·T (attention scores), N the parameters that take
        part in a matrix product: an untied input embedding is a lookup and costs none (tied, it is the head's)."""
        c = self.cfg
        n = self.num_params() - (0 if c.tie_embeddings else self.embed.weight.numel())
        return 6 * n + 12 * c.n_layer * c.n_embd * c.seq_len


def _refuse_untied_state(model: GPT, state_dict: Mapping[str, Tensor], prefix: str, *args: object) -> None:
    """Refuse, in one line, a state whose head differs from its embedding when ``model`` ties them (a
    ``tie_embeddings=false`` model's weights): loading both into the one shared tensor would keep the head's and
    silently lose the embedding."""
    embed, head = state_dict.get(prefix + "embed.weight"), state_dict.get(prefix + "head.weight")
    if embed is None or head is None or embed.shape != head.shape or embed.is_meta or head.is_meta:
        return  # a missing key or a size mismatch: load_state_dict's own error names it
    shared = embed.device == head.device and embed.data_ptr() == head.data_ptr() and embed.stride() == head.stride()
    if not shared and not torch.equal(embed, head.to(embed.device)):
        raise RuntimeError(f"{prefix}head.weight differs from {prefix}embed.weight, but this model ties them "
                           "(model.tie_embeddings=true): these are a model.tie_embeddings=false model's weights")


def _retie_head(model: GPT, incompatible_keys: object) -> None:
    """Tie the head to the embedding again after ``load_state_dict(..., assign=True)``, which assigns each key its
    own tensor: the model would otherwise go on as an untied one (two tensors trained apart)."""
    if model.head.weight is not model.embed.weight:
        model.head.weight = model.embed.weight


def rope_cache_len(model_cfg: Mapping, rope_cfg: Mapping) -> int:
    """Rows of the RoPE cos/sin cache: ``rope.max_seq_len`` when set (e.g. longer than training), else
    ``model.seq_len``."""
    return rope_cfg.get("max_seq_len") or model_cfg["seq_len"]


def compile_options(model: GPT) -> dict:
    """The Inductor options ``model`` should be compiled with: its RoPE module's
    (``RotaryEmbedding.inductor_options``), less the keys this torch's Inductor does not have."""
    from torch._inductor import config as inductor_config

    return {k: v for k, v in model.rotary.inductor_options.items() if hasattr(inductor_config, k)}


def export_to_compile_workers(options: Mapping[str, object]) -> bool:
    """Make Inductor ``options`` visible to its compile workers, as ``TORCHINDUCTOR_<NAME>`` environment
    variables; a pool of workers already started without them is shut down, so that the next compile
    starts one that reads them. Returns whether anything changed.

    Why: Inductor compiles Triton kernels in worker processes and decides there whether a kernel gets
    its static launcher. Of ``torch.compile``'s options the workers see only ``use_static_triton_launcher``
    (torch 2.11 to 2.13, ``async_compile.py``); ``static_launch_user_defined_triton_kernels`` they read
    from the environment when they start. Importing ``rope`` on a CUDA build already sets that variable
    (``rope.triton.ops.static_launch_by_default``) unless the environment sets it; this function matters when
    the environment says otherwise than the RoPE module's options, or when a pool of compile workers was
    started before: without it the Triton entries' kernels would go through Triton's Python launcher whenever
    that pool compiles them, the host time the option exists to save.
    """
    changed = False
    for key, value in options.items():
        name, text = f"TORCHINDUCTOR_{key.upper()}", str(int(value) if isinstance(value, bool) else value)
        if os.environ.get(name) != text:
            os.environ[name] = text
            changed = True
    if changed:
        from torch._inductor import async_compile

        async_compile.shutdown_compile_workers()
    return changed


def compile_model(model: GPT, mode: str | None = None, **kwargs: object) -> nn.Module:
    """``torch.compile(model, **kwargs)`` with the options its RoPE module asks for (the trainer and
    the step benchmarks compile through here, so both measure the same compiled model), exported to
    Inductor's compile workers too (:func:`export_to_compile_workers`). ``mode`` (e.g.
    ``"reduce-overhead"``) excludes options in ``torch.compile``; with a mode they are left out."""
    if mode:
        return torch.compile(model, mode=mode, **kwargs)
    options = compile_options(model)
    export_to_compile_workers(options)
    return torch.compile(model, options=options or None, **kwargs)


def build_model(model_cfg: Mapping, rope_cfg: Mapping, vocab_size: int) -> GPT:
    """Build the GPT of a ``model`` config group with the RoPE of a ``rope`` config group."""
    _refuse_vocab_size(model_cfg)
    fields = GPTConfig.__dataclass_fields__
    kwargs = {k: v for k, v in dict(model_cfg).items() if k in fields}
    cfg = GPTConfig(vocab_size=vocab_size, **kwargs)
    cfg.validate()
    rope_opts = {k: v for k, v in dict(rope_cfg).items() if k not in ("name", "max_seq_len")}
    rotary = rope_registry.build(rope_cfg["name"], head_dim=cfg.head_dim,
                                 max_seq_len=rope_cache_len(model_cfg, rope_cfg), **rope_opts)
    return GPT(cfg, rotary)
