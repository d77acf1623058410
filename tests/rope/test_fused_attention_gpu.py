"""``rope.attention_with_rope`` on a CUDA GPU at real sizes: against the RoPE module + SDPA (float32 within 1e-5,
bf16/fp16 within twice SDPA's own error against float64), decode steps and 64-query chunks over caches of thousands
of tokens, GQA and MHA, every layout and scaling, per-row positions, NaN rows for positions outside the cache (a
device tensor is not range-checked), a CUDA graph replay, split and unsplit keys, forced launch settings, and offsets
past 2^31 elements. Marked ``gpu`` (skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import rope
from rope import _fused_attention_plan, fused_attention

from .test_fused_attention import position_rows, reference, rotated_cache

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_tf32")]
CUDA = torch.device("cuda")


# (dtype, D, H, H_kv, B, cached, T, build options)
CASES = {
    "bf16-decode-gqa-d128": (torch.bfloat16, 128, 32, 8, 2, 4096, 1, {}),
    "bf16-decode-mha-d64-b1": (torch.bfloat16, 64, 16, 16, 1, 16384, 1, {"variant": "full"}),
    "bf16-chunk64-gqa-d128": (torch.bfloat16, 128, 32, 8, 1, 4096, 64, {"variant": "full"}),
    "bf16-chunk64-mha-d64": (torch.bfloat16, 64, 8, 8, 4, 2048, 64, {}),
    "fp16-decode-interleaved-rotary_dim-yarn": (
        torch.float16, 128, 16, 4, 3, 3000, 1, {"variant": "full", "layout": "interleaved", "rotary_dim": 64,
                                                "scaling": {"type": "yarn", "factor": 4.0,
                                                            "original_max_seq_len": 1024}}),
    "bf16-chunk256-d96": (torch.bfloat16, 96, 8, 2, 2, 1000, 256, {"variant": "full"}),
}


def captured(call):
    """``call`` captured in a CUDA graph after a warm-up on a side stream (PyTorch's recipe): the graph and the
    output tensor its replays write."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    return graph, out


def sdpa_16_bit(q, k_cache, v_cache, positions, r):
    """The separate path as a GPU runs it with a mask: the module's rotation, then SDPA's memory-efficient kernel
    (the one that takes a mask) on the 16-bit inputs, the key-value heads repeated for it."""
    B, T, H, D = q.shape
    pos = position_rows(positions, B, T, q.device)
    G = H // k_cache.shape[1]
    mask = torch.arange(k_cache.shape[2], device=q.device)[None, None, None, :] <= pos[:, None, :, None]
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        y = F.scaled_dot_product_attention(r(q, positions=pos).transpose(1, 2), k_cache.repeat_interleave(G, 1),
                                           v_cache.repeat_interleave(G, 1), attn_mask=mask)
    return y.transpose(1, 2)


@pytest.mark.parametrize("case", list(CASES))
def test_16_bit_within_twice_sdpa_s_own_error(case):
    dtype, D, H, H_kv, B, cached, T, options = CASES[case]
    L = cached + T
    r = rope.build("triton_v4", D, L + 16, **options).to(CUDA)
    k_cache, v_cache = rotated_cache(r, B, H_kv, L, D, dtype, CUDA)
    q = torch.randn(B, T, H, D, device=CUDA).to(dtype)
    positions = torch.arange(cached, L, device=CUDA)
    exact = reference(q, k_cache, v_cache, positions, r, dtype=torch.float64)
    sdpa_err = (sdpa_16_bit(q, k_cache, v_cache, positions, r).double() - exact).abs().max().item()
    out = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    assert out.dtype == dtype and out.shape == (B, T, H, D)
    err = (out.double() - exact).abs().max().item()
    assert 0 < sdpa_err and err <= 2 * sdpa_err, (err, sdpa_err)


@pytest.mark.parametrize("T", [1, 64])
@pytest.mark.parametrize("impl", ["triton_v4", "torch", "none"])
def test_float32_within_1e_5_of_the_module_then_sdpa(impl, T):
    """Three calls of one signature: the first through Triton's launch, the later ones through the compiled
    kernel's launcher directly (on new values in the same tensors)."""
    B, H, H_kv, D, cached = 2, 16, 4, 128, 8192
    r = rope.build(impl, D, cached + T).to(CUDA)
    k_cache, v_cache = rotated_cache(r, B, H_kv, cached + T, D, torch.float32, CUDA)
    qkv = torch.randn(B, T, (H + 2 * H_kv) * D, device=CUDA)
    q = qkv[..., :H * D].view(B, T, H, D)
    for _ in range(3):
        out = rope.attention_with_rope(q, k_cache, v_cache, cached, r)
        torch.testing.assert_close(out, reference(q, k_cache, v_cache, cached, r), rtol=0, atol=1e-5)
        for x in (qkv, k_cache, v_cache):
            x.normal_()


def test_per_row_positions_and_nan_rows_outside_the_cache():
    """(B, T) positions: rows of different lengths in one cache. A device tensor is not range-checked (that would
    wait for the GPU): a position past the cache gives a NaN row, the others stay right."""
    B, H, H_kv, D, L, T = 3, 8, 2, 64, 3000, 4
    r = rope.build("triton_v4", D, 4096).to(CUDA)
    k_cache, v_cache = rotated_cache(r, B, H_kv, L, D, torch.float32, CUDA)
    q = torch.randn(B, T, H, D, device=CUDA)
    positions = torch.tensor([[10, 11, 12, 13], [1000, 1001, 1002, 1003], [2996, 2997, 2998, 2999]], device=CUDA)
    torch.testing.assert_close(rope.attention_with_rope(q, k_cache, v_cache, positions, r),
                               reference(q, k_cache, v_cache, positions, r), rtol=0, atol=1e-5)
    positions[1, 2] = L  # past the cache (still inside the table)
    out = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    assert out[1, 2].isnan().all() and not out[1, [0, 1, 3]].isnan().any() and not out[[0, 2]].isnan().any()


def test_a_captured_call_replays_at_the_positions_in_its_buffer():
    """Captured in a CUDA graph with its positions in a device buffer, the call follows the buffer's values."""
    B, H, H_kv, D, L = 2, 16, 4, 128, 2048
    r = rope.build("triton_v4", D, L).to(CUDA)
    k_cache, v_cache = rotated_cache(r, B, H_kv, L, D, torch.bfloat16, CUDA)
    q = torch.randn(B, 1, H, D, device=CUDA).to(torch.bfloat16)
    positions = torch.tensor([100], device=CUDA)
    graph, out = captured(lambda: rope.attention_with_rope(q, k_cache, v_cache, positions, r))
    for p in (100, 1500, L - 1):
        positions.fill_(p)
        graph.replay()
        eager = rope.attention_with_rope(q, k_cache, v_cache, torch.tensor([p], device=CUDA), r)
        torch.testing.assert_close(out, eager, rtol=0, atol=0)


def test_splitting_the_keys_changes_nothing_but_rounding():
    B, H, H_kv, D, L = 1, 32, 8, 128, 16384
    r = rope.build("triton_v4", D, L).to(CUDA)
    k_cache, v_cache = rotated_cache(r, B, H_kv, L, D, torch.float32, CUDA)
    q = torch.randn(B, 1, H, D, device=CUDA)
    split = rope.attention_with_rope(q, k_cache, v_cache, L - 1, r)
    assert fused_attention.launch_settings(q, k_cache, v_cache, L - 1, r)["splits"] > 1
    with fused_attention.tuning(splits=1):
        whole = rope.attention_with_rope(q, k_cache, v_cache, L - 1, r)
    torch.testing.assert_close(split, whole, rtol=0, atol=1e-5)


@pytest.mark.parametrize("forced", [{"block_n": 64}, {"num_warps": 8}, {"splits": 64, "block_n": 64},
                                    {"splits": 1, "num_stages": 4}])
def test_forced_launch_settings_give_the_rule_s_answer(forced):
    """The settings bench.attention --candidates times compile on the GPU and compute what the rule's launch does
    (within rounding: another split count sums the keys in another order)."""
    B, H, H_kv, D, L = 2, 32, 8, 64, 8192
    r = rope.build("triton_v4", D, L).to(CUDA)
    k_cache, v_cache = rotated_cache(r, B, H_kv, L, D, torch.float32, CUDA)
    q = torch.randn(B, 1, H, D, device=CUDA)
    positions = torch.tensor([[L - 1], [L // 2]], device=CUDA)
    expected = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    with fused_attention.tuning(**forced):
        settings = fused_attention.launch_settings(q, k_cache, v_cache, positions, r)
        out = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    assert all(settings[k] == v for k, v in forced.items())
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)


def test_offsets_past_2_31_elements():
    """A cache whose batch rows lie 2^31 elements apart (a long cache of a large batch): the kernel's address
    arithmetic is 64-bit."""
    H_kv, D, L = 2, 64, 256
    stride_b = 2**31
    r = rope.build("triton_v4", D, L).to(CUDA)
    caches = []
    for _ in range(2):
        storage = torch.zeros(stride_b + H_kv * L * D, dtype=torch.bfloat16, device=CUDA)
        cache = storage.as_strided((2, H_kv, L, D), (stride_b, L * D, D, 1))
        cache.copy_(torch.randn(2, H_kv, L, D, device=CUDA).to(torch.bfloat16))
        caches.append(cache)
    q = torch.randn(2, 1, 4, D, device=CUDA).to(torch.bfloat16)
    out = rope.attention_with_rope(q, caches[0], caches[1], L - 1, r)
    compact = rope.attention_with_rope(q, caches[0].contiguous(), caches[1].contiguous(), L - 1, r)
    torch.testing.assert_close(out, compact, rtol=0, atol=0)
    qr = r(q, positions=torch.tensor([L - 1], device=CUDA)).transpose(1, 2)
    ref = F.scaled_dot_product_attention(qr.float(), caches[0].float(), caches[1].float(), enable_gqa=True)
    assert (out.float() - ref.transpose(1, 2)).abs().max() < 2e-2


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


# Chunks of several queries whose grouped rows fill the Hopper kernel's two warpgroups, in batches whose programs
# fill at least half of an H200 (66 of 132 SMs): (dtype, D, H, H_kv, B, cached, T, per-row positions, options)
HOPPER_CASES = {
    "bf16-d128-gqa": (torch.bfloat16, 128, 32, 8, 5, 4096, 64, False, {}),
    "bf16-d128-partial": (torch.bfloat16, 128, 32, 8, 5, 1000, 64, False, {"variant": "partial"}),
    "fp16-d64-partial-block-interleaved-yarn": (
        torch.float16, 64, 16, 4, 9, 3000, 37, True, {"variant": "full", "layout": "interleaved", "rotary_dim": 32,
                                                     "scaling": {"type": "yarn", "factor": 4.0,
                                                                 "original_max_seq_len": 1024}}),
    "bf16-d64-mha-t256-short-cache": (torch.bfloat16, 64, 16, 16, 3, 40, 256, False, {}),
}


@pytest.mark.parametrize("case", list(HOPPER_CASES))
def test_the_hopper_kernel_within_twice_sdpa_s_own_error(case):
    """The warp-specialised kernel (on a Hopper GPU; the tl kernel elsewhere) at chunks whose rows do and do not
    fill its blocks, per-row positions, every layout and a cache shorter than a key tile."""
    dtype, D, H, H_kv, B, cached, T, per_row, options = HOPPER_CASES[case]
    L = cached + T
    r = rope.build("triton_v4", D, L + 16, **options).to(CUDA)
    k_cache, v_cache = rotated_cache(r, B, H_kv, L, D, dtype, CUDA)
    q = torch.randn(B, T, H, D, device=CUDA).to(dtype)
    positions = torch.arange(cached, L, device=CUDA)
    if per_row:  # each batch row's queries end at another length of the cache
        positions = torch.stack([positions - 7 * b for b in range(B)])
    if _hopper():
        assert fused_attention.launch_settings(q, k_cache, v_cache, positions, r)["kernel"] == "hopper"
    exact = reference(q, k_cache, v_cache, positions, r, dtype=torch.float64)
    sdpa_err = (sdpa_16_bit(q, k_cache, v_cache, positions, r).double() - exact).abs().max().item()
    out = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    err = (out.double() - exact).abs().max().item()
    assert out.dtype == dtype and 0 < sdpa_err and err <= 2 * sdpa_err, (err, sdpa_err)


def test_the_hopper_kernel_with_queries_at_the_start_of_a_long_cache():
    """Queries at positions 0..63 of a 4k cache see one key tile; the loader issues the ring's first tiles before
    it knows that, and the program must still end right (the tiles no row sees landed, none of them read)."""
    B, H, H_kv, D, L, T = 8, 32, 8, 128, 4096, 64
    r = rope.build("triton_v4", D, L).to(CUDA)
    k_cache, v_cache = rotated_cache(r, B, H_kv, L, D, torch.bfloat16, CUDA)
    q = torch.randn(B, T, H, D, device=CUDA).to(torch.bfloat16)
    positions = torch.arange(T, device=CUDA)
    if _hopper():
        assert fused_attention.launch_settings(q, k_cache, v_cache, positions, r)["kernel"] == "hopper"
    exact = reference(q, k_cache, v_cache, positions, r, dtype=torch.float64)
    sdpa_err = (sdpa_16_bit(q, k_cache, v_cache, positions, r).double() - exact).abs().max().item()
    for _ in range(3):
        out = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
        assert (out.double() - exact).abs().max().item() <= 2 * sdpa_err
    torch.cuda.synchronize()


def test_the_hopper_kernel_reads_no_key_past_the_cache_s_end():
    """A slice of a longer buffer (a static cache) whose keys and values past L are NaN: tiles that run past L
    read zeros (TMA's bounds), not the buffer's NaNs; a position past L gives a NaN row, the others stay right;
    an unaligned cache base goes to the tl kernel with the same answer."""
    B, H, H_kv, D, L, L_max, T = 5, 32, 8, 128, 1000, 1500, 64
    r = rope.build("triton_v4", D, L_max).to(CUDA)
    k, v = rotated_cache(r, B, H_kv, L, D, torch.bfloat16, CUDA)
    buffers = [torch.full((B, H_kv, L_max, D), float("nan"), device=CUDA, dtype=torch.bfloat16) for _ in range(2)]
    for buf, x in zip(buffers, (k, v), strict=True):
        buf[:, :, :L] = x
    k_cache, v_cache = (buf[:, :, :L] for buf in buffers)
    q = torch.randn(B, T, H, D, device=CUDA).to(torch.bfloat16)
    positions = torch.arange(L - T, L, device=CUDA).repeat(B, 1)
    out = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    torch.testing.assert_close(out, rope.attention_with_rope(q, k, v, positions, r), rtol=0, atol=0)
    exact = reference(q, k, v, positions, r, dtype=torch.float64)
    assert (out.double() - exact).abs().max() <= 2 * (sdpa_16_bit(q, k, v, positions, r).double() - exact).abs().max()
    positions[1, 5] = L
    nan_row = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    assert nan_row[1, 5].isnan().all() and not nan_row[1, 6:].isnan().any() and not nan_row[0].isnan().any()
    store = [torch.empty(B * H_kv * L * D + 1, device=CUDA, dtype=torch.bfloat16) for _ in range(2)]
    shifted = [s[1:].view(B, H_kv, L, D).copy_(x) for s, x in zip(store, (k, v), strict=True)]
    positions[1, 5] = L - T + 5
    assert fused_attention.launch_settings(q, *shifted, positions, r)["kernel"] == "tl"
    torch.testing.assert_close(rope.attention_with_rope(q, *shifted, positions, r), out, rtol=0, atol=2e-2)


def test_the_hopper_kernel_against_the_tl_kernel_and_in_a_graph():
    """The same call on both kernels agrees within rounding; captured in a CUDA graph it follows its position
    buffer."""
    B, H, H_kv, D, L, T = 8, 32, 8, 128, 4096, 64
    r = rope.build("triton_v4", D, L).to(CUDA)
    k_cache, v_cache = rotated_cache(r, B, H_kv, L, D, torch.bfloat16, CUDA)
    q = torch.randn(B, T, H, D, device=CUDA).to(torch.bfloat16)
    positions = torch.arange(L - T, L, device=CUDA)
    out = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    with fused_attention.tuning(warp_specialized=False):
        assert fused_attention.launch_settings(q, k_cache, v_cache, positions, r)["kernel"] == "tl"
        tl_out = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    torch.testing.assert_close(out, tl_out, rtol=0, atol=2e-2)
    graph, replayed = captured(lambda: rope.attention_with_rope(q, k_cache, v_cache, positions, r))
    for end in (1000, L):
        positions.copy_(torch.arange(end - T, end, device=CUDA))
        graph.replay()
        torch.testing.assert_close(replayed, rope.attention_with_rope(q, k_cache, v_cache, positions.clone(), r),
                                   rtol=0, atol=0)


@pytest.mark.skipif(not _hopper(), reason="the Hopper kernel runs on compute capability 9.x")
def test_a_triton_that_cannot_compile_the_hopper_kernel_falls_back_to_tl(monkeypatch):
    """Gluon is experimental: where this Triton's Gluon fails to compile the kernel, one warning says so and the
    tl kernel answers, then and for every later call."""
    import types

    B, H, H_kv, D, L, T = 8, 32, 8, 128, 2048, 64
    r = rope.build("triton_v4", D, L).to(CUDA)
    k_cache, v_cache = rotated_cache(r, B, H_kv, L, D, torch.bfloat16, CUDA)
    q = torch.randn(B, T, H, D, device=CUDA).to(torch.bfloat16)
    with fused_attention.tuning(warp_specialized=False):
        expected = rope.attention_with_rope(q, k_cache, v_cache, L - T, r)
    real = fused_attention._hopper_kernels()

    class Uncompilable:
        def __getitem__(self, grid):
            def launch(*args, **options):
                raise AttributeError("module 'gluon' has no attribute 'warp_specialize'")
            return launch

    broken = types.SimpleNamespace(attend_ws_kernel=Uncompilable(), cache_descriptor=real.cache_descriptor,
                                   MAX_REGS=real.MAX_REGS, COMPILE_ERRORS=real.COMPILE_ERRORS)
    monkeypatch.setattr(fused_attention, "_hopper_kernels", lambda: broken)  # the launch's
    monkeypatch.setattr(_fused_attention_plan, "_hopper_kernels", lambda: broken)  # the plan's (whether it applies)
    monkeypatch.setattr(fused_attention, "_PLANS", {})
    monkeypatch.setattr(fused_attention, "_HOPPER_FAILED", [])
    with pytest.warns(RuntimeWarning, match="the Hopper kernel does not compile"):
        out = rope.attention_with_rope(q, k_cache, v_cache, L - T, r)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert fused_attention.launch_settings(q, k_cache, v_cache, L - T, r)["kernel"] == "tl"
