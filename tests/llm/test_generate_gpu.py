"""Cached decoding on a CUDA GPU, for every registered RoPE implementation: float32 within 1e-4 of
the full forward, and under bfloat16 autocast no further from the float32 reference than the full
bf16 forward is (the cache adds no error of its own). The static cache's decode step captured as a CUDA
graph gives the same greedy output as the same step run eagerly (bf16 weights, both attentions), and as
no cache at all in float32; the implementations that cannot be captured say why and decode eagerly.
Marked ``gpu`` (skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch

import rope
from llm.generation import GREEDY, StaticDecoder, generate
from llm.generation.speed import decode_speed
from llm.generation.static import cast_weights
from llm.model import GPT, GPTConfig

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]
CUDA = torch.device("cuda")
IMPLS = [n for n in rope.available() if rope.get(n).unavailable_reason(CUDA) is None]


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


#: Implementations whose launches a CUDA graph captures: the step must be captured, not fall back.
CAPTURABLE = ("none", "torch", "triton_v4", "triton_v2")


@pytest.mark.parametrize("attention", ["sdpa", "fused_rope"])
@pytest.mark.parametrize("impl", IMPLS)
def test_the_captured_decode_step_gives_the_eager_step_s_greedy_output(impl, attention):
    """bf16 weights, as llm.generate decodes on a GPU: the step captured once and replayed per token decodes the
    very tokens the same step run eagerly does, sequence after sequence (the decoder reused)."""
    if attention == "fused_rope" and impl not in ("torch", "triton_v4"):
        pytest.skip("the fused attention reads the tables every implementation shares: two implementations suffice")
    model = cast_weights(gpu_model(impl), torch.bfloat16)
    captured = StaticDecoder(model, 20 + 40, attention=attention)
    eager = StaticDecoder(model, 20 + 40, attention=attention, capture=False)
    for seed in (0, 1):
        prompt = torch.randint(0, 1000, (3, 20), device=CUDA, generator=torch.Generator(CUDA).manual_seed(seed))
        a = generate(model, prompt, 40, GREEDY, decoder=captured, vocab_size=1000)
        b = generate(model, prompt, 40, GREEDY, decoder=eager, vocab_size=1000)
        assert torch.equal(a.tokens, b.tokens), (impl, attention, seed)
    assert not eager.captured
    if impl in CAPTURABLE:
        assert captured.captured and captured.note is None, captured.note
    else:  # captured, or decoded eagerly saying why in one line
        assert captured.captured or (captured.note and "\n" not in captured.note)
        print(f"{impl}: {'captured' if captured.captured else captured.note}")


@pytest.mark.parametrize("attention", ["sdpa", "fused_rope"])
def test_captured_float32_decoding_matches_decoding_without_a_cache(attention):
    model = gpu_model("triton_v4")
    prompt = torch.randint(0, 1000, (2, 30), device=CUDA)
    captured = generate(model, prompt, 30, GREEDY, use_cache="static", attention=attention, vocab_size=1000)
    without = generate(model, prompt, 30, GREEDY, use_cache=False, vocab_size=1000)
    assert torch.equal(captured.tokens, without.tokens)


@pytest.mark.parametrize("attention", ["sdpa", "fused_rope"])
def test_a_prompt_filling_the_context_decodes_its_last_token_with_a_captured_step(attention):
    """The last new token is never fed back: a prompt of context - 1 tokens gets 2 (the step captured in a cache of
    exactly the context), a prompt of the whole context 1 (nothing to capture); both as without a cache."""
    model = gpu_model("triton_v4")
    for prompt_len, new in ((255, 2), (256, 1)):
        prompt = torch.randint(0, 1000, (2, prompt_len), device=CUDA)
        decoder = StaticDecoder(model, 256, attention=attention)
        captured = generate(model, prompt, new, GREEDY, decoder=decoder, vocab_size=1000)
        without = generate(model, prompt, new, GREEDY, use_cache=False, vocab_size=1000)
        assert torch.equal(captured.tokens, without.tokens) and captured.tokens.shape == (2, new)
        assert decoder.captured == (new > 1) and decoder.note is None, decoder.note


def test_captured_logits_equal_the_eager_step_s():
    """Not only the argmax: a captured step's logits are the eager step's, bit for bit (same kernels, same shapes)."""
    model = cast_weights(gpu_model("triton_v4"), torch.bfloat16)
    prompt = torch.randint(0, 1000, (2, 16), device=CUDA)
    token = torch.randint(0, 1000, (2,), device=CUDA)
    out = []
    for capture in (True, False):
        decoder = StaticDecoder(model, 32, capture=capture, attention="fused_rope")
        decoder.prefill(prompt)
        out.append([decoder.step(token).clone() for _ in range(3)])
        assert decoder.captured == capture
    for a, b in zip(*out, strict=True):
        assert torch.equal(a, b)


def test_decode_speed_reports_a_captured_step():
    model = cast_weights(gpu_model("triton_v4"), torch.bfloat16)
    for attention in ("sdpa", "fused_rope"):
        point = decode_speed(model, batch=2, prompt_len=64, new_tokens=16, mode="captured", attention=attention,
                             repeats=1)
        assert point.captured and point.note is None and point.first_token_ms > 0 and point.decode_tok_s > 0
