"""Cached decoding on a CUDA GPU, for every registered RoPE implementation: float32 within 1e-4 of
the full forward, and under bfloat16 autocast no further from the float32 reference than the full
bf16 forward is (the cache adds no error of its own). Marked ``gpu`` (skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch

import rope
from llm.generation import GREEDY, generate
from llm.model import GPT, GPTConfig

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
IMPLS = [n for n in rope.available() if rope.get(n).unavailable_reason(CUDA) is None]


@pytest.fixture(autouse=True)
def no_tf32():
    """float32 means float32 here (a training test in this process may have turned TF32 on)."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


def gpu_model(impl: str) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=1000, seq_len=256, n_layer=4, n_head=8, n_kv_head=4, n_embd=256)
    model = GPT(cfg, rope.build(impl, cfg.head_dim, cfg.seq_len)).to(CUDA).eval()
    with torch.no_grad():  # sharp attention: positions matter
        for block in model.blocks:
            block.attn.qkv.weight.mul_(4)
    return model


def incremental(model: GPT, idx: torch.Tensor, prompt: int) -> torch.Tensor:
    """Logits of ``idx`` fed as a prompt of ``prompt`` tokens, a chunk of 7, then one token at a time."""
    cache = model.new_cache()
    out = [model(idx[:, :prompt], cache=cache)[0], model(idx[:, prompt:prompt + 7], cache=cache)[0]]
    out += [model(idx[:, t:t + 1], cache=cache)[0] for t in range(prompt + 7, idx.shape[1])]
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("impl", IMPLS)
def test_cached_decoding_equals_the_full_forward_on_the_gpu(impl):
    model = gpu_model(impl)
    idx = torch.randint(0, 1000, (4, 200), device=CUDA)
    with torch.no_grad():
        full32, _ = model(idx)
        torch.testing.assert_close(incremental(model, idx, 150), full32, rtol=0, atol=1e-4)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            full16 = model(idx)[0].float()
            cached16 = incremental(model, idx, 150).float()
    err_full = (full16 - full32).abs().max().item()
    err_cached = (cached16 - full32).abs().max().item()
    assert err_full > 0, "bf16 autocast did not round anything"
    assert err_cached <= 2 * err_full + 1e-3, (impl, err_cached, err_full)


@pytest.mark.parametrize("impl", IMPLS)
def test_greedy_decoding_with_and_without_the_cache_agree_on_the_gpu(impl):
    model = gpu_model(impl)
    prompt = torch.randint(0, 1000, (3, 20), device=CUDA)
    a = generate(model, prompt, 40, GREEDY, use_cache=True, vocab_size=1000)
    b = generate(model, prompt, 40, GREEDY, use_cache=False, vocab_size=1000)
    assert torch.equal(a.tokens, b.tokens)
