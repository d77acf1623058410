"""``rope.RoPEAttention`` and its ``KVCache`` used wrongly, as a model of one's own might: each mistake is refused in
one line naming what the caller passed, before any work, instead of a wrong answer or torch's error from deep inside
the layer. And two options the layer takes as ``rope.build`` does: ``scaling`` and ``n_kv_heads``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import rope
from rope import attention as layer_module
from rope.attention import KVCache

SHARED = ("^cache: this KVCache holds the keys of another RoPEAttention layer; make one per layer with "
          r"attn\.new_cache\(\)$")


class Block(nn.Module):
    def __init__(self, **kwargs) -> None:
        super().__init__()
        self.attn = rope.RoPEAttention(32, 4, dropout=0.0, impl="torch", max_seq_len=16, **kwargs)

    def forward(self, x: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        return x + self.attn(x, cache=cache)


class Model(nn.Module):
    """A user's model: blocks with a RoPEAttention each, one cache per layer passed in a list."""

    def __init__(self, n_layers: int = 2, **kwargs) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(**kwargs) for _ in range(n_layers))

    def forward(self, x: torch.Tensor, caches: list[KVCache] | None = None) -> torch.Tensor:
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return x

    def new_caches(self) -> list[KVCache]:
        return [block.attn.new_cache() for block in self.blocks]


def _projections(attn: rope.RoPEAttention) -> tuple[list[int], object]:
    """A list that grows with every projection ``attn`` computes (its first work), and the hook to remove."""
    projected: list[int] = []
    return projected, attn.qkv.register_forward_hook(lambda *args: projected.append(1))


# -- one cache per layer --------------------------------------------------------------------------------
def test_one_cache_passed_to_every_layer_is_refused():
    """The model's two layers given the first layer's cache: it used to take both layers' keys (length 12 after a
    6-token call) and answer wrongly; the second layer now refuses it before its projection."""
    model = Model().eval()
    x = torch.randn(1, 6, 32)
    c = model.blocks[0].attn.new_cache()
    projected, hook = _projections(model.blocks[1].attn)
    with torch.no_grad(), pytest.raises(ValueError, match=SHARED):
        model(x, [c, c])
    hook.remove()
    assert projected == [] and c.length == 6  # the first layer's 6 positions, nothing of the second's
    with torch.no_grad():  # what the message says works: one cache per layer, as the whole sequence
        caches = model.new_caches()
        pieces = torch.cat([model(x[:, :4], caches), model(x[:, 4:5], caches), model(x[:, 5:], caches)], dim=1)
        torch.testing.assert_close(pieces, model(x), rtol=0, atol=1e-5)


def test_a_cache_made_directly_belongs_to_its_first_user_through_reset():
    a, b = Model().eval().blocks[0].attn, Model().eval().blocks[0].attn
    cache = KVCache(16)
    x = torch.randn(1, 3, 32)
    with torch.no_grad():
        a(x, cache=cache)
        with pytest.raises(ValueError, match=SHARED):
            b(x, cache=cache)
        cache.reset()
        with pytest.raises(ValueError, match=SHARED):  # reset starts a new sequence of the same layer
            b(x, cache=cache)
        assert cache.length == 0
        a(x, cache=cache)
        assert cache.length == 3


def test_a_failed_first_call_leaves_a_direct_cache_unowned(monkeypatch):
    a, b = Model().eval().blocks[0].attn, Model().eval().blocks[0].attn
    cache = KVCache(16)
    x = torch.randn(1, 3, 32)
    with monkeypatch.context() as patch, torch.no_grad():
        patch.setattr(a.out, "forward", lambda y: (_ for _ in ()).throw(RuntimeError("lost")))
        with pytest.raises(RuntimeError, match="lost"):
            a(x, cache=cache)
    other_heads = rope.RoPEAttention(32, 2, dropout=0.0, impl="torch", max_seq_len=16).eval()
    projected, hook = _projections(other_heads)
    with torch.no_grad(), pytest.raises(ValueError, match=r"^the cache holds keys of 4 heads of size 8, got 2 heads "
                                                          r"of size 16: "):
        other_heads(x, cache=cache)  # its buffers are shaped for the failed call's heads: refused before any work
    hook.remove()
    assert projected == []
    with torch.no_grad():
        b(x, cache=cache)  # the call that failed left the cache as it was: nobody's
    assert cache.length == 3


# -- a cache keeps its layer's heads --------------------------------------------------------------------
def test_a_cache_of_other_heads_or_head_dim_is_refused_in_one_line():
    """Keys of another head count or head size used to reach the buffer write: torch's "The expanded size of the
    tensor (8) must match ..."; now one line saying what the cache holds and what came, nothing written."""
    cache = KVCache(8)
    cache.append(torch.randn(1, 2, 4, 16), torch.randn(1, 2, 4, 16))
    keys = cache.keys.clone()
    for H, D in ((2, 16), (4, 8), (2, 32)):
        pattern = (f"^the cache holds keys of 4 heads of size 16, got {H} heads of size {D}: a cache holds one "
                   r"layer's keys; make one per layer with attn\.new_cache\(\)$")
        with pytest.raises(ValueError, match=pattern):
            cache.append(torch.randn(1, 1, H, D), torch.randn(1, 1, H, D))
        with pytest.raises(ValueError, match=pattern):
            cache.check(1, 1, heads=H, head_dim=D)
    assert cache.length == 2 and torch.equal(cache.keys[:, :, :2], keys[:, :, :2])


# -- the cache argument ----------------------------------------------------------------------------------
@pytest.mark.parametrize("given, name", [([], "list"), ({}, "dict"), ("cache", "str")])
def test_a_cache_that_is_not_a_kv_cache_is_refused_naming_cache(given, name):
    attn = Model().eval().blocks[0].attn
    projected, hook = _projections(attn)
    with pytest.raises(TypeError, match=rf"^cache must be a KVCache \(attn\.new_cache\(\), one per layer\) or None, "
                                        rf"got {name}$"):
        attn(torch.randn(1, 3, 32), cache=given)
    hook.remove()
    assert projected == []


# -- attention="fused_rope" where its kernel cannot run ------------------------------------------------------
FUSED_NEEDS = (r'^attention="fused_rope" needs a CUDA GPU \(or Triton\'s interpreter on the CPU: TRITON_INTERPRET=1 '
               r'set before triton is imported\), got x on cpu; attention="sdpa" runs anywhere$')


def test_fused_rope_on_a_cpu_without_the_interpreter_says_so_at_the_first_cached_call(monkeypatch):
    """It used to build, run the prompt, then fail at the first step naming ``q``, which the caller never passed."""
    attn = rope.RoPEAttention(32, 4, dropout=0.0, impl="torch", max_seq_len=16, attention="fused_rope").eval()
    x = torch.randn(1, 5, 32)
    with torch.no_grad():
        prompt_cache = attn.new_cache()
        # a prompt taken while the kernel could run (it attends by SDPA), then as in a process without the interpreter
        monkeypatch.setattr("rope._launch.INTERPRETING", True)
        attn(x[:, :4], cache=prompt_cache)
        monkeypatch.setattr("rope._launch.INTERPRETING", False)  # what rope._launch.triton_runs_on() reads
        attn(x)  # without a cache the layer is SDPA's anywhere
        projected, hook = _projections(attn)
        cache = attn.new_cache()
        for c, piece in ((cache, x[:, :4]), (prompt_cache, x[:, 4:])):
            with pytest.raises(ValueError, match=FUSED_NEEDS):
                attn(piece, cache=c)
        hook.remove()
    assert projected == [] and cache.length == 0 and prompt_cache.length == 4


# -- torch.compile of a model with attention="fused_rope" --------------------------------------------------
def test_a_compiled_model_decodes_through_the_fused_kernel_as_eager(device, monkeypatch):
    """Dynamo used to trace into attention_with_rope's launch code and fail (under the interpreter: KeyError of
    torch.uint64); the call is now a graph break, the rest compiled, the decode the eager one."""
    if not layer_module.triton_runs_on(device):
        pytest.skip("the fused kernel runs on the CPU only under TRITON_INTERPRET=1")
    calls = []
    monkeypatch.setattr(layer_module, "attention_with_rope",
                        lambda *a, **k: calls.append(a[0].shape) or rope.attention_with_rope(*a, **k))
    model = Model(attention="fused_rope").to(device).eval()
    x = torch.randn(1, 6, 32, device=device)

    def decode(m: nn.Module) -> torch.Tensor:
        caches = model.new_caches()
        return torch.cat([m(x[:, :4], caches)] + [m(x[:, t:t + 1], caches) for t in (4, 5)], dim=1)

    try:
        with torch.no_grad():
            eager = decode(model)
            compiled = decode(torch.compile(model, backend="aot_eager"))
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(compiled, eager, rtol=0, atol=1e-6)
    assert len(calls) == 8  # 2 steps x 2 layers, eager and compiled: the fused kernel's


# -- scaling= and n_kv_heads= ----------------------------------------------------------------------------------
YARN = {"type": "yarn", "factor": 4.0, "original_max_seq_len": 8}


def test_scaling_builds_the_rotary_rope_build_builds():
    attn = rope.RoPEAttention(32, 4, dropout=0.0, impl="torch", max_seq_len=32, scaling=YARN).eval()
    want = rope.build("torch", 8, 32, scaling=YARN)
    assert attn.rotary.scaling == want.scaling and attn.rotary.scaling["type"] == "yarn"
    assert torch.equal(attn.rotary.cos, want.cos) and torch.equal(attn.rotary.sin, want.sin)
    assert "scaling=" in repr(attn)
    x = torch.randn(1, 20, 32)
    with torch.no_grad():
        cache = attn.new_cache()
        pieces = torch.cat([attn(x[:, :12], cache=cache), attn(x[:, 12:13], cache=cache), attn(x[:, 13:], cache=cache)],
                           dim=1)
        torch.testing.assert_close(pieces, attn(x), rtol=0, atol=1e-5)


@pytest.mark.parametrize("scaling", [{"type": "yarn"}, {"type": "nope", "factor": 2.0}, {"factor": 2.0},
                                     {"type": "linear", "factor": -1.0}])
def test_a_bad_scaling_is_rope_build_s_one_line(scaling):
    with pytest.raises(rope.RopeArgumentError) as want:
        rope.build("torch", 8, 16, scaling=scaling)
    with pytest.raises(rope.RopeArgumentError) as got:
        rope.RoPEAttention(32, 4, impl="torch", max_seq_len=16, scaling=scaling)
    assert str(got.value) == str(want.value) and got.value.argument == want.value.argument
    assert got.value.argument.startswith("scaling") and len(str(got.value).splitlines()) == 1


@pytest.mark.parametrize("bad", [{"impl": "nope"}, {"max_seq_len": 0}, {"theta": -1.0}, {"variant": "half"},
                                 {"d_model": 24}])
def test_with_scaling_the_layer_s_other_arguments_keep_their_names(bad):
    """The layer's own argument at fault: the error it raises without scaling (naming impl, max_seq_len, theta,
    d_model/n_heads as the layer does), not the registry's name or the scaling's."""
    kwargs = {"d_model": 32, "n_heads": 4, "impl": "torch", "max_seq_len": 16, **bad}
    with pytest.raises(rope.RopeArgumentError) as want:
        rope.RoPEAttention(**kwargs)
    with pytest.raises(rope.RopeArgumentError) as got:
        rope.RoPEAttention(**kwargs, scaling=YARN)
    assert str(got.value) == str(want.value) and got.value.argument == want.value.argument
    # the one check the scaling adds to the base: named theta too
    with pytest.raises(rope.RopeArgumentError, match=r"^theta must be > 1 for scaling\.type=yarn \(it takes "
                                                     r"log\(theta\)\), got 1\.0$") as e:
        rope.RoPEAttention(32, 4, impl="torch", theta=1.0, max_seq_len=16, scaling=YARN)
    assert e.value.argument == "theta" and len(str(e.value).splitlines()) == 1


def _repeated_heads(gqa: rope.RoPEAttention) -> rope.RoPEAttention:
    """The multi-head layer computing what ``gqa`` computes: each k and v head's weights repeated for the query
    heads that share it."""
    mha = rope.RoPEAttention(gqa.d_model, gqa.n_heads, dropout=0.0, impl="torch", max_seq_len=16,
                             attention=gqa.attention).eval()
    D, group = gqa.head_dim, gqa.n_heads // gqa.n_kv_heads
    wq, wk, wv = gqa.qkv.weight.split([gqa.d_model, gqa.n_kv_heads * D, gqa.n_kv_heads * D])

    def repeat(w: torch.Tensor) -> torch.Tensor:
        return w.view(gqa.n_kv_heads, D, -1).repeat_interleave(group, dim=0).reshape(gqa.d_model, -1)

    with torch.no_grad():
        mha.qkv.weight.copy_(torch.cat([wq, repeat(wk), repeat(wv)]))
        mha.out.weight.copy_(gqa.out.weight)
    return mha


@pytest.mark.parametrize("attention", ["sdpa", "fused_rope"])
def test_grouped_query_attention_equals_repeated_kv_heads(attention, device):
    if attention == "fused_rope" and not layer_module.triton_runs_on(device):
        pytest.skip("the fused kernel runs on the CPU only under TRITON_INTERPRET=1")
    torch.manual_seed(0)
    gqa = rope.RoPEAttention(32, 4, dropout=0.0, impl="torch", max_seq_len=16, attention=attention,
                             n_kv_heads=2).eval()
    assert gqa.qkv.weight.shape == (32 + 2 * 16, 32) and "n_kv_heads=2" in repr(gqa)
    mha = _repeated_heads(gqa).to(device)
    gqa.to(device)
    x = torch.randn(2, 7, 32, device=device)
    with torch.no_grad():
        whole = mha(x)
        torch.testing.assert_close(gqa(x), whole, rtol=0, atol=1e-5)
        cache = gqa.new_cache()
        pieces = torch.cat([gqa(x[:, :4], cache=cache), gqa(x[:, 4:6], cache=cache), gqa(x[:, 6:], cache=cache)],
                           dim=1)
    torch.testing.assert_close(pieces, whole, rtol=0, atol=1e-5)
    assert cache.keys.shape == (2, 2, 16, 8)  # the cache holds the k and v heads only
    y = gqa(x[:, :3])  # and a backward through the grouped heads
    y.square().sum().backward()
    assert gqa.qkv.weight.grad is not None and gqa.qkv.weight.grad[32:].abs().sum() > 0


@pytest.mark.parametrize("n_kv_heads, message", [(3, "^n_kv_heads=3 must divide n_heads=4$"),
                                                 (0, "^n_kv_heads must be a positive int, got 0$"),
                                                 (2.0, r"^n_kv_heads must be a positive int, got 2\.0$")])
def test_a_bad_n_kv_heads_is_named(n_kv_heads, message):
    with pytest.raises(ValueError, match=message):
        rope.RoPEAttention(32, 4, impl="torch", n_kv_heads=n_kv_heads)


def test_decoding_in_training_mode_with_dropout_warns():
    """A cached call in training mode drops attention weights at random, so the decode silently stops matching the
    whole-sequence call: it warns, naming eval(); in eval mode, or without dropout, nothing is said."""
    import warnings

    attn = rope.RoPEAttention(32, 2, impl="torch", dropout=0.1)
    with pytest.warns(UserWarning, match=r"in training mode: dropout=0.1 makes each step random; call attn.eval\(\)"):
        attn(torch.randn(1, 3, 32), cache=attn.new_cache())
    for layer in (attn.eval(), rope.RoPEAttention(32, 2, impl="torch", dropout=0.0)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            layer(torch.randn(1, 3, 32), cache=layer.new_cache())


def test_x_of_another_dtype_or_device_than_the_layer_is_named():
    """torch's matmul error named neither x nor the layer; under autocast another dtype is what autocast is for."""
    attn = rope.RoPEAttention(32, 2, impl="torch")
    for x in (torch.randn(1, 3, 32, dtype=torch.float64), torch.randn(1, 3, 32, device="meta")):
        with pytest.raises(TypeError, match=r"^x is torch\.\w+ on \w+, the layer's weights torch.float32 on cpu: "
                                            r"move or cast one to the other \(attn.to\(x\)\), or run under "
                                            r"torch.autocast$"):
            attn(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert attn(torch.randn(1, 3, 32, dtype=torch.bfloat16)).shape == (1, 3, 32)
