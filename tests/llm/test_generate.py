"""Generation: the KV caches (dynamic and static, attending by SDPA or by ``rope.attention_with_rope``)
reproduce the full forward for every RoPE implementation, greedy output is the same with a static cache,
a dynamic one and none, sampling does what its settings say, and ``python -m llm.generate`` streams a
trained run's text or refuses bad input with one line naming the key. (The captured decode step needs a
GPU: ``test_generate_gpu.py``.)"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys

import pytest
import torch
from helpers import CONF, ROOT, float32_entries, run_inprocess, run_module_main
from hydra import compose, initialize_config_dir

import rope
from llm.config_schema import LONGER_CONTEXT
from llm.errors import ConfigError
from llm.generate import quote_verbatim, verbatim_overrides
from llm.generation import GREEDY, Sampling, StaticDecoder, TextStream, encode_prompt, generate, pick_next
from llm.generation.command import generate_from_config
from llm.generation.speed import decode_speed_table
from llm.generation.static import capture_refusal
from llm.model import GPT, GPTConfig

# CPU: the Triton entries run under the interpreter (tests/conftest.py), slowly: tiny shapes only. The models are
# float32: each float32 code once (helpers.FLOAT32_SAME_AS: triton_v2 runs triton_v4's there)
IMPLS = float32_entries([n for n in rope.available() if rope.get(n).unavailable_reason(torch.device("cpu")) is None])


def tiny_model(impl: str, variant: str = "partial", n_kv_head: int | None = 2, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=61, seq_len=16, n_layer=2, n_head=4, n_kv_head=n_kv_head, n_embd=32, vocab_multiple=8)
    model = GPT(cfg, rope.build(impl, cfg.head_dim, cfg.seq_len, variant=variant)).eval()
    with torch.no_grad():  # GPT's init leaves attention near uniform: sharpen it so that positions matter
        for block in model.blocks:
            block.attn.qkv.weight.mul_(10)
    return model


# (implementation, static cache, attention): both caches for every implementation, the fused attention
# (Triton, slow under the interpreter) for two of them
# (the fused attention runs on CPU tensors under the interpreter only: marked so, skipped on a GPU machine)
CACHES = [(impl, static, "sdpa") for impl in IMPLS for static in (False, True)] + [
    pytest.param(impl, static, "fused_rope", marks=pytest.mark.interpreter)
    for impl, static in (("torch", False), ("torch", True), ("none", True))]


@pytest.mark.parametrize("impl,static,attention", CACHES)
def test_cached_decoding_equals_the_full_forward(impl, static, attention):
    """A prompt, a chunk of 3 tokens after it (the shifted causal mask), then single tokens: each
    call's logits equal the full forward's at the same positions (float32, 1e-5)."""
    model = tiny_model(impl)
    idx = torch.randint(0, 61, (2, 12))
    with torch.no_grad():
        full, _ = model(idx)
        cache = model.new_cache(static=static, attention=attention)
        pieces = [(0, 5), (5, 8), *((t, t + 1) for t in range(8, 12))]
        for a, b in pieces:
            logits, _ = model(idx[:, a:b], cache=cache)
            torch.testing.assert_close(logits, full[:, a:b], rtol=0, atol=1e-5, msg=f"{impl}, positions {a}..{b - 1}")
    assert cache.length == 12


@pytest.mark.interpreter
def test_fused_attention_is_what_the_cached_steps_run(monkeypatch):
    """attention="fused_rope": every cached step after the prompt goes through rope.attention_with_rope, with
    the un-rotated queries; the prompt itself (from an empty cache) stays SDPA's."""
    model = tiny_model("torch", variant="full")
    calls = []
    real = rope.attention_with_rope
    monkeypatch.setattr(rope, "attention_with_rope", lambda q, *a, **k: calls.append(q.shape) or real(q, *a, **k))
    cache = model.new_cache(static=True, attention="fused_rope")
    with torch.no_grad():
        model(torch.randint(0, 61, (1, 5)), cache=cache)
        assert calls == []
        model(torch.randint(0, 61, (1, 3)), cache=cache)
        model(torch.randint(0, 61, (1, 1)), cache=cache)
    assert calls == [(1, 3, 4, 8)] * 2 + [(1, 1, 4, 8)] * 2  # two layers each


def test_static_cache_steps_read_their_position_from_device_memory():
    """A one-token step of the static cache takes its position from ``step_position`` (what a captured step
    reads), which the eager step fills; the SDPA mask follows it."""
    model = tiny_model("torch", variant="full")
    cache = model.new_cache(static=True)
    with torch.no_grad():
        model(torch.randint(0, 61, (2, 4)), cache=cache)
        positions = cache.positions(1, torch.device("cpu"))
    assert positions is cache.step_position and positions.tolist() == [4]
    assert cache.mask.shape == (1, cache.capacity)
    assert (cache.mask[0] == 0).nonzero().flatten().tolist() == [0, 1, 2, 3, 4]
    assert cache.mask[0, 5:].eq(-float("inf")).all()


def test_cached_decoding_rotates_at_absolute_positions():
    """The cache path is RoPE's ``positions=`` path: rotating new tokens at 0 instead (a cache that
    forgot the offset) gives other logits, so the test above can tell."""
    model = tiny_model("torch", variant="full")
    idx = torch.randint(0, 61, (1, 8))
    with torch.no_grad():
        full, _ = model(idx)
        cache = model.new_cache()
        model(idx[:, :7], cache=cache)
        right = model.next_logits(idx[:, 7:], cache)
        cache.length = 7
        cache.positions = lambda T, device: torch.arange(T, device=device)  # the bug: positions from 0
        wrong = model.next_logits(idx[:, 7:], cache)
    torch.testing.assert_close(right, full[:, 7], rtol=0, atol=1e-5)
    assert (wrong - full[:, 7]).abs().max() > 1e-2


@pytest.mark.parametrize("impl", IMPLS)
def test_greedy_output_is_the_same_with_and_without_the_cache(impl):
    """The static cache (its step eager: a CPU has nothing to capture), the dynamic one and none agree."""
    model = tiny_model(impl, n_kv_head=None, seed=1)
    prompt = torch.randint(0, 61, (2, 3))
    with_cache = generate(model, prompt, 8, GREEDY, use_cache=True, vocab_size=61)
    static = generate(model, prompt, 8, GREEDY, use_cache="static", vocab_size=61)
    without = generate(model, prompt, 8, GREEDY, use_cache=False, vocab_size=61)
    assert torch.equal(with_cache.tokens, without.tokens) and with_cache.tokens.shape == (2, 8)
    assert torch.equal(static.tokens, without.tokens)
    assert int(with_cache.tokens.max()) < 61  # the padded head rows are never picked


@pytest.mark.interpreter
def test_fused_attention_greedy_output_and_chunked_prefill_match_the_uncached_decoding():
    model = tiny_model("torch", n_kv_head=1, seed=1)
    prompt = torch.randint(0, 61, (2, 5))
    reference = generate(model, prompt, 4, GREEDY, use_cache=False, vocab_size=61)
    decoder = StaticDecoder(model, 9, attention="fused_rope", prefill_chunk=2)
    assert torch.equal(generate(model, prompt, 4, GREEDY, decoder=decoder, vocab_size=61).tokens, reference.tokens)
    dynamic = generate(model, prompt, 4, GREEDY, use_cache="dynamic", attention="fused_rope", vocab_size=61)
    assert torch.equal(dynamic.tokens, reference.tokens)


@pytest.mark.interpreter
def test_a_static_decoder_steps_outside_no_grad_with_the_fused_attention():
    """Its own calls, outside ``torch.no_grad()`` (the decode loop's), with weights that require grad: no graph
    for a backward is recorded, so the fused attention (no backward: it refuses inputs that require grad) runs."""
    model = tiny_model("torch", n_kv_head=1, seed=1)
    assert next(model.parameters()).requires_grad and torch.is_grad_enabled()
    decoder = StaticDecoder(model, 9, attention="fused_rope")
    logits = decoder.prefill(torch.randint(0, 61, (2, 5)))
    step = decoder.step(logits.argmax(-1))
    assert not logits.requires_grad and not step.requires_grad and step.shape == logits.shape


def test_a_static_decoder_serves_many_sequences_and_batch_sizes():
    """Its buffers are reused from one call to the next (a new prompt overwrites them), and a batch of another
    size gets buffers of its own; a prompt that does not fit is refused."""
    model = tiny_model("torch", n_kv_head=None, seed=1)
    decoder = StaticDecoder(model, 12)
    a, b = torch.randint(0, 61, (2, 4)), torch.randint(0, 61, (3, 6))
    first = generate(model, a, 6, GREEDY, decoder=decoder, vocab_size=61)
    buffers = decoder.cache.keys
    assert torch.equal(generate(model, b, 6, GREEDY, decoder=decoder, vocab_size=61).tokens,
                       generate(model, b, 6, GREEDY, use_cache=False, vocab_size=61).tokens)
    assert decoder.cache.keys is not buffers and decoder.cache.keys.shape[1] == 3
    assert torch.equal(generate(model, a, 6, GREEDY, decoder=decoder, vocab_size=61).tokens, first.tokens)
    assert generate(model, a, 9, GREEDY, decoder=decoder).tokens.shape == (2, 9)  # the 9th is never fed: 12 fed
    with pytest.raises(ValueError, match="do not fit the decoder's 12 positions"):
        generate(model, a, 10, GREEDY, decoder=decoder)
    # the CPU: the eager step is the step, and the decoder says why capture (asked for by default) did not happen
    assert not decoder.captured and decoder.note == "capture needs a CUDA device; decoding eagerly on cpu"


def test_dynamic_ntk_is_decoded_eagerly_saying_why():
    model = GPT(GPTConfig(vocab_size=61, seq_len=16, n_layer=1, n_head=2, n_embd=16, vocab_multiple=8),
                rope.build("torch", 8, 16, scaling={"type": "dynamic_ntk", "factor": 2.0, "original_max_seq_len": 8}))
    assert "dynamic_ntk" in capture_refusal(model) and "decoding eagerly" in capture_refusal(model)
    assert capture_refusal(tiny_model("torch")) is None


def test_timed_generation_and_the_speed_table():
    """``timed`` reports the first token's latency and the decode rate; the benchmark's table measures every
    mode (the CPU: ``captured`` runs eagerly) with the rows it says."""
    model = tiny_model("torch", n_kv_head=None, seed=1)
    result = generate(model, torch.randint(0, 61, (2, 3)), 5, GREEDY, use_cache="static", timed=True)
    assert result.first_token_s > 0 and result.decode_s > 0 and result.decode_tokens_per_s == 2 * 4 / result.decode_s
    seen = []
    points = decode_speed_table(model, batches=[1, 2], prompt_lens=[4], new_tokens=4, repeats=1,
                                attentions=("sdpa",), new_tokens_without_cache=2, on_point=seen.append)
    assert seen == points and [(p.batch, p.mode) for p in points] == [
        (b, m) for b in (1, 2) for m in ("captured", "eager", "dynamic", "none")]
    assert all(p.first_token_ms > 0 and p.decode_tok_s > 0 and p.step_ms > 0 for p in points)
    assert [p.note for p in points[:4]] == ["capture needs a CUDA device; decoding eagerly on cpu", None, None, None]
    assert [p.new_tokens for p in points[:4]] == [4, 4, 4, 2] and not any(p.captured for p in points)


def test_generate_stops_at_the_stop_token_and_refuses_to_run_past_the_context():
    model = tiny_model("torch")
    prompt = torch.randint(0, 61, (1, 4))
    first = int(generate(model, prompt, 1, GREEDY).tokens[0, 0])
    out = generate(model, prompt, 10, GREEDY, stop_token=first)
    assert out.reason == "stop_token" and out.tokens.shape == (1, 1)
    assert generate(model, prompt, 13, GREEDY).reason == "max_new_tokens"  # 4 + 13 - 1 fed = the context of 16
    with pytest.raises(ValueError, match="must fit the model's context of 16"):
        generate(model, prompt, 14, GREEDY)
    assert not model.training


@pytest.mark.parametrize("cache", ["static", "dynamic", "none"])
def test_the_last_new_token_fits_the_context_with_every_cache(cache):
    """The last new token is never fed back, so a prompt of context - 1 tokens has room for 2 new ones and a prompt
    filling the context for 1 (the model predicts it from the context's last position): with a static cache, a
    dynamic one and none, the same tokens as the full forward's greedy choices."""
    model = tiny_model("torch")
    prompt = torch.randint(0, 61, (2, 15))
    two = generate(model, prompt, 2, GREEDY, use_cache=cache).tokens
    first = model(prompt)[0][:, -1].argmax(-1)  # logits (B, T, V) of the full forward
    second = model(torch.cat([prompt, first[:, None]], dim=1))[0][:, -1].argmax(-1)
    assert torch.equal(two, torch.stack([first, second], dim=1))
    full = torch.cat([prompt, first[:, None]], dim=1)  # 16 tokens: the whole context
    assert torch.equal(generate(model, full, 1, GREEDY, use_cache=cache).tokens[:, 0], second)
    with pytest.raises(ValueError, match="must fit the model's context of 16"):
        generate(model, prompt, 3, GREEDY, use_cache=cache)


def test_pick_next_greedy_top_k_top_p_and_seed():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(4000, 1)
    assert pick_next(logits[:1], GREEDY).tolist() == [0]
    draw = lambda s, seed=0: pick_next(logits, s, torch.Generator().manual_seed(seed))  # noqa: E731
    assert set(draw(Sampling(1.0)).tolist()) == {0, 1, 2, 3}
    assert set(draw(Sampling(1.0, top_k=2)).tolist()) == {0, 1}
    assert set(draw(Sampling(5.0, top_k=1)).tolist()) == {0}
    assert set(draw(Sampling(1.0, top_p=0.7)).tolist()) == {0, 1}  # 0.5 < 0.7 <= 0.5 + 0.3
    assert set(draw(Sampling(1.0, top_p=0.5)).tolist()) == {0}
    share = (draw(Sampling(1.0)) == 0).float().mean().item()
    assert abs(share - 0.5) < 0.04
    assert torch.equal(draw(Sampling(0.8), 3), draw(Sampling(0.8), 3))
    assert not torch.equal(draw(Sampling(0.8), 3), draw(Sampling(0.8), 4))


@pytest.mark.parametrize("temperature", [1e-40, 5e-324, 1e-10])
def test_a_tiny_positive_temperature_picks_the_most_likely_tokens(temperature):
    """Dividing the logits by 1e-40 overflowed float32 to inf, and the draw crashed (probability tensor contains
    inf or nan): any finite temperature > 0 is legal, and a tiny one is greedy, its ties shared."""
    logits = torch.tensor([[1.0, 3.0, 2.0, -1e30], [1e30, -1e30, 1e30 - 1e24, 0.0]])
    for cut in ({}, {"top_k": 2}, {"top_p": 0.5}):
        picked = pick_next(logits, Sampling(temperature, **cut), torch.Generator().manual_seed(0))
        assert picked.tolist() == [1, 0], (temperature, cut)
    ties = torch.tensor([[3.0, 3.0, 1.0]]).repeat(400, 1)
    drawn = pick_next(ties, Sampling(temperature), torch.Generator().manual_seed(0))
    assert set(drawn.tolist()) == {0, 1}


@pytest.mark.parametrize("kwargs,message", [
    ({"temperature": -0.1}, "temperature=-0.1 must be a finite number >= 0"),
    ({"temperature": float("nan")}, "temperature=nan"),
    ({"temperature": 1.0, "top_k": 0}, "top_k=0 must be a positive integer"),
    ({"temperature": 1.0, "top_k": 2.5}, "top_k=2.5"),
    ({"temperature": 1.0, "top_p": 0.0}, r"top_p=0.0 must be in \(0, 1\]"),
    ({"temperature": 1.0, "top_p": 1.5}, "top_p=1.5"),
])
def test_bad_sampling_settings_name_the_key(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Sampling(**kwargs)


def test_streamed_text_equals_the_decoded_text():
    from llm.data import get_tokenizer

    enc = get_tokenizer("cl100k_base")
    text = "naïve café ≠ 日本語 🙂 end"
    ids = enc.encode_ordinary(text)
    assert any(not enc.decode_single_token_bytes(t).decode("utf-8", "ignore") for t in ids)  # split characters
    stream = TextStream(enc)
    assert "".join(stream.push(t) for t in ids) + stream.flush() == text
    assert encode_prompt(enc, "<|endoftext|>")[0] == enc.eot_token and len(encode_prompt(enc, "<|endoftext|>")) > 2


@pytest.mark.parametrize("value", ["def main(", "it's", "a\\b", "ends\\", "\\'", "${x}", "\\${oops}", "x,y", "",
                                   "two\nlines", 'say "hi"', "{[( ])}", "a=b", '"""docstring"""', "'a' + 'b'", "'''",
                                   '"a" if x else "b"', "'ends\\'"])
def test_verbatim_prompt_survives_hydra(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    (arg,) = verbatim_overrides([f"prompt={value}"])
    parsed = OverridesParser.create().parse_overrides([arg])[0].value()
    assert OmegaConf.create({"p": parsed}).p == value and arg == f"prompt={quote_verbatim(value)}"
    # one Hydra quoted string is the user's quoting for Hydra, which removes its quotes
    assert verbatim_overrides(["prompt='quoted'", "top_k=5"]) == ["prompt='quoted'", "top_k=5"]
    assert verbatim_overrides(["prompt='it\\'s'", 'prompt="a"']) == ["prompt='it\\'s'", 'prompt="a"']


# -- python -m llm.generate on a trained run ----------------------------------------------------------
@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("gen") / "run"
    run_inprocess(run_dir, ["train.max_steps=3", "train.eval_every=3", "tokenizer=cl100k_base"])  # seq_len 32
    return run_dir


def gen_cfg(run_dir, *overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("generate", overrides=verbatim_overrides([f"run={run_dir}", *overrides]))  # as the CLI


def run_generate(cfg) -> tuple[list[str], str, str]:
    out, err = io.StringIO(), io.StringIO()
    texts = generate_from_config(cfg, out, err)
    return texts, out.getvalue(), err.getvalue()


def test_cli_streams_samples_of_a_trained_run(trained_run):
    cmd = [sys.executable, "-m", "llm.generate", f"run={trained_run}", "prompt=def main(", "max_new_tokens=6",
           "temperature=0.8", "top_k=50", "seed=0", "num_samples=2", "device=cpu"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("--- sample 1/2 ---\ndef main(") and "--- sample 2/2 ---\ndef main(" in proc.stdout
    assert "step 3, rope=torch (partial, float32), cpu, KV cache" in proc.stderr
    assert not (ROOT / "outputs" / "generate.log").exists() and not (ROOT / ".hydra").exists()


def test_seeded_samples_repeat_and_greedy_matches_the_uncached_decoding(trained_run):
    # float32 on the CPU on every machine: greedy paths of different kernels compared token for token (bf16
    # logits of a barely trained model tie too often for that)
    common = ["prompt=import ", "max_new_tokens=4", "num_samples=2", "device=cpu"]
    a, out, _ = run_generate(gen_cfg(trained_run, *common, "seed=1"))
    assert a == run_generate(gen_cfg(trained_run, *common, "seed=1"))[0]
    assert a != run_generate(gen_cfg(trained_run, *common, "seed=2"))[0]
    assert out.count("import ") == 2 and len(a) == 2
    greedy = run_generate(gen_cfg(trained_run, *common, "temperature=0"))[0]
    assert greedy[0] == greedy[1]
    assert greedy == run_generate(gen_cfg(trained_run, *common, "temperature=0", "cache=false"))[0]
    assert greedy == run_generate(gen_cfg(trained_run, *common, "temperature=0", "cache=dynamic"))[0]


@pytest.mark.interpreter
def test_cli_fused_attention_and_chunked_prefill(trained_run):
    common = ["prompt=import os", "max_new_tokens=3", "temperature=0", "device=cpu"]
    greedy, _, _ = run_generate(gen_cfg(trained_run, *common))
    fused, _, err = run_generate(gen_cfg(trained_run, *common, "attention=fused_rope", "prefill_chunk=2"))
    assert fused == greedy
    assert ("cpu, KV cache (static, eager: capture=true needs a CUDA device, not cpu; prompt in chunks of 2 tokens), "
            "attention fused_rope, float32 weights") in err
    assert "[first token after " in err and "(the prompt), then " in err


def test_rope_override_swaps_the_kernel_and_keeps_the_function(trained_run):
    common = ["prompt=class ", "max_new_tokens=8", "temperature=0"]
    ref, _, _ = run_generate(gen_cfg(trained_run, *common))
    v4, _, err = run_generate(gen_cfg(trained_run, *common, "rope=triton_v4"))
    assert "rope=triton_v4 (partial" in err and v4 == ref
    for override, message in (("rope=triton_v4_full", "rope.variant='full': the run was trained with "
                                                      "rope.variant='partial'"),
                              ("rope=none", "rope=none: the run was trained with rope=torch")):
        with pytest.raises(ConfigError, match=message):
            run_generate(gen_cfg(trained_run, *common, override))


def test_rope_override_takes_the_run_s_rotation_and_the_kernel_s_own_options(device):
    """On ``device``, where triton_v4 runs (the GPU, or the CPU under the interpreter): the kernel check
    comes last, after the options."""
    from llm.generation.load import rope_for_generation

    run = {"name": "torch", "variant": "full", "base": 500.0, "compute_dtype": "float32"}
    preset_v4 = {"name": "triton_v4", "variant": "partial", "base": 10000.0}  # conf/rope/triton_v4.yaml's defaults
    assert rope_for_generation(run, preset_v4, device) == {"name": "triton_v4", "variant": "full", "base": 500.0}
    bf16 = {"name": "torch", "variant": "partial", "base": 10000.0, "compute_dtype": "bfloat16"}
    assert rope_for_generation(run, bf16, device)["compute_dtype"] == "bfloat16"
    assert rope_for_generation(run, None, device) == run
    with pytest.raises(ConfigError, match="rope.base=250.0: the run was trained with rope.base=500.0"):
        rope_for_generation(run, {"name": "torch", "base": 250.0}, device)
    with pytest.raises(ConfigError, match=r"^rope.max_seq_len=64: generation keeps the run's context of 32 positions "
                                          r"\(its model.seq_len\); to evaluate longer contexts with a scaling: "
                                          r"python -m llm.eval_lengths; to generate at a longer context"):
        rope_for_generation(run, {"name": "torch", "max_seq_len": 64}, device, 32)  # was dropped silently
    assert rope_for_generation(run, {"name": "torch", "max_seq_len": 32}, device, 32)["name"] == "torch"  # restated
    # a run from before rope.scaling existed, and a preset spelling "no scaling" out: the same function
    preset = {**preset_v4, "scaling": {"type": "none", "factor": None, "original_max_seq_len": None}}
    assert rope_for_generation(run, preset, device)["variant"] == "full"
    yarn = {"type": "yarn", "factor": 4.0, "original_max_seq_len": 16}
    with pytest.raises(ConfigError, match=r"^rope.scaling.type=yarn rope.scaling.factor=4.0 "
                                          r"rope.scaling.original_max_seq_len=16: the run was trained with "
                                          r"rope.scaling=none; a RoPE override"):  # as typed, not a dict
        rope_for_generation(run, {**preset_v4, "scaling": yarn}, device)
    assert rope_for_generation({**run, "scaling": yarn}, preset, device)["scaling"] == yarn  # the run's, kept


def test_generation_stops_at_the_end_of_the_context(trained_run, tmp_path):
    from llm.data import get_tokenizer

    text = "x = 1\n" * 4  # from a file, verbatim
    (tmp_path / "prompt.txt").write_text(text)
    # model.seq_len=32: the RoPE cache; the last new token is never fed back, so it may be the 33rd
    room = 33 - len(encode_prompt(get_tokenizer("cl100k_base"), text))
    texts, out, err = run_generate(gen_cfg(trained_run, f"prompt_file={tmp_path / 'prompt.txt'}", "max_new_tokens=50",
                                           "temperature=0"))
    assert out.startswith(text) and 0 < room < 50
    assert f"[stopped after {room} tokens: the sequence reached the model's context of 32 positions" in err, err


@pytest.mark.parametrize("cache", ["static", "dynamic", "false"])
def test_a_prompt_filling_the_context_gets_one_token(trained_run, tmp_path, cache):
    """A prompt of 32 tokens (the end-of-text token first) on a context of 32: one new token, predicted from the
    last position (it was refused as leaving no room); 31 tokens: two (it stopped after one)."""
    from llm.data import get_tokenizer

    enc = get_tokenizer("cl100k_base")
    text = next(t for n in range(10, 40) if len(encode_prompt(enc, t := "ab " * n)) == 32)
    _, _, err = run_generate(gen_cfg(trained_run, f"prompt={text}", "max_new_tokens=5", "temperature=0",
                                     f"cache={cache}", "device=cpu"))
    assert "[stopped after 1 token: the sequence reached the model's context of 32 positions" in err, err
    shorter = next(t for n in range(10, 40) if len(encode_prompt(enc, t := "ab " * n)) == 31)
    _, _, err = run_generate(gen_cfg(trained_run, f"prompt={shorter}", "max_new_tokens=5", "temperature=0",
                                     f"cache={cache}", "device=cpu"))
    assert "[stopped after 2 tokens: the sequence reached" in err, err


def test_generation_says_why_it_stopped_at_max_new_tokens(trained_run):
    """Every sample ends with a line saying why decoding stopped: end of text, the context, or max_new_tokens."""
    _, _, err = run_generate(gen_cfg(trained_run, "prompt=import os", "max_new_tokens=3", "temperature=0"))
    reasons = [line for line in err.splitlines() if line.startswith(("[end of text", "[stopped after"))]
    assert len(reasons) == 1 and (reasons[0].startswith("[end of text")
                                  or reasons[0] == "[stopped after max_new_tokens=3 tokens]"), err


@pytest.mark.parametrize("overrides,message", [
    (["top_k=0"], "top_k=0 must be a positive integer"),
    (["temperature=-1"], "temperature=-1.0 must be a finite number >= 0"),
    (["max_new_tokens=0"], "max_new_tokens=0 must be a positive integer"),
    (["num_samples=-2"], "num_samples=-2 must be a positive integer"),
    (["prompt=" + "word " * 40], "prompt: 42 tokens .* exceed the model's context of 32 positions"),
    (["prompt=a", "prompt_file=/x"], "prompt= and prompt_file= are both set"),
    (["prompt_file=/no/such/file"], "prompt_file=/no/such/file is not a file"),
    (["checkpoint=/no/such.pt"], "checkpoint=/no/such.pt is not a file"),
    (["device=cuda:7"], "device=cuda"),
    (["device=mps"], "device=mps: runs on a CPU or a CUDA GPU, not mps"),
    (["cache=paged"], "cache='paged'; allowed: static"),
    (["capture=sometimes"], "capture='sometimes' must be true or false"),
    (["attention=flash"], "attention='flash'; allowed: sdpa, fused_rope"),
    (["attention=fused_rope", "cache=false"], "attention=fused_rope attends over a KV cache: it needs cache=static"),
    (["prefill_chunk=0"], "prefill_chunk=0 must be a positive integer"),
    (["prefill_chunk=4", "cache=dynamic"], "prefill_chunk=4 feeds the prompt into a static cache"),
])
def test_bad_input_is_one_line_naming_the_key(trained_run, overrides, message):
    if overrides == ["device=cuda:7"] and torch.cuda.device_count() > 7:
        pytest.skip("a machine with 8 GPUs")
    with pytest.raises(ConfigError, match=message) as e:
        run_generate(gen_cfg(trained_run, *overrides))
    assert "\n" not in str(e.value)


def test_a_run_dir_without_a_checkpoint_is_refused(tmp_path, trained_run):
    (tmp_path / "config.yaml").write_text((trained_run / "config.yaml").read_text())
    with pytest.raises(ConfigError, match=f"run={tmp_path} has no checkpoint"):
        run_generate(gen_cfg(tmp_path))
    (tmp_path / "bare").mkdir()  # a directory, but no run's
    with pytest.raises(ConfigError, match="run=.*bare is not a run dir: it holds neither config.yaml nor checkpoints/"):
        run_generate(gen_cfg(tmp_path / "bare"))
    with pytest.raises(ConfigError, match="run=.*nope is not a directory"):
        run_generate(gen_cfg(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="run= is required"):
        run_generate(gen_cfg(""))


def test_cli_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    """The command's own __main__ in this process (test_cli_streams_samples_of_a_trained_run runs it as one)."""
    code, lines = run_module_main(monkeypatch, capsys, "llm.generate", [f"run={tmp_path}", "top_k=0"])
    assert code == 2 and lines == ["Error: top_k=0 must be a positive integer, or null for no top-k cut"], lines


@pytest.mark.parametrize("arg,line", [
    ("rope=nope", "Error: rope=nope is not an option of rope; allowed: "),
    ("top_kk=3", "Error: top_kk is not a known key, so nothing would read it; did you mean top_k?"),
    # the run's rotation, typed without + (the form the docs use): what rope does here, not "choose a rope"
    ("rope.variant=full", "Error: rope.variant=full: llm.generate decodes with the run's rotation (its variant, "),
    ("rope.compute_dtype=bfloat16", "Error: rope.compute_dtype=bfloat16 without rope=<name>: "),
])
def test_a_hydra_level_mistake_in_generate_is_one_line_and_exit_2(arg, line, monkeypatch, capsys):
    """The command's own __main__ in this process (refused before any work; the test above runs a process)."""
    code, lines = run_module_main(monkeypatch, capsys, "llm.generate", [arg])
    assert code == 2 and len(lines) == 1 and lines[0].startswith(line), lines


@pytest.mark.parametrize("arg,line", [
    ("rope.variant=full", "Error: rope.variant=full: llm.eval_lengths evaluates with the run's rotation (its "
                          "variant, base, layout, rotary_dim as trained)"),
    ("rope.scaling.factorr=2", "Error: rope.scaling.factorr is not in this config; did you mean rope.scaling.factor?"),
])
def test_a_rope_key_without_a_kernel_in_eval_lengths_says_the_rotation_is_the_runs(arg, line, monkeypatch, capsys):
    """eval_lengths takes rope.scaling.* as its own; another rotation key typed without rope=<name> is the run's."""
    code, lines = run_module_main(monkeypatch, capsys, "llm.eval_lengths", [arg])
    assert code == 2 and len(lines) == 1 and lines[0].startswith(line), lines


def test_rope_keys_without_a_kernel_say_what_rope_does_in_generation():
    """``+rope.variant=full`` with no ``rope=<name>``: the run's rotation stays, said in one line (not "a key not
    of the rope chosen", with none chosen)."""
    from llm.generation.load import rope_for_generation

    run = {"name": "torch", "variant": "partial", "base": 10000.0}
    with pytest.raises(ConfigError, match=r"rope.variant='full': llm.generate decodes with the run's rotation"):
        rope_for_generation(run, {"variant": "full"}, torch.device("cpu"))
    with pytest.raises(ConfigError, match=r"rope.compute_dtype='bfloat16' without rope=<name>"):
        rope_for_generation(run, {"compute_dtype": "bfloat16"}, torch.device("cpu"))


def other_runs_checkpoint(run_dir, tmp_path, **changes):
    """The run's newest checkpoint as another run's would be: its stored config changed (``rope__variant="full"``:
    ``config["rope"]["variant"]``), the weights of the same shapes."""
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    for dotted, value in changes.items():
        group, key = dotted.split("__")
        state["config"][group][key] = value
    other = tmp_path / "other" / "checkpoints"
    other.mkdir(parents=True)
    torch.save(state, other / "last.pt")
    return other / "last.pt"


def test_a_checkpoint_of_another_model_is_refused_naming_the_keys(trained_run, tmp_path):
    """checkpoint= of a full-rotation run given with a partial run: the weights would decode with the run's partial
    rotation, silently; one line names what differs. A checkpoint that differs only in the kernel loads."""
    path = other_runs_checkpoint(trained_run, tmp_path, rope__variant="full", model__n_head=4)
    with pytest.raises(ConfigError) as e:
        run_generate(gen_cfg(trained_run, "prompt=x", "max_new_tokens=2", f"checkpoint={path}"))
    line = str(e.value)
    assert line.startswith(f"checkpoint={path} holds another model than run={trained_run}: ") and "\n" not in line
    assert "model.n_head=4 (the run: 2)" in line and "rope.variant='full' (the run: 'partial')" in line
    kernel = other_runs_checkpoint(trained_run, tmp_path / "k", rope__name="triton_v4", rope__compute_dtype=None)
    texts, _, _ = run_generate(gen_cfg(trained_run, "prompt=x", "max_new_tokens=2", "temperature=0",
                                       f"checkpoint={kernel}"))
    assert texts == run_generate(gen_cfg(trained_run, "prompt=x", "max_new_tokens=2", "temperature=0"))[0]


@pytest.mark.parametrize("stop,code,word", [("ctrl_c", 130, "Interrupted"),
                                            ("sigterm", 128 + signal.SIGTERM, "Stopped by SIGTERM")],
                         ids=["ctrl_c", "sigterm"])
def test_the_command_stopped_while_decoding_says_so_in_one_line(trained_run, monkeypatch, capsys, stop, code, word):
    """The command's own __main__, stopped at the third new token by Ctrl-C or a SIGTERM (a job scheduler's stop,
    `kill`): the text so far stays on stdout, one line says it was stopped, exit 128 + the signal, as llm.eval_lengths
    and llm.train end (Ctrl-C printed a traceback; a SIGTERM ended it without a word)."""
    from llm.generation import command

    real = command.generate

    def stopped_at_the_third_token(*args, on_token, **kwargs):
        seen = []

        def count(token):
            seen.append(token)
            if len(seen) == 3:
                if stop == "ctrl_c":
                    raise KeyboardInterrupt
                os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before the next bytecode of this frame
            on_token(token)

        return real(*args, on_token=count, **kwargs)

    monkeypatch.setattr(command, "generate", stopped_at_the_third_token)

    def unhandled(signum, frame):  # the command took no SIGTERM of its own (the default would end pytest here)
        pytest.fail("the command left SIGTERM to the default handler, which ends the process without a word")

    before = signal.signal(signal.SIGTERM, unhandled)
    try:
        exit_code, lines = run_module_main(monkeypatch, capsys, "llm.generate",
                                           [f"run={trained_run}", "prompt=def main(", "max_new_tokens=8",
                                            "num_samples=2", "device=cpu", "temperature=0"])
        assert exit_code == code
        assert lines[-1] == f"{word} in sample 1 of 2: the text so far is above", lines
        assert not any("Traceback" in line for line in lines)
        assert signal.getsignal(signal.SIGTERM) is unhandled  # the command's own handler is gone once it ends
    finally:
        signal.signal(signal.SIGTERM, before)


def test_an_explicit_rotation_key_other_than_the_run_s_is_refused_even_at_the_kernel_s_default(trained_run, tmp_path,
                                                                                                 monkeypatch, capsys):
    """``rope=torch rope.variant=partial`` on a full-rotation run: partial is torch's default, which defers to the
    run's rotation when the preset brings it, so the explicit key was ignored and the run decoded full; asked on the
    command line it is refused as any other rotation key is. ``rope=torch`` alone keeps the run's rotation."""
    import shutil

    import yaml

    run = tmp_path / "full"
    shutil.copytree(trained_run, run)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["rope"]["variant"] = "full"
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    for ckpt in (run / "checkpoints").glob("*.pt"):  # the checkpoints' stored config says so too, as a full run's
        if not ckpt.is_symlink():
            state = torch.load(ckpt, weights_only=False)
            state["config"]["rope"]["variant"] = "full"
            torch.save(state, ckpt)
    common = [f"run={run}", "prompt=x", "max_new_tokens=1", "device=cpu", "temperature=0"]
    code, lines = run_module_main(monkeypatch, capsys, "llm.generate", [*common, "rope=torch", "rope.variant=partial"])
    assert (code, lines) == (2, ["Error: rope.variant='partial': the run was trained with rope.variant='full'; a RoPE "
                                 "override may change the kernel, not the rotation"]), lines
    _, _, err = run_generate(gen_cfg(run, *common, "rope=torch"))
    assert "rope=torch (full, float32)" in err
    _, _, err = run_generate(gen_cfg(run, *common, "rope=torch", "rope.variant=full"))
    assert "rope=torch (full, float32)" in err


def test_greedy_decoding_says_top_k_top_p_are_ignored_and_samples_identical(trained_run):
    _, _, err = run_generate(gen_cfg(trained_run, "prompt=def", "max_new_tokens=2", "temperature=0", "top_k=5",
                                     "top_p=0.9", "num_samples=2", "cache=false"))
    assert "[note: temperature=0 decodes greedily (argmax): top_k=5 and top_p=0.9 are ignored]" in err, err
    assert "[note: temperature=0 decodes greedily: the 2 samples are identical]" in err, err
    _, _, err = run_generate(gen_cfg(trained_run, "prompt=def", "max_new_tokens=2", "temperature=0.5", "top_k=5",
                                     "num_samples=2", "cache=false"))
    assert "note:" not in err, err  # sampling: top_k used, samples differ


def test_a_scaling_refused_is_named_as_typed_and_none_for_a_run_without():
    from llm.generation.load import rope_for_generation

    run = {"name": "torch", "variant": "partial", "base": 10000.0, "scaling": {"type": "none", "factor": None}}
    yarn = {"type": "yarn", "factor": 4.0, "original_max_seq_len": None}
    with pytest.raises(ConfigError, match=r"^rope.scaling.type=yarn rope.scaling.factor=4.0: the run was trained "
                                          r"with rope.scaling=none; a RoPE") as refused:
        rope_for_generation(run, {"name": "torch", "scaling": yarn}, torch.device("cpu"))
    assert str(refused.value).endswith(f"the rotation; {LONGER_CONTEXT}")  # where a longer context is to be had
    with pytest.raises(ConfigError, match=r"^rope.scaling=none: the run was trained with rope.scaling.type=yarn "
                                          r"rope.scaling.factor=4.0; a RoPE"):
        rope_for_generation({**run, "scaling": yarn}, {"name": "torch", "scaling": None}, torch.device("cpu"),
                            explicit={"scaling"})


def test_a_kernel_that_cannot_run_here_is_named_by_the_preset_typed(monkeypatch):
    from llm.generation.load import command_line_rope_preset, rope_for_generation

    monkeypatch.setattr("rope._launch.INTERPRETING", False)  # a process started without TRITON_INTERPRET=1
    reason = rope.get("triton_v4").unavailable_reason(torch.device("cpu"))
    assert reason.startswith("triton_v4 runs on a CUDA GPU") and "rope=" not in reason  # rope's words, not the app's
    run = {"name": "torch", "variant": "full", "base": 10000.0}
    with pytest.raises(ConfigError) as e:
        rope_for_generation(run, {"name": "triton_v4", "variant": "full"}, torch.device("cpu"), preset="triton_v4_full")
    assert str(e.value) == f"rope=triton_v4_full (implementation triton_v4): {reason}"
    with pytest.raises(ConfigError) as e:  # the preset of the kernel's name
        rope_for_generation(run, {"name": "triton_v4", "variant": "full"}, torch.device("cpu"), preset="triton_v4")
    assert str(e.value) == f"rope=triton_v4: {reason}"
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("generate", overrides=["run=x", "rope=triton_v4_full"], return_hydra_config=True)
    assert command_line_rope_preset(cfg) == "triton_v4_full"


# -- decoding mistakes found by using the command -------------------------------------------------------
def test_ids_below_n_vocab_that_are_no_token_are_never_drawn(trained_run, monkeypatch):
    """cl100k_base has ids below n_vocab that are no token (tiktoken cannot decode them) and special tokens that
    training never writes: a model favouring a gap ended the command with tiktoken's KeyError, a special token
    printed its spelling; both are masked, the next most likely token is drawn."""
    from llm.data.tokenizer import get_tokenizer
    from llm.generation.text import never_written

    enc = get_tokenizer("cl100k_base")
    never = never_written(enc)
    assert {100256, 100261, 100275, enc.encode_single_token("<|fim_prefix|>")} <= set(never)
    assert enc.eot_token not in never and max(never) < enc.n_vocab
    real = GPT.next_logits

    def favouring_what_is_no_token(self, idx, cache=None):
        logits = real(self, idx, cache)
        logits[:, 100261] += 1e4  # a gap: no token
        logits[:, enc.encode_single_token("<|fim_prefix|>")] += 5e3
        return logits

    monkeypatch.setattr(GPT, "next_logits", favouring_what_is_no_token)
    for sampling in ("temperature=0", "temperature=1"):
        texts, out, _ = run_generate(gen_cfg(trained_run, "prompt=x", "max_new_tokens=3", sampling, "device=cpu"))
        assert len(texts) == 1 and "<|fim" not in out


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_a_seed_torch_cannot_take_is_refused_before_any_work(seed, tmp_path):
    """torch seeds with an unsigned 64-bit integer: 2**64 failed with a traceback after the weights loaded, -1
    silently drew seed 2**64 - 1's stream. Refused first (the run dir here holds nothing)."""
    with pytest.raises(ConfigError, match=rf"^seed={seed} must be an integer in \[0, 2\*\*64 - 1\]$"):
        run_generate(gen_cfg(tmp_path, f"seed={seed}"))


def test_a_reader_of_stdout_that_goes_away_ends_the_command_quietly(trained_run):
    """`python -m llm.generate ... | head -c 20`: the write after the reader closed the pipe raised BrokenPipeError,
    a traceback and exit 1; now no traceback, exit 128 + SIGPIPE, as a pipeline's commands end."""
    cmd = [sys.executable, "-m", "llm.generate", f"run={trained_run}", "prompt=def main(", "max_new_tokens=20",
           "temperature=0", "num_samples=3", "device=cpu"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(5)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 128 + signal.SIGPIPE, err[-2000:]
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-2000:]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_stdout_that_takes_no_more_is_one_line(trained_run):
    """stdout on a full disk (``> /dev/full``): the write's OSError was a traceback; now one line naming stdout and
    the reason, exit 1."""
    cmd = [sys.executable, "-m", "llm.generate", f"run={trained_run}", "prompt=x", "max_new_tokens=2", "device=cpu"]
    with open("/dev/full", "w") as full:
        done = subprocess.run(cmd, cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1] == "Error: writing the text to stdout failed: No space left on device"
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.interpreter
def test_fused_prefill_chunks_longer_than_the_kernel_takes_match_the_full_forward():
    """attention=fused_rope with prefill_chunk above the fused kernel's query limit: a later chunk that long went to
    SDPA, which the static cache under fused_rope gave no mask, so it attended to its own later tokens and the empty
    slots; the decoder now splits it to what the kernel takes."""
    from rope import ATTENTION_MAX_QUERIES as FUSED_MAX_QUERIES

    torch.manual_seed(0)
    T = 2 * FUSED_MAX_QUERIES + 20
    cfg = GPTConfig(vocab_size=61, seq_len=T + 8, n_layer=1, n_head=2, n_embd=16, vocab_multiple=8)
    model = GPT(cfg, rope.build("torch", cfg.head_dim, cfg.seq_len)).eval()
    idx = torch.randint(0, 61, (1, T))
    with torch.no_grad():
        full, _ = model(idx)
    decoder = StaticDecoder(model, T + 2, attention="fused_rope", prefill_chunk=FUSED_MAX_QUERIES + 10)
    torch.testing.assert_close(decoder.prefill(idx), full[:, -1], rtol=0, atol=1e-5)
    assert decoder.cache.length == T


def test_ctrl_c_while_torch_loads_is_one_line(trained_run, monkeypatch, capsys):
    """A Ctrl-C in the seconds torch takes to import (the command's module imported it at its top) printed an
    import traceback; the command's imports now run under its own handler: one line, exit 130."""
    import types

    class Interrupting(types.ModuleType):
        def __getattr__(self, name):  # what the command imports from it; a module's own dunders (repr) stay
            if name.startswith("__"):
                raise AttributeError(name)
            raise KeyboardInterrupt

    monkeypatch.setitem(sys.modules, "llm.config_check", Interrupting("llm.config_check"))
    try:
        code, lines = run_module_main(monkeypatch, capsys, "llm.generate", [f"run={trained_run}", "prompt=x"])
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C escaped the command as a traceback")
    assert code == 130 and lines == ["Interrupted before decoding began: nothing was generated"], lines


def test_a_static_cache_masks_every_sdpa_step_under_fused_rope():
    """Under ``attention=fused_rope`` a step longer than the fused kernel takes attends through SDPA over the whole
    buffer: it needs the mask (its own later tokens and the empty slots hidden) as an ``sdpa`` cache's step does."""
    from llm.kv_cache import StaticKVCache
    from rope import ATTENTION_MAX_QUERIES as FUSED_MAX_QUERIES

    cache = StaticKVCache(n_layer=1, max_len=1024, attention="fused_rope")
    cache.allocate(1, 2, 16, torch.float32, torch.device("cpu"))
    cache.length = 10
    T = FUSED_MAX_QUERIES + 1
    assert not cache.fused(T)
    positions = cache.positions(T, torch.device("cpu"))
    assert cache.mask is not None and cache.mask.shape == (T, cache.capacity)
    hidden = torch.isinf(cache.mask)
    assert hidden[0, 11:].all() and not hidden[0, :11].any()  # the first new token sees the cache and itself
    assert positions[0] == 10 and not hidden[-1, :10 + T].any()


@pytest.mark.parametrize("text,said", [
    ("model: [oops\n", "is damaged or unreadable (while parsing a flow sequence)"),
    ("model: {n_layer: 1}\n", "holds no rope group (a run's config has model, rope, data, tokenizer, train)"),
    ("model: {seq_len: ${nowhere}}\n", "is damaged or unreadable"),
])
def test_a_damaged_run_config_is_one_line_naming_run(tmp_path, text, said):
    """The run's config.yaml is the user's file: one that does not read as a run's config is a ConfigError naming
    run= (the command's one line), for generation as for llm.eval_lengths, not YAML's or OmegaConf's traceback."""
    from llm.errors import ConfigError
    from llm.generation.load import open_run

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"")
    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(ConfigError) as refused:
        open_run(str(tmp_path))
    assert str(refused.value).startswith(f"run={tmp_path}: {tmp_path / 'config.yaml'} ") and said in str(refused.value)
    assert "\n" not in str(refused.value)
