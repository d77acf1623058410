"""Mistakes a user of the standalone API makes (``rope.apply``, ``rope.functional.rotary_module``,
``rope.attention_with_rope``, ``rope.fused_attention.tuning``), and the one line each gets: a NumPy array, a long
list or a big tensor where a tensor or a number belongs is named by its type and shape, not printed; a tensor in
the (B, H, T, D) layout is said to look transposed, and the argument that is off is the one named; a refused value
is said once. And ``rope.apply(..., scaling=...)``: the table ``rope.build`` makes with that scaling, each scaling
its own module."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rope
from rope import functional, fused_attention
from rope.reference import TorchRotary

LAYOUTS = ("q is (B, T, H, D) (batch, queries, heads, head dim), k_cache and v_cache (B, H_kv, L, D) (batch, "
           "key-value heads, cache length, head dim)")


@pytest.fixture(autouse=True)
def fresh_module_cache():
    functional.clear_cache()
    yield
    functional.clear_cache()


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and len(text) < 400, text
    return text


# -- a huge object is named by its type (and shape), not printed ------------------------------------------
@pytest.mark.parametrize("q, message", [
    (np.zeros((2, 64, 8, 64)), "q must be a (B, T, H, D) torch.Tensor, got ndarray"),
    ([[0.0] * 500] * 4, "q must be a (B, T, H, D) torch.Tensor, got list"),
    (torch.zeros(4, 2, 8), "q must be a (B, T, H, D) tensor (batch, tokens, heads, head dim), got shape (4, 2, 8)"),
], ids=["ndarray", "list", "3-dim"])
def test_apply_names_the_type_of_a_q_it_refuses(q, message):
    with pytest.raises(ValueError) as e:
        rope.apply(q, None, 16)
    assert _one_line(e.value) == message


@pytest.fixture(autouse=True)
def _made_on_the_test_device(device):
    """The tensors a test makes land on the device the kernels run on (CUDA when present): on a GPU machine,
    attention_with_rope refuses CPU tensors before the checks these tests are about."""
    with device:
        yield


def _scale(value):
    def call():
        r = rope.build("torch", 16, 64)
        rope.attention_with_rope(torch.zeros(1, 1, 2, 16), torch.zeros(1, 1, 8, 16), torch.zeros(1, 1, 8, 16), 3, r,
                                 scale=value)
    return call


def _tuning(**fields):
    def call():
        with fused_attention.tuning(**fields):
            pass
    return call


q8 = torch.zeros(1, 4, 2, 8)
HUGE = {
    "seq_len ndarray": (lambda: rope.apply(q8, q8, np.zeros((30, 30))), rope.RopeArgumentError, "seq_len",
                        "seq_len must be a positive int, got ndarray of shape (30, 30)"),
    "seq_len list": (lambda: rope.apply(q8, q8, list(range(2000))), rope.RopeArgumentError, "seq_len",
                     "seq_len must be a positive int, got list of length 2000"),
    "theta tensor": (lambda: rope.apply(q8, q8, 16, torch.ones(40, 40)), rope.RopeArgumentError, "theta",
                     "theta must be a finite number > 0, got Tensor of shape (40, 40)"),
    "impl list": (lambda: rope.apply(q8, q8, 16, impl=list(range(2000))), rope.RopeArgumentError, "impl",
                  "impl=list of length 2000: the RoPE name must be a string"),
    "head_dim ndarray": (lambda: functional.rotary_module("torch", np.zeros((30, 30)), 16), rope.RopeArgumentError,
                         "head_dim", "head_dim must be a positive int, got ndarray of shape (30, 30)"),
    "scaling list": (lambda: rope.apply(q8, q8, 16, scaling=list(range(3000))), rope.RopeArgumentError, "scaling",
                     "scaling must be a mapping with a 'type', got list of length 3000"),
    "positions ndarray": (lambda: rope.apply(q8, q8, 16, positions=np.arange(4)), TypeError, None,
                          "positions must be a (T,) or (B, T) integer torch.Tensor, got ndarray"),
    "scale tensor": (_scale(torch.ones(50, 50)), rope.RopeArgumentError, "scale",
                     "scale must be a finite number > 0 (default 1/sqrt(D)), got Tensor of shape (50, 50)"),
    "tuning list": (_tuning(splits=list(range(1000))), ValueError, None,
                    "tuning: splits must be an int, got list of length 1000"),
    "tuning ndarray": (_tuning(warp_specialized=np.zeros((30, 30))), ValueError, None,
                       "tuning: warp_specialized must be True or False, got ndarray of shape (30, 30)"),
}


@pytest.mark.parametrize("case", list(HUGE))
def test_a_huge_value_is_named_by_its_type_and_shape(case):
    call, exc, argument, message = HUGE[case]
    with pytest.raises(exc) as e:
        call()
    assert _one_line(e.value) == message
    if argument is not None:
        assert e.value.argument == argument


# -- a refused value is said once -------------------------------------------------------------------------
ONCE = {
    "seq_len float": (lambda: rope.apply(q8, q8, 64.0), "seq_len", "seq_len must be a positive int, got 64.0"),
    "theta 0": (lambda: rope.apply(q8, q8, 16, 0), "theta", "theta must be a finite number > 0, got 0"),
    "variant": (lambda: rope.apply(q8, q8, 16, variant="bogus"), "variant",
                "variant must be one of ('partial', 'full'), got 'bogus'"),
    "q head": (lambda: rope.apply(torch.zeros(1, 4, 2, 6), None, 16), "q.shape[-1]",
               "q.shape[-1] must be a multiple of 4 for variant='partial' (D/4 frequencies), got 6"),
    "impl": (lambda: rope.apply(q8, q8, 16, impl="nope"), "impl",
             f"impl='nope': unknown RoPE implementation; available: {', '.join(rope.available())}"),
    "rotary_module head_dim": (lambda: functional.rotary_module("torch", 8.0, 16), "head_dim",
                               "head_dim must be a positive int, got 8.0"),
    "theta for ntk": (lambda: rope.apply(q8, q8, 16, 1.0, scaling={"type": "ntk", "factor": 2}), "theta",
                      "theta must be > 1 for scaling.type=ntk (it takes log(theta)), got 1.0"),
    "scaling factor": (lambda: rope.apply(q8, q8, 16, scaling={"type": "linear", "factor": 0.5}), "scaling.factor",
                       "scaling.factor must be a finite number >= 1, got 0.5"),
}


@pytest.mark.parametrize("case", list(ONCE))
def test_a_refused_value_is_said_once(case):
    call, argument, message = ONCE[case]
    with pytest.raises(rope.RopeArgumentError) as e:
        call()
    assert _one_line(e.value) == message and e.value.argument == argument


# -- (B, T, H, D) and a tensor that looks transposed ------------------------------------------------------
@pytest.mark.parametrize("q_shape, k_shape, hint", [
    ((1, 4, 4, 8), (1, 2, 4, 8), "; k looks transposed, (B, H, T, D): pass k.transpose(1, 2)"),
    ((1, 2, 4, 8), (1, 4, 4, 8), "; q looks transposed, (B, H, T, D): pass q.transpose(1, 2)"),
    ((1, 4, 2, 8), (1, 2, 4, 8), "; q or k looks transposed, (B, H, T, D): pass that one's .transpose(1, 2)"),
    ((1, 4, 2, 8), (1, 4, 2, 16), ""),
], ids=["k", "q", "either", "head-dim"])
def test_apply_says_the_layout_and_which_tensor_looks_transposed(q_shape, k_shape, hint):
    with pytest.raises(ValueError) as e:
        rope.apply(torch.zeros(q_shape), torch.zeros(k_shape), 16)
    assert _one_line(e.value) == (f"q and k must agree in B, T and D, got q {q_shape} and k {k_shape}: both are "
                                  f"(B, T, H, D) (batch, tokens, heads, head dim){hint}")


@pytest.fixture
def no_launch(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was launched for input that should have been refused")

    monkeypatch.setattr(fused_attention, "_launch", refuse)


def _attend(q, H_kv=2, L=40, positions=10, v_cache=None):
    r = rope.build("torch", 16, 64)
    k_cache = torch.zeros(q.shape[0], H_kv, L, 16)
    rope.attention_with_rope(q, k_cache, k_cache.clone() if v_cache is None else v_cache, positions, r)


def test_attention_names_a_transposed_q_not_the_cache(no_launch):
    """q (B, T, H, D) = (2, 3, 4, 16) passed as (B, H, T, D): its 3 "heads" are no multiple of the cache's 2. The
    message blamed k_cache; q is the argument that is off, and its layout is said."""
    transposed = "; a (B, H, T, D) q? pass q.transpose(1, 2)"
    with pytest.raises(rope.RopeArgumentError) as e:
        _attend(torch.zeros(2, 3, 4, 16).transpose(1, 2))
    assert e.value.argument == "q"
    assert _one_line(e.value) == (f"q (2, 4, 3, 16) has H=3 heads (dim 2), not a multiple of the H_kv=2 of k_cache "
                                  f"(2, 2, 40, 16) (dim 1): {LAYOUTS}{transposed}")
    with pytest.raises(rope.RopeArgumentError) as e:  # a decode step: T = 1 in dim 2
        _attend(torch.zeros(2, 1, 4, 16).transpose(1, 2))
    assert e.value.argument == "q" and _one_line(e.value).endswith(transposed)
    with pytest.raises(rope.RopeArgumentError) as e:  # heads the cache's do not divide either way: no hint
        _attend(torch.zeros(2, 3, 4, 16), H_kv=5)
    assert e.value.argument == "q" and _one_line(e.value).endswith(f"(dim 1): {LAYOUTS}")


def test_attention_names_a_transposed_q_whose_heads_the_cache_divides(no_launch):
    """q (B, T, H, D) = (2, 2, 4, 16) passed as (B, H, T, D), 2 "heads" over 2 cache heads, with its (T,) positions:
    the positions give q's head count, so q is named, not positions."""
    with pytest.raises(rope.RopeArgumentError) as e:
        _attend(torch.zeros(2, 2, 4, 16).transpose(1, 2), positions=torch.arange(10, 12))
    assert e.value.argument == "q"
    assert _one_line(e.value) == (f"q (2, 4, 2, 16) has T=4 queries (dim 1), but positions (2,) give 2, q's heads "
                                  f"(dim 2): {LAYOUTS}; a (B, H, T, D) q? pass q.transpose(1, 2)")


def test_attention_names_v_cache_when_only_it_is_off_and_k_cache_when_it_is(no_launch):
    """v_cache is compared with k_cache: a k_cache in the (B, L, H_kv, D) layout is k_cache's fault, a v_cache that
    differs from a good k_cache is v_cache's (with the same layout hint)."""
    q = torch.zeros(2, 3, 4, 16)
    with pytest.raises(rope.RopeArgumentError) as e:
        _attend(q, v_cache=torch.zeros(2, 40, 2, 16))
    assert e.value.argument == "v_cache"
    assert _one_line(e.value) == ("v_cache has shape (2, 40, 2, 16), k_cache (2, 2, 40, 16): they must match; a "
                                  "(B, L, H_kv, D) cache? pass cache.transpose(1, 2)")
    with pytest.raises(rope.RopeArgumentError) as e:
        _attend(q, H_kv=3, v_cache=torch.zeros(2, 2, 40, 16))
    assert e.value.argument == "q"  # k_cache's 3 heads against q's 4: q or the cache, not v_cache
    r = rope.build("torch", 16, 64)
    with pytest.raises(rope.RopeArgumentError) as e:
        rope.attention_with_rope(q, torch.zeros(3, 2, 40, 16), torch.zeros(3, 2, 40, 16), 10, r)
    assert e.value.argument == "k_cache"
    assert _one_line(e.value) == (f"k_cache must be (B, H_kv, L, D) = (2, H_kv >= 1, L, 16), got (3, 2, 40, 16) for "
                                  f"q (2, 3, 4, 16): {LAYOUTS}")


# -- rope.apply(..., scaling=...) -------------------------------------------------------------------------
YARN = {"type": "yarn", "factor": 4, "original_max_seq_len": 64}


@pytest.mark.parametrize("impl", ["torch", "triton_v4"])
def test_apply_with_scaling_is_the_built_module_and_a_call_without_stays_unscaled(impl):
    if rope.get(impl).unavailable_reason(torch.device("cpu")):
        pytest.skip(f"{impl} cannot run here")
    D, seq_len = 16, 256
    q, k = torch.randn(1, 6, 2, D), torch.randn(1, 6, 1, D)
    positions = torch.arange(200, 206)  # past the original length: YaRN's interpolated frequencies matter
    scaled = rope.apply(q, k, seq_len, impl=impl, positions=positions, scaling=YARN)
    expected = rope.build(impl, D, seq_len, scaling=YARN)(q, k, positions=positions)
    plain = rope.apply(q, k, seq_len, impl=impl, positions=positions)
    for got, want in zip(scaled + plain, expected + rope.build(impl, D, seq_len)(q, k, positions=positions),
                         strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert (scaled[0] - plain[0]).abs().max() > 1e-3
    # the other order: an unscaled module built first is not handed to a call with a scaling
    functional.clear_cache()
    torch.testing.assert_close(rope.apply(q, None, seq_len, impl=impl, positions=positions)[0], plain[0], rtol=0,
                               atol=0)
    torch.testing.assert_close(rope.apply(q, None, seq_len, impl=impl, positions=positions, scaling=YARN)[0],
                               scaled[0], rtol=0, atol=0)


def test_each_scaling_gets_its_module_and_the_same_one_shares_it(monkeypatch):
    """The module cache's key holds the scaling's items: two scalings never share a table, the same items in
    another order (or a new dict of them) do."""
    builds = []
    real = functional.build
    monkeypatch.setattr(functional, "build", lambda *a, **kw: builds.append(kw.get("scaling")) or real(*a, **kw))
    q = torch.randn(1, 4, 2, 8)
    other = {**YARN, "factor": 2}
    outs = [rope.apply(q, None, 128, scaling=s, positions=torch.arange(100, 104))[0] for s in (YARN, other, None)]
    assert builds == [YARN, other, None]
    for s, out in zip((YARN, other, None), outs, strict=True):
        torch.testing.assert_close(out, rope.build("torch", 8, 128, scaling=s)(q, positions=torch.arange(100, 104)),
                                   rtol=0, atol=0)
    rope.apply(q, None, 128, scaling=dict(reversed(list(YARN.items()))))
    assert len(builds) == 3


@pytest.mark.parametrize("scaling", [
    {"type": "yarn", "factor": 4},
    {"factor": 4},
    {"type": "yarnn"},
    {"type": "linear", "factor": 0.5},
    {"type": "yarn", "factor": 4, "original_max_seq_len": 64, "beta": 1},
    "yarn",
], ids=["missing", "no-type", "unknown-type", "factor", "unknown-key", "not-a-mapping"])
def test_apply_refuses_a_scaling_as_build_does(scaling):
    with pytest.raises(rope.RopeArgumentError) as built:
        rope.build("torch", 8, 16, scaling=scaling)
    with pytest.raises(rope.RopeArgumentError) as applied:
        rope.apply(q8, q8, 16, scaling=scaling)
    assert (applied.value.argument, _one_line(applied.value)) == (built.value.argument, str(built.value))


def test_an_implementation_without_a_scaling_option_still_builds_without_one(monkeypatch):
    """apply hands ``scaling`` to the build only when given: an implementation whose constructor takes no
    ``scaling`` (a plugin's may not) keeps working, and one given a scaling says it has no such option."""
    from rope import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @registry.register("test_no_scaling")
    class NoScaling(TorchRotary):
        def __init__(self, head_dim, max_seq_len, base=10000.0, variant="partial"):
            super().__init__(head_dim, max_seq_len, base, variant)

        @classmethod
        def check_options(cls, options):
            pass

    q = torch.randn(1, 4, 2, 8)
    torch.testing.assert_close(rope.apply(q, None, 16, impl="test_no_scaling")[0], rope.apply(q, None, 16)[0],
                               rtol=0, atol=0)
    with pytest.raises(rope.RopeArgumentError) as e:
        rope.apply(q, None, 16, impl="test_no_scaling", scaling=YARN)
    assert e.value.argument == "scaling" and "has no option 'scaling'" in _one_line(e.value)


def test_a_variant_that_is_no_string_is_refused_naming_variant():
    """An array given as the variant was compared element by element with the names, and NumPy's "truth value of
    an array is ambiguous" came out instead of the variant's line."""
    for variant in (np.zeros(2000), 3):
        with pytest.raises(rope.RopeArgumentError) as e:
            rope.apply(q8, q8, 16, variant=variant)
        assert e.value.argument == "variant" and _one_line(e.value).startswith("variant must be one of ")
