"""Edges of ``rope`` used as a library: second derivatives, registration, per-length tables, checks, messages.

Each test holds one fix: liger's double backward; ``register`` refusing a bad name, and a non-class
before a taken name; dynamic_ntk's tables rebuilt out of place (two lengths, one backward);
``rope_frequencies`` checking its arguments; the identity building for any head_dim; messages naming what the
caller passed; the KV cache's batch size and dtype; liger with zero heads. The Triton and Liger entries run under
Triton's interpreter on a CPU (``tests/conftest.py``); where one cannot run, its tests are skipped with its reason.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

import rope
from rope.base import UnknownRopeError

DYNAMIC_NTK = {"type": "dynamic_ntk", "factor": 4.0, "original_max_seq_len": 8}


def _runnable(name: str, device: torch.device) -> None:
    """Skip the test, with the entry's own reason, where ``name`` cannot run on ``device``."""
    reason = rope.get(name).unavailable_reason(device)
    if reason is not None:
        pytest.skip(reason)


# -- liger's double backward ---------------------------------------------------------------------------
def _hvp(name: str, device: torch.device, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor,
         w: tuple[torch.Tensor, ...], v: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The gradients and a Hessian-vector product of ``(<r(q), wq> + <r(k), wk>)**2`` through entry ``name``."""
    r = rope.build(name, 12, 16, variant="full", rotary_dim=8).to(device)
    q, k = q.clone().requires_grad_(), k.clone().requires_grad_()
    yq, yk = r(q, k, positions=pos)
    loss = ((yq * w[0]).sum() + (yk * w[1]).sum()) ** 2
    gq, gk = torch.autograd.grad(loss, (q, k), create_graph=True)
    hq, hk = torch.autograd.grad((gq * v[0]).sum() + (gk * v[1]).sum(), (q, k))
    return gq.detach(), gk.detach(), hq, hk


def test_liger_double_backward_matches_torch(device):
    """A Hessian-vector product through liger is torch's: its backward is recorded and differentiated (it
    was a clone of the incoming gradient to autograd, so the second derivative came out wrong, silently).
    With GQA, (B, T) positions and rotary_dim < D (the tail's gradient passes through)."""
    _runnable("liger", device)
    B, T, HQ, HK, D = 2, 5, 3, 1, 12
    q, k = torch.randn(B, T, HQ, D, device=device), torch.randn(B, T, HK, D, device=device)
    pos = torch.randint(0, 16, (B, T), device=device)
    w = (torch.randn_like(q), torch.randn_like(k))
    v = (torch.randn_like(q), torch.randn_like(k))
    want = _hvp("torch", device, q, k, pos, w, v)
    got = _hvp("liger", device, q, k, pos, w, v)
    for what, g, e in zip(("dq", "dk", "Hv q", "Hv k"), got, want, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-4, msg=lambda m, what=what: f"liger {what}: {m}")
    assert want[2].abs().max() > 1.0  # the product is not trivially zero


# -- register ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [123, "", None, b"x"])
def test_register_refuses_a_name_that_is_not_a_non_empty_str(name):
    """Refused at once, naming ``name``; the registry stays usable (a non-str name used to break every
    ``available()`` and every unknown-name error, which sort the names)."""
    before = rope.available()
    with pytest.raises(rope.RopeArgumentError, match=r"@register\(name\) needs a non-empty str name") as e:
        rope.register(name)(type("X", (rope.RotaryEmbedding,), {}))
    assert e.value.argument == "name" and len(str(e.value).splitlines()) == 1
    assert rope.available() == before
    with pytest.raises(UnknownRopeError, match="available: "):
        rope.build("no_such_rope", 8, 16)


def test_register_checks_the_class_before_the_name():
    """A non-class given a taken name is told it is no RotaryEmbedding subclass, not that the name is taken."""
    with pytest.raises(TypeError, match=r"@register\('torch'\) expects a RotaryEmbedding subclass"):
        rope.register("torch")(object)
    assert rope.get("torch").__name__ == "TorchRotary"


# -- dynamic_ntk, two lengths before one backward -------------------------------------------------------
@pytest.mark.parametrize("name", ["torch", "triton_v4"])
def test_dynamic_ntk_two_lengths_then_one_backward(name, device):
    """Calls at T=32 and T=4 (other tables) then one backward: the gradients are those of each length's own
    backward (the tables used to be rebuilt in place, under the first call's graph: an autograd error)."""
    _runnable(name, device)
    r = rope.build(name, 8, 64, variant="full", scaling=DYNAMIC_NTK).to(device)
    qa = torch.randn(1, 32, 2, 8, device=device, requires_grad=True)
    qb = torch.randn(1, 4, 2, 8, device=device, requires_grad=True)
    wa, wb = torch.randn_like(qa), torch.randn_like(qb)
    ya, yb = r(qa), r(qb)
    ((ya * wa).sum() + (yb * wb).sum()).backward()
    assert r._cos_sin[0] is r.cos and r._cos_sin[1] is r.sin  # the hot path reads the current tables
    for x, w, what in ((qa, wa, "T=32"), (qb, wb, "T=4")):
        alone = x.detach().clone().requires_grad_()
        fresh = rope.build(name, 8, 64, variant="full", scaling=DYNAMIC_NTK).to(device)
        (fresh(alone) * w).sum().backward()
        torch.testing.assert_close(x.grad, alone.grad, rtol=0, atol=1e-6, msg=lambda m, what=what: f"{what}: {m}")
    plain = qa.detach().clone().requires_grad_()
    (rope.build(name, 8, 64, variant="full").to(device)(plain) * wa).sum().backward()
    assert (plain.grad - qa.grad).abs().max() > 1e-3  # T=32 is scaled: the check can tell the tables apart


# -- rope_frequencies --------------------------------------------------------------------------------
@pytest.mark.parametrize("args,argument,match", [
    ((6, 10000.0, "partial"), "rotary_dim", r"rotary_dim must be a multiple of 4 \(variant='partial'"),
    ((7, 10000.0, "full"), "rotary_dim", "rotary_dim must be even, got 7"),
    ((0, 10000.0, "full"), "rotary_dim", "rotary_dim must be a positive int, got 0"),
    ((8.0, 10000.0, "full"), "rotary_dim", "rotary_dim must be a positive int, got 8.0"),
    ((8, -1.0, "partial"), "base", r"base must be a finite number > 0, got -1.0"),
    ((8, 0.0, "full"), "base", r"base must be a finite number > 0, got 0.0"),
    ((8, math.nan, "full"), "base", r"base must be a finite number > 0, got nan"),
    ((8, "1e4", "full"), "base", r"base must be a finite number > 0, got '1e4'"),
])
def test_rope_frequencies_checks_its_arguments(args, argument, match):
    """The public helper refuses what a build refuses, in one line naming the argument (an odd width gave
    too few frequencies, a base <= 0 inf or sign-flipped ones)."""
    with pytest.raises(rope.RopeArgumentError, match=match) as e:
        rope.rope_frequencies(*args)
    assert e.value.argument == argument and len(str(e.value).splitlines()) == 1
    assert rope.rope_frequencies(12, 10000.0, "partial").shape == (6,)


# -- the identity splits no head ------------------------------------------------------------------------
@pytest.mark.parametrize("head_dim", [1, 5, 6, 7])
@pytest.mark.parametrize("variant", ["partial", "full"])
def test_the_identity_builds_for_any_head_dim(head_dim, variant):
    """rope=none rotates nothing, so no head_dim is refused for a split it never makes (head_dim=6 was, under the
    default variant='partial'); the rotations still refuse it, and the identity what makes no sense for it."""
    rope.check_args("none", head_dim, 16, variant=variant)
    r = rope.build("none", head_dim, 16, variant=variant)
    q, k = torch.randn(2, 5, 3, head_dim), torch.randn(2, 5, 1, head_dim)
    q2, k2 = r(q, k)
    assert q2 is q and k2 is k and r.head_dim == head_dim
    assert r(q, positions=torch.tensor([15, 0, 3, 2, 1])) is q
    assert r.cos.shape == r.sin.shape == (16, head_dim // 2)
    assert rope.build("none", head_dim, 16, variant=variant, rotary_dim=head_dim).rotary_dim == head_dim
    if head_dim % (4 if variant == "partial" else 2):
        with pytest.raises(rope.RopeArgumentError, match=r"^head_dim must be ") as e:
            rope.build("torch", head_dim, 16, variant=variant)
        assert e.value.argument == "head_dim"


@pytest.mark.parametrize("args,options,argument,match", [
    ((0, 16), {}, "head_dim", r"^head_dim must be a positive int, got 0$"),
    ((-6, 16), {}, "head_dim", r"^head_dim must be a positive int, got -6$"),
    ((6.0, 16), {}, "head_dim", r"^head_dim must be a positive int, got 6.0$"),
    ((6, 0), {}, "max_seq_len", r"^max_seq_len must be a positive int, got 0$"),
    ((6, 16), {"variant": "bogus"}, "variant", r"^variant must be one of \('partial', 'full'\), got 'bogus'$"),
    ((6, 16), {"rotary_dim": 7}, "rotary_dim", r"^rotary_dim must be at most head_dim=6, got 7$"),
    ((6, 16), {"rotary_dim": 0}, "rotary_dim", r"^rotary_dim must be a positive int, got 0$"),
])
def test_the_identity_still_refuses_what_makes_no_sense_for_it(args, options, argument, match):
    for call in (rope.check_args, rope.build):
        with pytest.raises(rope.RopeArgumentError, match=match) as e:
            call("none", *args, **options)
        assert e.value.argument == argument


# -- messages naming what the caller passed ------------------------------------------------------------
def test_apply_names_seq_len_when_q_is_longer():
    q = torch.randn(1, 6, 2, 8)
    with pytest.raises(ValueError, match=r"^q has T=6 > seq_len=4, the length of the cos/sin table") as e:
        rope.apply(q, q, seq_len=4)
    assert "max_seq_len" not in str(e.value)


def _apply_call(case: str):
    """A call of rope.apply with one bad argument (the others fine)."""
    q = torch.randn(1, 4, 2, 8)
    calls = {
        "seq_len": lambda: rope.apply(q, q, 0),
        "seq_len-numpy": lambda: rope.apply(q, q, pytest.importorskip("numpy").int64(16)),
        "theta": lambda: rope.apply(q, q, 16, -1.0),
        "head-partial": lambda: rope.apply(q[..., :6], q[..., :6], 16),
        "head-full": lambda: rope.apply(q[..., :7], None, 16, variant="full"),
        "head-empty": lambda: rope.apply(q[..., :0], None, 16),
        "k-head": lambda: rope.apply(q, torch.randn(1, 4, 2, 16), 16),
        "k-longer": lambda: rope.apply(q, torch.randn(1, 20, 2, 8), 16),
        "positions": lambda: rope.apply(q, q, 16, positions=torch.tensor([0, 1, 2, 16])),
    }
    return calls[case]


#: (the call of :func:`_apply_call`, the exception, the argument it names where it is a RopeArgumentError, the message)
APPLY_ERRORS = [
    ("seq_len", rope.RopeArgumentError, "seq_len", r"seq_len must be a positive int, got 0"),
    ("seq_len-numpy", rope.RopeArgumentError, "seq_len",
     r"seq_len must be a positive Python int, got np.int64\(16\) of type numpy.int64: convert it with int\(\)"),
    ("theta", rope.RopeArgumentError, "theta", r"theta must be a finite number > 0, got -1.0"),
    ("head-partial", rope.RopeArgumentError, "q.shape[-1]",
     r"q.shape\[-1\] must be a multiple of 4 for variant='partial' \(D/4 frequencies\), got 6"),
    ("head-full", rope.RopeArgumentError, "q.shape[-1]",
     r"q.shape\[-1\] must be even \(x is split into two halves\), got 7"),
    ("head-empty", rope.RopeArgumentError, "q.shape[-1]",
     r"q.shape\[-1\] must be a positive int, got 0"),
    ("k-head", ValueError, None, r"q and k must agree in B, T and D, got q \(1, 4, 2, 8\) and k \(1, 4, 2, 16\): "
     r"both are \(B, T, H, D\) \(batch, tokens, heads, head dim\)"),
    ("k-longer", ValueError, None, r"q and k must agree in B, T and D, got q \(1, 4, 2, 8\) and k \(1, 20, 2, 8\): "
     r"both are \(B, T, H, D\) \(batch, tokens, heads, head dim\)"),
    ("positions", ValueError, None, r"positions must lie in \[0, seq_len=16\), got range \[0, 16\]"),
]


@pytest.mark.parametrize("case,exc,argument,message", APPLY_ERRORS, ids=[c[0] for c in APPLY_ERRORS])
def test_apply_errors_name_only_what_its_caller_passed(case, exc, argument, message):
    """rope.apply builds a module (head_dim from q, max_seq_len from seq_len, base from theta) and calls it: an error
    of either names apply's own arguments, never the module's max_seq_len, head_dim or base, which its caller never
    passed. (A build error read "seq_len=0: max_seq_len must be a positive int", a k longer than the table "k has
    T=20 > max_seq_len=16", positions past it "positions must lie in [0, max_seq_len=16)".)"""
    with pytest.raises(exc) as e:
        _apply_call(case)()
    text = str(e.value)
    assert re.fullmatch(message, text), text
    assert not re.search(r"\b(max_seq_len|head_dim|base)\b", text) and "\n" not in text
    if argument is not None:
        assert e.value.argument == argument


def test_rotary_module_names_head_dim_which_its_caller_passed():
    """rope.functional.rotary_module takes head_dim itself (apply passes q's): its errors say head_dim."""
    from rope.functional import rotary_module

    with pytest.raises(rope.RopeArgumentError, match=r"^head_dim must be a multiple of 4 ") as e:
        rotary_module("torch", 6, 16)
    assert e.value.argument == "head_dim"
    with pytest.raises(rope.RopeArgumentError, match=r"^seq_len must be a positive int, got 0$"):
        rotary_module("torch", 8, 0)


def test_attention_names_x_when_it_is_longer_than_the_table():
    attn = rope.RoPEAttention(64, 4, impl="torch", max_seq_len=16)
    with pytest.raises(ValueError, match=r"^x has T=17 positions > max_seq_len=16") as e:
        attn(torch.randn(1, 17, 64))
    assert "q has" not in str(e.value) and len(str(e.value).splitlines()) == 1


def test_attention_cache_overflow_at_the_table_edge_says_the_cache_is_full():
    """A cache as long as the table: the layer's own message, not a positions error the caller never passed."""
    attn = rope.RoPEAttention(64, 4, impl="torch", max_seq_len=16).eval()
    cache = attn.new_cache()
    attn(torch.randn(1, 10, 64), cache=cache)
    with pytest.raises(ValueError, match=r"^KV cache full: 10 cached \+ 7 new positions > max_len=16$"):
        attn(torch.randn(1, 7, 64), cache=cache)
    assert cache.length == 10


@pytest.mark.parametrize("scaling", [{"factor": 2.0}, {"type": None, "factor": 2.0, "original_max_seq_len": None}])
def test_scaling_without_type_says_type_is_missing(scaling):
    for call in (rope.check_args, rope.build):
        with pytest.raises(rope.RopeArgumentError, match=r"^scaling.type is missing \(scaling sets factor\)") as e:
            call("torch", 8, 16, scaling=scaling)
        assert e.value.argument == "scaling.type"
    # every parameter null (a config listing them all) still means no scaling
    assert rope.build("torch", 8, 16, scaling={"type": None, "factor": None}).scaling == {"type": "none"}


@pytest.mark.parametrize("argument,make", [("head_dim", lambda np: np.int64(8)),
                                           ("head_dim", lambda np: torch.tensor(8)),
                                           ("max_seq_len", lambda np: np.int64(16))],
                         ids=["head_dim-numpy", "head_dim-tensor", "max_seq_len-numpy"])
def test_an_integer_of_another_type_is_refused_saying_python_int(argument, make):
    """np.int64(8) or torch.tensor(8) is a positive integer: the message says a Python int is needed, and how."""
    args = {"head_dim": 8, "max_seq_len": 16, argument: make(pytest.importorskip("numpy"))}
    with pytest.raises(rope.RopeArgumentError, match=rf"^{argument} must be a positive Python int, got .* of type "
                                                     r"(numpy.int64|torch.Tensor): convert it with int\(\)$") as e:
        rope.build("torch", args["head_dim"], args["max_seq_len"])
    assert e.value.argument == argument


def test_packed_q_none_is_refused_in_one_line():
    r = rope.build("torch", 8, 16)
    with pytest.raises(TypeError, match=r"^with cu_seqlens, q must be a torch.Tensor .* got NoneType$"):
        r(None, cu_seqlens=torch.tensor([0, 3, 7], dtype=torch.int32))


def test_packed_q_k_mismatch_names_the_packed_shapes():
    r = rope.build("torch", 8, 16)
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^with cu_seqlens, q and k must agree in total_tokens and D, "
                                         r"got q \(7, 2, 8\) and k \(5, 2, 8\)$"):
        r(torch.randn(7, 2, 8), torch.randn(5, 2, 8), cu_seqlens=cu)


# -- the KV cache keeps its batch size and dtype --------------------------------------------------------
def test_cache_reset_then_another_batch_says_to_make_a_new_cache():
    attn = rope.RoPEAttention(64, 4, impl="torch", max_seq_len=16).eval()
    cache = attn.new_cache()
    attn(torch.randn(2, 3, 64), cache=cache)
    cache.reset()
    projected = []
    hook = attn.qkv.register_forward_hook(lambda *args: projected.append(1))
    with pytest.raises(ValueError, match=r"holds a batch of 2 sequences, got 1: .*attn.new_cache\(\)$"):
        attn(torch.randn(1, 3, 64), cache=cache)
    hook.remove()
    assert cache.length == 0 and projected == []  # refused before any work
    attn(torch.randn(1, 3, 64), cache=attn.new_cache())  # what the message says works


def test_cache_dtype_change_is_refused_before_writing():
    """The layer cast to bf16 mid-cache: one line naming both dtypes and the fix, before the cache is written
    (it used to write bf16 keys into the float32 buffer, then fail deep in SDPA). The cache's own check too
    (under autocast the layer cannot know the keys' dtype before computing them)."""
    attn = rope.RoPEAttention(64, 4, impl="torch", max_seq_len=16).eval()
    cache = attn.new_cache()
    attn(torch.randn(1, 3, 64), cache=cache)
    keys, values = cache.keys.clone(), cache.values.clone()
    attn.to(torch.bfloat16)
    pattern = r"^the cache holds torch.float32 keys and values, got torch.bfloat16 .*attn.new_cache\(\)$"
    projected = []
    hook = attn.qkv.register_forward_hook(lambda *args: projected.append(1))
    with pytest.raises(TypeError, match=pattern):
        attn(torch.randn(1, 2, 64, dtype=torch.bfloat16), cache=cache)
    hook.remove()
    assert projected == []  # refused before any work
    with pytest.raises(TypeError, match=pattern):
        cache.append(torch.randn(1, 2, 4, 16, dtype=torch.bfloat16), torch.randn(1, 2, 4, 16, dtype=torch.bfloat16))
    attn.float()
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(TypeError, match=pattern):
        attn(torch.randn(1, 2, 64), cache=cache)
    assert cache.length == 3 and cache.keys.dtype == torch.float32
    # bit for bit, the whole buffer: nothing written (its rows past the cached ones are uninitialised, NaN maybe)
    assert torch.equal(cache.keys.view(torch.int32), keys.view(torch.int32))
    assert torch.equal(cache.values.view(torch.int32), values.view(torch.int32))


# -- liger with zero heads ----------------------------------------------------------------------------
def test_liger_zero_heads_return_the_empty_result_without_a_launch(device):
    """As every entry: q (and k) of zero heads give empty results and empty gradients, launching nothing;
    a q of zero heads beside a k with heads rotates k as torch does."""
    _runnable("liger", device)
    r = rope.build("liger", 8, 16).to(device)
    real, launches = r._function, []

    class Spy:  # Liger's Function, counting its kernel launches
        @staticmethod
        def forward(*args):
            launches.append("forward")
            return real.forward(*args)

        @staticmethod
        def backward(*args):
            launches.append("backward")
            return real.backward(*args)

    r._function = Spy
    q = torch.randn(2, 5, 0, 8, device=device, requires_grad=True)
    k0 = torch.randn(2, 5, 0, 8, device=device, requires_grad=True)
    y = r(q)
    yq, yk = r(q, k0)
    assert y.shape == yq.shape == yk.shape == (2, 5, 0, 8)
    (y.sum() + yq.sum() + yk.sum()).backward()
    assert q.grad.shape == k0.grad.shape == (2, 5, 0, 8) and launches == []
    k = torch.randn(2, 5, 2, 8, device=device)
    yq, yk = r(q, k)
    want_q, want_k = rope.build("torch", 8, 16).to(device)(q, k)
    assert yq.shape == want_q.shape and launches == ["forward"]
    torch.testing.assert_close(yk, want_k, rtol=0, atol=2e-6)


def test_gradients_through_cached_calls_equal_those_of_the_whole_sequence():
    """Backward through calls that share a cache (a prompt, then one token at a time): each call's attention saved
    views of the buffers the next call wrote into, and the backward failed ("modified by an inplace operation")."""
    torch.manual_seed(0)
    attn = rope.RoPEAttention(64, 4, impl="torch", max_seq_len=16).eval()  # eval: no dropout; grads still flow
    x = torch.randn(2, 6, 64)
    whole = torch.autograd.grad(attn(x)[:, 3:].square().sum(), list(attn.parameters()))
    cache = attn.new_cache()
    attn(x[:, :3], cache=cache)
    steps = torch.cat([attn(x[:, i:i + 1], cache=cache) for i in range(3, 6)], 1)
    for got, want in zip(torch.autograd.grad(steps.square().sum(), list(attn.parameters())), whole, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
