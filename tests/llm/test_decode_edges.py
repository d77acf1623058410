"""Edges of decoding with a KV cache: an empty step after cached tokens, a step of another batch or dtype than the
cache holds, and a :class:`StaticDecoder` given an empty prompt, a step before its prompt or a token of another
batch. Each is what SDPA's path does (an empty step) or one line naming the mistake, before anything is written."""

from __future__ import annotations

import pytest
import torch

import rope
from llm.generation import StaticDecoder
from llm.model import GPT, GPTConfig


def tiny_model(n_kv_head: int | None = 2) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=61, seq_len=16, n_layer=2, n_head=4, n_kv_head=n_kv_head, n_embd=32, vocab_multiple=8)
    return GPT(cfg, rope.build("torch", cfg.head_dim, cfg.seq_len, variant="full")).eval()


@pytest.mark.interpreter
@pytest.mark.parametrize("static", [False, True])
def test_an_empty_step_after_cached_tokens_attends_as_sdpa_does(static):
    """No new token after cached ones: empty logits under ``fused_rope`` as under ``sdpa`` (the fused kernel takes
    1..256 queries, so such a step is SDPA's), the cache unchanged, and the next step still right."""
    model = tiny_model()
    idx = torch.randint(0, 61, (2, 6))
    with torch.no_grad():
        full, _ = model(idx)
        cache = model.new_cache(static=static, attention="fused_rope")
        model(idx[:, :5], cache=cache)
        empty, _ = model(idx[:, 5:5], cache=cache)
        assert empty.shape == (2, 0, full.shape[-1]) and cache.length == 5
        last, _ = model(idx[:, 5:], cache=cache)
    torch.testing.assert_close(last, full[:, 5:], rtol=0, atol=1e-5)


@pytest.mark.parametrize("attention", ["sdpa", pytest.param("fused_rope", marks=pytest.mark.interpreter)])
@pytest.mark.parametrize("static", [False, True])
def test_a_step_of_another_batch_or_dtype_is_one_line_and_writes_nothing(static, attention):
    """A cache filled for 2 rows, then a step of 1 (a dynamic cache broadcast it into both rows' keys before
    failing in attention; a static one failed inside index_copy_), or a step under autocast after a float32
    prompt: one line saying so, the cache as it was, and a right step after."""
    model = tiny_model()
    idx = torch.randint(0, 61, (2, 6))
    with torch.no_grad():
        full, _ = model(idx)
        cache = model.new_cache(static=static, attention=attention)
        model(idx[:, :5], cache=cache)
        keys = cache.keys.clone()
        with pytest.raises(ValueError, match="KV cache holds a batch of 2 rows; this step has 1") as e:
            model(idx[:1, 5:], cache=cache)
        assert "\n" not in str(e.value)
        with torch.autocast("cpu", dtype=torch.bfloat16), \
                pytest.raises(ValueError, match="KV cache holds torch.float32 keys; this step's are torch.bfloat16"):
            model(idx[:, 5:], cache=cache)
        assert cache.length == 5
        # the whole buffer, bit for bit: its positions past the cached ones are uninitialised and may hold NaN
        torch.testing.assert_close(cache.keys, keys, rtol=0, atol=0, equal_nan=True)
        last, _ = model(idx[:, 5:], cache=cache)
    torch.testing.assert_close(last, full[:, 5:], rtol=0, atol=1e-5)


def test_a_static_decoder_refuses_an_empty_prompt_an_early_step_and_a_token_of_another_batch():
    """An empty prompt ran no chunk and failed on an unset local; a step before any prompt on an unset buffer; a
    (1,) token for 2 rows was broadcast to both, silently decoding row 0's token in row 1."""
    model = tiny_model()
    decoder = StaticDecoder(model, 8)
    with pytest.raises(ValueError, match=r"step\(\) before prefill\(\)"):
        decoder.step(torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="prompt must hold at least one token"):
        decoder.prefill(torch.zeros(2, 0, dtype=torch.long))
    logits = decoder.prefill(torch.randint(0, 61, (2, 3)))
    for token in (torch.zeros(1, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long)):
        with pytest.raises(ValueError, match=r"token must be a \(2,\) tensor, one per row of the prompt"):
            decoder.step(token)
    assert decoder.cache.length == 3
    assert decoder.step(logits.argmax(-1)).shape == logits.shape


@pytest.mark.parametrize("use_cache", [False, True, "static"])
def test_generate_refuses_an_attention_it_does_not_have_with_or_without_a_cache(use_cache):
    """Without a cache, ``generate`` read ``attention`` nowhere: a typo ("flash") passed silently."""
    from llm.generation import Sampling, generate

    with pytest.raises(ValueError, match=r"^attention must be one of sdpa, fused_rope, got 'flash'$"):
        generate(tiny_model(), torch.zeros(1, 3, dtype=torch.long), 2, Sampling(), use_cache=use_cache,
                 attention="flash")


@pytest.mark.parametrize("static", [False, True])
def test_gradients_through_cached_steps_equal_those_of_the_whole_sequence(static):
    """Backward through decode steps of one cache: each step's attention saved views of the buffers (and the static
    cache's step position) that the next step wrote into, and the backward failed ("modified by an inplace
    operation"). Now the gradients are the uncached forward's."""
    model = tiny_model().train()
    idx = torch.randint(0, 61, (2, 6))
    params = list(model.parameters())
    whole = torch.autograd.grad(model(idx)[0][:, 3:].square().sum(), params, allow_unused=True)
    cache = model.new_cache(static=static)
    model(idx[:, :3], cache=cache)
    steps = torch.cat([model(idx[:, i:i + 1], cache=cache)[0] for i in range(3, 6)], 1)
    got = torch.autograd.grad(steps.square().sum(), params, allow_unused=True)
    for g, w in zip(got, whole, strict=True):
        assert (g is None) == (w is None)
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.interpreter
@pytest.mark.parametrize("static", [False, True])
def test_a_fused_cache_written_under_grad_then_stepped_with_frozen_weights_attends_by_sdpa(static):
    """A fused_rope cache that a recorded step wrote into holds buffers of that graph; a later step with the weights
    frozen (grad mode still on) is recorded through them, so it attends by SDPA, as a step with trainable weights
    does, rather than handing the kernel keys that require grad (a refusal naming k_cache, which the caller never
    passed): the logits of a cache filled under no_grad."""
    model = tiny_model()
    idx = torch.randint(0, 61, (2, 6))
    cache = model.new_cache(static=static, attention="fused_rope")
    model(idx[:, :5], cache=cache)
    model.requires_grad_(False)
    last, _ = model(idx[:, 5:], cache=cache)
    with torch.no_grad():
        clean = model.new_cache(static=static, attention="fused_rope")
        model(idx[:, :5], cache=clean)
        want, _ = model(idx[:, 5:], cache=clean)
    torch.testing.assert_close(last, want, rtol=0, atol=1e-5)


def test_a_fused_cache_for_heads_wider_than_the_kernel_takes_is_refused_when_made():
    """Heads over 256 elements, which rope.attention_with_rope refuses: a fused_rope cache for them is refused when
    the model makes it, naming the width and attention=sdpa, not at the first decode step."""
    model = GPT(GPTConfig(vocab_size=61, seq_len=16, n_layer=1, n_head=2, n_embd=528, vocab_multiple=8),
                rope.build("torch", 264, 16))
    with pytest.raises(ValueError, match="attention=fused_rope: heads of 264; the fused kernel takes heads up to 256"):
        model.new_cache(attention="fused_rope")
    model.new_cache(attention="sdpa")
