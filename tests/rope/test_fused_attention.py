"""``rope.attention_with_rope``: the hybrid kernel against the RoPE module + ``F.scaled_dot_product_attention``.

Small shapes (the Triton interpreter on a CPU; the ``device`` fixture: CUDA where there is one): decode steps
and prompt chunks, GQA and MHA, every layout, partial ``rotary_dim``, YaRN's attention factor, ``rope=none``,
positions as an int, (T,) and (B, T), head dims that are not a power of two, the keys split over several
programs and not. ``test_fused_attention_gpu.py`` runs real sizes on a GPU. Bad arguments raise a
``RopeArgumentError`` naming the argument, before any launch.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import rope
from rope import _fused_attention_plan, fused_attention
from rope.reference import gather_tables, rotate_reference


def rotated_cache(r: rope.RotaryEmbedding, B: int, H_kv: int, L: int, D: int, dtype: torch.dtype,
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, H_kv, L, D) keys rotated by ``r`` at 0..L-1 (as a cache holds them) and values."""
    k = r(torch.randn(B, L, H_kv, D, device=device).to(dtype), positions=torch.arange(L, device=device))
    return k.transpose(1, 2).contiguous(), torch.randn(B, H_kv, L, D, device=device).to(dtype)


def position_rows(positions: torch.Tensor | int, B: int, T: int, device: torch.device) -> torch.Tensor:
    if isinstance(positions, int):
        positions = torch.arange(positions, positions + T, device=device)
    return positions.expand(B, T) if positions.dim() == 1 else positions


def reference(q, k_cache, v_cache, positions, r, dtype=None, scale=None):
    """The module's rotation of q (in ``dtype``, default q's) then SDPA over the keys each query sees."""
    B, T, H, D = q.shape
    pos = position_rows(positions, B, T, q.device)
    if dtype is None:
        qr = r(q, positions=pos)
    else:  # float64: the rotation itself in float64 from the module's (float32) tables
        q = q.to(dtype)
        if r.describe()["compute_dtype"] == "none":
            qr = q
        else:
            cos, sin = gather_tables(pos, T, r.cos, r.sin)
            qr = rotate_reference(q, cos, sin, r.layout, r.rotary_dim, dtype)
        k_cache, v_cache = k_cache.to(dtype), v_cache.to(dtype)
    L = k_cache.shape[2]
    mask = torch.arange(L, device=q.device)[None, None, :] <= pos[:, :, None]  # (B, T, L)
    y = F.scaled_dot_product_attention(qr.transpose(1, 2), k_cache, v_cache, attn_mask=mask[:, None], scale=scale,
                                       enable_gqa=True)
    return y.transpose(1, 2)


# (impl, build options, B, H, H_kv, T, L, D, positions kind)
CASES = {
    "decode-gqa-partial-split": ("torch", {}, 1, 4, 1, 1, 200, 16, "t"),
    "chunk-gqa-interleaved-rotary_dim-yarn": (
        "torch", {"variant": "full", "layout": "interleaved", "rotary_dim": 8,
                  "scaling": {"type": "yarn", "factor": 4.0, "original_max_seq_len": 32}}, 2, 4, 1, 7, 150, 16, "bt"),
    "chunk-mha-full-d48-int": ("torch", {"variant": "full"}, 1, 2, 2, 5, 90, 48, "int"),
    "chunk-gqa-128-rows": ("torch", {"variant": "full"}, 1, 8, 2, 40, 120, 16, "t"),
    "decode-none": ("none", {}, 2, 3, 3, 1, 70, 32, "bt"),
    "decode-triton_v4-keys": ("triton_v4", {"variant": "full"}, 1, 2, 1, 2, 64, 16, "int"),
}


def make_positions(kind: str, B: int, T: int, L: int, device: torch.device) -> torch.Tensor | int:
    """The last T positions of the cache (int start or (T,)), or per row (B, T) positions of shorter rows."""
    if kind == "int":
        return L - T
    if kind == "t":
        return torch.arange(L - T, L, device=device)
    starts = torch.tensor([L - T - 11 * b for b in range(B)], device=device)  # rows of different lengths
    return (starts[:, None] + torch.arange(T, device=device)).to(torch.int32)


@pytest.mark.parametrize("case", list(CASES))
def test_float32_equals_the_module_then_sdpa(case, device):
    impl, options, B, H, H_kv, T, L, D, kind = CASES[case]
    r = rope.build(impl, D, 256, **options).to(device)
    k_cache, v_cache = rotated_cache(r, B, H_kv, L, D, torch.float32, device)
    qkv = torch.randn(B, T, (H + 2 * H_kv) * D, device=device)
    q = qkv[..., :H * D].view(B, T, H, D)  # a strided view, as the model's fused projection gives it
    positions = make_positions(kind, B, T, L, device)
    out = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    assert out.shape == (B, T, H, D) and out.dtype == torch.float32
    torch.testing.assert_close(out, reference(q, k_cache, v_cache, positions, r), rtol=0, atol=1e-5)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("kind", ["int", "tensor"])
def test_cache_rows_past_the_last_position_never_reach_the_output(device, splits, kind):
    """A static cache holds garbage past the tokens written so far (here NaN): the keys and values a query does not
    see weigh nothing, whatever they hold, split or not, with positions known on the host (the splits cover the
    visible keys) or in a tensor (they cover the whole cache, most of it past the query)."""
    r = rope.build("torch", 16, 256).to(device)
    k_cache, v_cache = rotated_cache(r, 1, 2, 200, 16, torch.float32, device)
    k_cache[:, :, 100:], v_cache[:, :, 100:] = float("nan"), float("nan")
    q = torch.randn(1, 1, 4, 16, device=device)
    positions = 99 if kind == "int" else torch.tensor([99], device=device)
    with fused_attention.tuning(splits=splits, block_n=16):
        out = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    want = reference(q, k_cache[:, :, :100], v_cache[:, :, :100], 99, r)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("T", [1, 5])
def test_a_cache_viewed_from_a_wider_buffer_reads_only_its_head_dim(device, splits, T):
    """Keys and values of head dim 48 as views of a buffer 64 wide whose other columns hold NaN (the kernel's tiles
    are 64 wide): those columns never reach a score or an output, in the masked loop and the unmasked one."""
    B, H, H_kv, L, D = 1, 4, 2, 120, 48
    r = rope.build("torch", D, 256, variant="full").to(device)
    k, v = rotated_cache(r, B, H_kv, L, D, torch.float32, device)
    wide_k = torch.full((B, H_kv, L, 64), float("nan"), device=device)
    wide_v = torch.full((B, H_kv, L, 64), float("nan"), device=device)
    wide_k[..., :D], wide_v[..., :D] = k, v
    q = torch.randn(B, T, H, D, device=device)
    with fused_attention.tuning(splits=splits, block_n=16):
        out = rope.attention_with_rope(q, wide_k[..., :D], wide_v[..., :D], L - T, r)
    torch.testing.assert_close(out, reference(q, k, v, L - T, r), rtol=0, atol=1e-5)


@pytest.mark.parametrize("T", [1, 6])
def test_large_scores_keep_the_softmax_right(device, T):
    """Scores in the thousands (queries scaled up): the online softmax subtracts each row's scaled maximum, so no
    weight underflows to zero or overflows; the answer stays SDPA's."""
    r = rope.build("torch", 16, 256).to(device)
    k_cache, v_cache = rotated_cache(r, 1, 2, 150, 16, torch.float32, device)
    q = torch.randn(1, T, 4, 16, device=device) * 40
    out = rope.attention_with_rope(q, k_cache, v_cache, 150 - T, r)
    assert out.isfinite().all()
    torch.testing.assert_close(out, reference(q, k_cache, v_cache, 150 - T, r), rtol=0, atol=1e-4)


def test_queries_are_rotated_at_their_positions(device):
    """Rotating q at other positions (or not at all) changes the answer: the test above can tell."""
    r = rope.build("torch", 16, 256, variant="full").to(device)
    k_cache, v_cache = rotated_cache(r, 1, 1, 64, 16, torch.float32, device)
    q = torch.randn(1, 1, 2, 16, device=device) * 4
    right = reference(q, k_cache, v_cache, 63, r)
    torch.testing.assert_close(rope.attention_with_rope(q, k_cache, v_cache, 63, r), right, rtol=0, atol=1e-5)
    wrong = F.scaled_dot_product_attention(q.transpose(1, 2), k_cache, v_cache, enable_gqa=True).transpose(1, 2)
    assert (wrong - right).abs().max() > 1e-2


@pytest.mark.parametrize("splits", [None, 3, 16])
def test_splitting_the_keys_changes_nothing_but_rounding(device, splits):
    """Keys split over several programs and combined by a second launch give the unsplit answer, with the combine's
    programs holding several rows (64 a program, or 16 at 16 splits) of the 18 there are: the last program runs
    past the end."""
    r = rope.build("torch", 16, 256).to(device)
    k_cache, v_cache = rotated_cache(r, 1, 2, 250, 16, torch.float32, device)
    q = torch.randn(1, 3, 6, 16, device=device)
    with fused_attention.tuning(splits=splits, block_n=16):  # 16 key tiles: up to 16 splits
        settings = fused_attention.launch_settings(q, k_cache, v_cache, 247, r)
        split = rope.attention_with_rope(q, k_cache, v_cache, 247, r)
    assert settings["splits"] > 1 and settings["combine"] == "kernel"
    assert splits is None or settings["splits"] == splits
    with fused_attention.tuning(splits=1):
        assert fused_attention.launch_settings(q, k_cache, v_cache, 247, r)["combine"] == "none"
        whole = rope.attention_with_rope(q, k_cache, v_cache, 247, r)
    torch.testing.assert_close(split, whole, rtol=0, atol=1e-6)
    torch.testing.assert_close(whole, reference(q, k_cache, v_cache, 247, r), rtol=0, atol=1e-5)


# (D, H, H_kv, B, L, T, dtype, positions: "tensor" (every query after the cache, as bench.attention) or an int):
#   decode steps and prompt chunks at the benchmark's shapes, GQA and MHA, 16-bit and float32
LAUNCH_CASES = {
    "decode-gqa-d64-4k": (64, 32, 8, 1, 4097, 1, torch.bfloat16, "tensor"),
    "decode-gqa-d64-1k": (64, 32, 8, 1, 1025, 1, torch.bfloat16, "tensor"),
    "decode-gqa-d64-int": (64, 32, 8, 1, 4097, 1, torch.bfloat16, 2048),
    "decode-mha-d128-32k": (128, 32, 32, 1, 32769, 1, torch.bfloat16, "tensor"),
    "decode-gqa-d128-b8": (128, 32, 8, 8, 4097, 1, torch.bfloat16, "tensor"),
    "decode-gqa-d64-b32": (64, 32, 8, 32, 1025, 1, torch.bfloat16, "tensor"),
    "decode-mha-d128-b32-16k": (128, 32, 32, 32, 16385, 1, torch.bfloat16, "tensor"),  # many waves, no split
    "decode-mha-d64-b32-int": (64, 32, 32, 32, 8193, 1, torch.float16, 5000),
    "chunk-gqa-d128-4k": (128, 32, 8, 1, 4160, 64, torch.bfloat16, "tensor"),
    "chunk-mha-d128-4k": (128, 32, 32, 1, 4160, 64, torch.bfloat16, "tensor"),
    "chunk-mha-d128-fp32": (128, 32, 32, 1, 1088, 64, torch.float32, "tensor"),
    "chunk-gqa-d64-256": (64, 32, 8, 8, 16640, 256, torch.float16, "tensor"),
}


@pytest.mark.parametrize("case", list(LAUNCH_CASES))
def test_an_untuned_launch_covers_every_row_and_visible_key_once(device, monkeypatch, case):
    """The launch an untuned call makes on a 132-SM GPU (an H200), whatever its tile sizes: one program row per
    batch element and key-value head, row blocks that hold every query row of a head with none empty, key splits
    that cover the keys the last query sees with none empty, and a combine exactly where there are splits.
    Caches are broadcast views (nothing is launched)."""
    D, H, H_kv, B, L, T, dtype, positions = LAUNCH_CASES[case]
    monkeypatch.setattr(_fused_attention_plan, "_sm_count", lambda device: 132)  # where _Plan looks it up
    monkeypatch.setattr(fused_attention, "_PLANS", {})
    r = rope.build("torch", D, L).to(device)
    cache = torch.zeros(B, H_kv, 1, D, dtype=dtype, device=device).expand(B, H_kv, L, D)
    q = torch.zeros(B, T, H, D, dtype=dtype, device=device)
    if positions == "tensor":
        positions = torch.arange(L - T, L, device=device)
    visible = (L if not isinstance(positions, int) else positions + T)  # keys 0 .. the last query's position
    s = fused_attention.launch_settings(q, cache, cache, positions, r)
    (blocks, heads, splits), bm, bn, per = s["grid"], s["block_m"], s["block_n"], s["keys_per_split"]
    rows = T * (H // H_kv)
    assert heads == B * H_kv and s["programs"] == blocks * heads * splits
    assert bm >= 16 and bm & (bm - 1) == 0 and bn >= 16 and bn & (bn - 1) == 0, "tl.dot takes powers of two >= 16"
    assert (blocks - 1) * bm < rows <= blocks * bm, "every query row in a block, no block empty"
    assert per % bn == 0 and (splits - 1) * per < visible <= splits * per, "every key in a split, no split empty"
    assert s["splits"] == splits and s["combine"] == ("kernel" if splits > 1 else "none")


def test_a_decode_launch_fits_a_gpu_of_less_shared_memory(device, monkeypatch):
    """On a GPU whose programs get 99 KB of shared memory (an RTX 4090's), the key and value tiles a decode launch
    keeps in flight fit it (where an H200's 227 KB take a fourth pair: such a launch would not compile there)."""
    monkeypatch.setattr(_fused_attention_plan, "_sm_count", lambda device: 128)  # where _Plan looks them up
    monkeypatch.setattr(_fused_attention_plan, "_shared_memory", lambda device: 99 * 1024)
    monkeypatch.setattr(fused_attention, "_PLANS", {})
    D, L = 128, 4097
    r = rope.build("torch", D, L).to(device)
    cache = torch.zeros(1, 8, 1, D, dtype=torch.bfloat16, device=device).expand(1, 8, L, D)
    q = torch.zeros(1, 1, 32, D, dtype=torch.bfloat16, device=device)
    s = fused_attention.launch_settings(q, cache, cache, L - 1, r)
    assert s["splits"] > 1 and s["num_stages"] * 2 * s["block_n"] * D * 2 <= 99 * 1024, s["line"]


@pytest.mark.parametrize("forced", [
    {"block_m": 16, "block_n": 16, "splits": 3, "num_warps": 2, "num_stages": 1},  # 160 rows in 10 blocks
    {"block_m": 32, "block_n": 32, "splits": 2},
    {"block_n": 64, "splits": 1},
    {"block_n": 128, "num_stages": 2},  # the decode rule's tiles where batch and heads fill the GPU many times
])
def test_forced_launch_settings_give_the_same_answer(device, forced):
    r = rope.build("torch", 16, 256, variant="full").to(device)
    k_cache, v_cache = rotated_cache(r, 1, 2, 120, 16, torch.float32, device)
    q = torch.randn(1, 40, 8, 16, device=device)
    positions = torch.arange(80, 120, device=device)
    with fused_attention.tuning(**forced):
        settings = fused_attention.launch_settings(q, k_cache, v_cache, positions, r)
        out = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    assert all(settings[k] == v for k, v in forced.items())
    torch.testing.assert_close(out, reference(q, k_cache, v_cache, positions, r), rtol=0, atol=1e-5)


def test_tuning_blocks_nest_and_end():
    """An inner block keeps the outer block's fields it does not set; after the blocks the rule's launch is back."""
    with fused_attention.tuning(splits=4, block_n=32) as outer:
        with fused_attention.tuning(num_warps=8) as inner:
            assert inner == fused_attention.Tuning(splits=4, block_n=32, num_warps=8)
        assert outer == fused_attention._tuning_now() == fused_attention.Tuning(splits=4, block_n=32)
    assert fused_attention._tuning_now() == fused_attention.Tuning()


@pytest.mark.parametrize("fields, named", [({"block_n": 48}, "block_n"), ({"splits": 0}, "splits"),
                                           ({"block_m": 256}, "block_m"), ({"warps": 4}, "warps"),
                                           ({"num_stages": 2.0}, "num_stages"), ({"combine": "inline"}, "combine")])
def test_a_bad_tuning_setting_is_refused_naming_it(fields, named):
    with pytest.raises(ValueError, match=named):
        with fused_attention.tuning(**fields):
            pass


def test_bfloat16_within_sdpa_s_own_error(device):
    """bf16 against a float64 reference: within twice the error SDPA itself makes on the same bf16 inputs."""
    B, H, H_kv, T, L, D = 2, 4, 2, 3, 160, 32
    r = rope.build("torch", D, 256, variant="full").to(device)
    k_cache, v_cache = rotated_cache(r, B, H_kv, L, D, torch.bfloat16, device)
    q = torch.randn(B, T, H, D, device=device).to(torch.bfloat16)
    positions = torch.arange(L - T, L, device=device)
    exact = reference(q, k_cache, v_cache, positions, r, dtype=torch.float64)
    sdpa_err = (reference(q, k_cache, v_cache, positions, r).double() - exact).abs().max().item()
    out = rope.attention_with_rope(q, k_cache, v_cache, positions, r)
    assert out.dtype == torch.bfloat16
    err = (out.double() - exact).abs().max().item()
    assert 0 < sdpa_err and err <= 2 * sdpa_err, (err, sdpa_err)


def test_rotary_module_on_another_device_or_not_a_module_is_refused(device):
    r = rope.build("torch", 16, 64)
    k_cache, v_cache = rotated_cache(r, 1, 1, 8, 16, torch.float32, torch.device("cpu"))
    with pytest.raises(rope.RopeArgumentError, match="rotary must be the RoPE module") as e:
        rope.attention_with_rope(torch.zeros(1, 1, 1, 16), k_cache, v_cache, 7, "torch")
    assert e.value.argument == "rotary"
    if device.type == "cuda":
        with pytest.raises(rope.RopeArgumentError, match="rotary's cos/sin tables are on cpu"):
            rope.attention_with_rope(torch.zeros(1, 1, 1, 16, device=device), k_cache.to(device),
                                     v_cache.to(device), 7, r)


def test_rope_attention_layer_decodes_through_the_fused_kernel(device, monkeypatch):
    """RoPEAttention(attention="fused_rope"): a prompt, a chunk and single tokens fed with a cache give the outputs of
    the whole sequence, the cached calls through the fused kernel."""
    from rope import attention as layer_module

    calls = []
    monkeypatch.setattr(layer_module, "attention_with_rope",
                        lambda *a, **k: calls.append(a[0].shape) or rope.attention_with_rope(*a, **k))
    attn = rope.RoPEAttention(32, 2, dropout=0.0, impl="torch", max_seq_len=16, variant="full",
                              attention="fused_rope").to(device).eval()
    x = torch.randn(2, 9, 32, device=device)
    with torch.no_grad():
        whole = attn(x)
        cache = attn.new_cache()
        pieces = torch.cat([attn(x[:, :4], cache=cache), attn(x[:, 4:7], cache=cache), attn(x[:, 7:8], cache=cache),
                            attn(x[:, 8:], cache=cache)], dim=1)
    torch.testing.assert_close(pieces, whole, rtol=0, atol=1e-5)
    assert calls == [(2, 3, 2, 16), (2, 1, 2, 16), (2, 1, 2, 16)]
    with pytest.raises(ValueError, match="attention must be one of sdpa, fused_rope, got 'flash'"):
        rope.RoPEAttention(32, 2, impl="torch", attention="flash")


def test_rope_attention_layer_under_grad_or_after_a_failed_call_keeps_decoding_right(device, monkeypatch):
    """A cached call autograd records attends through SDPA (the fused kernel has no backward), with the whole
    sequence's output and a gradient; a cached call that fails leaves the cache as it was, so its retry is right."""
    from rope import attention as layer_module

    attn = rope.RoPEAttention(32, 2, dropout=0.0, impl="torch", max_seq_len=16, variant="full",
                              attention="fused_rope").to(device).eval()
    x = torch.randn(1, 8, 32, device=device)
    cache = attn.new_cache()
    with torch.no_grad():
        whole = attn(x)
        first = attn(x[:, :6], cache=cache)
    step = attn(x[:, 6:7], cache=cache)  # grad enabled, the layer's parameters require grad
    step.sum().backward()
    assert attn.qkv.weight.grad is not None
    with monkeypatch.context() as patch, torch.no_grad():
        patch.setattr(layer_module, "attention_with_rope", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("lost")))
        with pytest.raises(RuntimeError, match="lost"):
            attn(x[:, 7:8], cache=cache)
    assert cache.length == 7
    with torch.no_grad():
        last = attn(x[:, 7:8], cache=cache)
    torch.testing.assert_close(torch.cat([first, step.detach(), last], dim=1), whole, rtol=0, atol=1e-5)


def test_rope_attention_layer_with_a_cache_written_under_grad_and_frozen_weights_attends_by_sdpa(device):
    """A cache that a recorded call wrote into holds buffers of that graph: a later call with the layer frozen (grad
    mode on) is recorded through them, so it attends by SDPA, the whole sequence's output, instead of a refusal
    naming a k_cache the caller never passed."""
    attn = rope.RoPEAttention(32, 2, dropout=0.0, impl="torch", max_seq_len=16, attention="fused_rope").to(device)
    x = torch.randn(1, 5, 32, device=device)
    with torch.no_grad():
        whole = attn.eval()(x)
    cache = attn.new_cache()
    first = attn(x[:, :4], cache=cache)
    attn.requires_grad_(False)
    last = attn(x[:, 4:], cache=cache)
    torch.testing.assert_close(torch.cat([first, last], dim=1).detach(), whole, rtol=0, atol=1e-5)


# -- bad input: one line naming the argument, before any launch ----------------------------------------
@pytest.fixture
def no_launch(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was launched for input that should have been refused")

    monkeypatch.setattr(fused_attention, "_launch", refuse)


def _bad(device, **change):
    """Valid arguments (B 2, H 4, H_kv 2, T 3, L 40, D 16, table 64) with ``change`` applied; a callable change
    makes its tensor on the device (``Tensor.to`` of a strided view would hand the device a contiguous copy)."""
    r = rope.build("torch", 16, 64)
    args = {"q": torch.zeros(2, 3, 4, 16), "k_cache": torch.zeros(2, 2, 40, 16), "v_cache": torch.zeros(2, 2, 40, 16),
            "positions": 10, "rotary": r}
    args.update(change)
    return {k: v(device) if callable(v) and not isinstance(v, torch.nn.Module)
            else v.to(device) if isinstance(v, (torch.Tensor, torch.nn.Module)) else v for k, v in args.items()}


BAD = {
    "too many queries": ({"q": torch.zeros(2, 257, 4, 16)}, "q", r"q has 257 queries .* takes 1\.\.256"),
    "head dim": ({"q": torch.zeros(2, 3, 4, 8)}, "q", "q has head dim 8; rotary was built for head_dim=16"),
    "q dtype": ({"q": torch.zeros(2, 3, 4, 16, dtype=torch.float64)}, "q", "q must be float32, bfloat16 or float16"),
    "q last dim strided": ({"q": lambda d: torch.zeros(2, 3, 4, 32, device=d)[..., ::2]}, "q",
                           "q must be contiguous in its last dim"),
    "heads not dividing": ({"k_cache": torch.zeros(2, 3, 40, 16), "v_cache": torch.zeros(2, 3, 40, 16)}, "q",
                           r"q \(2, 3, 4, 16\) has H=4 heads \(dim 2\), not a multiple of the H_kv=3 of k_cache"),
    "cache layout": ({"k_cache": torch.zeros(2, 40, 2, 16)}, "k_cache", r"a \(B, L, H_kv, D\) cache\? pass "
                                                                         r"cache.transpose\(1, 2\)"),
    "cache layout, its L dividing q's heads": ({"q": torch.zeros(2, 1, 8, 16), "k_cache": torch.zeros(2, 4, 2, 16),
                                                "v_cache": torch.zeros(2, 4, 2, 16), "positions": 3}, "k_cache",
                                               r"L=2 keys, fewer than the queries' positions 3\.\.3 need, with 4 "
                                               r"heads: a \(B, L, H_kv, D\) cache\? pass cache.transpose\(1, 2\)"),
    "head dim over 256": ({"q": torch.zeros(2, 3, 4, 264), "k_cache": torch.zeros(2, 2, 40, 264),
                           "v_cache": torch.zeros(2, 2, 40, 264), "rotary": rope.build("torch", 264, 64)}, "q",
                          "q has head dim 264; attention_with_rope takes head dims up to 256, as flash-attention "
                          "kernels do; attend with SDPA over the rotated queries instead"),
    "cache dtype": ({"v_cache": torch.zeros(2, 2, 40, 16, dtype=torch.bfloat16)}, "v_cache",
                    "v_cache is torch.bfloat16 but q is torch.float32"),
    "cache last dim strided": ({"k_cache": lambda d: torch.zeros(2, 2, 40, 32, device=d)[..., ::2]}, "k_cache",
                               "k_cache must be contiguous in its last dim"),
    "v shape": ({"v_cache": torch.zeros(2, 2, 39, 16)}, "v_cache", "v_cache has shape .* they must match"),
    "positions past the table": ({"positions": 62}, "positions",
                                 r"positions=62 puts the queries at 62\.\.64; they must lie in \[0, 40\)"),
    "positions past the cache": ({"positions": torch.tensor([5, 6, 40])}, "positions",
                                 r"positions must lie in \[0, 40\) \(the cache's L=40\), got range \[5, 40\]"),
    "negative position": ({"positions": -1}, "positions", r"must lie in \[0, 40\)"),
    "table shorter than the cache": ({"rotary": rope.build("torch", 16, 12)}, "positions",
                                     r"must lie in \[0, 12\) \(rotary's max_seq_len=12\)"),
    "positions shape": ({"positions": torch.arange(4)}, "positions", r"positions must have shape \(T,\)=\(3,\)"),
    "positions dtype": ({"positions": torch.arange(3.0)}, "positions", "positions must be an integer tensor"),
    "positions uint32": ({"positions": torch.zeros(3, dtype=torch.uint32)}, "positions",
                         "positions must be an integer tensor of dtype torch.int64"),
    "positions type": ({"positions": 2.5}, "positions", "positions must be an int"),
    "q requires grad": ({"q": lambda d: torch.zeros(2, 3, 4, 16, device=d, requires_grad=True)}, "q",
                        "q requires grad, but attention_with_rope has no backward"),
    "grid past CUDA's limit": ({"q": lambda d: torch.zeros(1, 3, 4, 16, device=d).expand(32768, 3, 4, 16),
                                "k_cache": lambda d: torch.zeros(1, 2, 40, 16, device=d).expand(32768, 2, 40, 16),
                                "v_cache": lambda d: torch.zeros(1, 2, 40, 16, device=d).expand(32768, 2, 40, 16)},
                               "q", r"batch x k_cache's heads = 32768 x 2 is over 65535"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_names_the_argument_before_any_launch(case, no_launch, device):
    change, argument, message = BAD[case]
    if case == "positions past the cache" and device.type == "cuda":
        pytest.skip("positions in GPU memory are not range-checked (NaN rows instead: the GPU test)")
    with pytest.raises(rope.RopeArgumentError, match=message) as e:
        rope.attention_with_rope(**_bad(device, **change))
    assert e.value.argument == argument and "\n" not in str(e.value)
    assert isinstance(e.value, ValueError)


def test_a_signature_seen_on_one_device_is_checked_again_on_another(device):
    """The checks run once per signature (shapes, strides, dtypes, devices, the module, the scale): a signature
    that differs only in the caches' or the tables' device (meta here, which the CPU's plan must not cover) or in
    a scale of True (equal to 1, refused) is checked, and refused, as a first call would be."""
    args = _bad(device)
    rope.attention_with_rope(**args, scale=1)
    meta = {"k_cache": args["k_cache"].to("meta"), "v_cache": args["v_cache"].to("meta")}
    with pytest.raises(rope.RopeArgumentError, match="k_cache is on meta") as e:
        rope.attention_with_rope(**{**args, **meta}, scale=1)
    assert e.value.argument == "k_cache"
    with pytest.raises(rope.RopeArgumentError, match="scale must be a finite number > 0") as e:
        rope.attention_with_rope(**args, scale=True)
    args["rotary"].to("meta")
    with pytest.raises(rope.RopeArgumentError, match="rotary's cos/sin tables are on meta") as e:
        rope.attention_with_rope(**args, scale=1)
    assert e.value.argument == "rotary"


def test_heads_wider_than_the_kernel_takes_are_refused_before_a_decode_step(device):
    """A head over 256 elements (its float32 chunk's compile ran for minutes; the call refuses it, BAD above): a
    layer built to attend through the fused kernel is refused when built, not at its first cached call."""
    assert rope.ATTENTION_MAX_HEAD_DIM == 256
    with pytest.raises(ValueError, match=r"heads of d_model/n_heads=264; the fused kernel takes heads up to 256"):
        rope.RoPEAttention(528, 2, impl="torch", attention="fused_rope")
    rope.RoPEAttention(528, 2, impl="torch")  # SDPA takes any


def test_bad_scale_is_refused(no_launch, device):
    for scale in (0.0, -1.0, float("nan"), True):
        with pytest.raises(rope.RopeArgumentError, match="scale must be a finite number > 0") as e:
            rope.attention_with_rope(**_bad(device), scale=scale)
        assert e.value.argument == "scale"
