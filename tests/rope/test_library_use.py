"""``rope`` used as a library in a model of one's own: what PyTorch users routinely do to a module keeps it right.

Each test holds one fix: tables computed again when a meta-device build is materialised with ``to_empty``; tables
swapped by ``torch.func.functional_call`` or ``register_buffer`` reaching every entry's rotation; a ``scaling.type``
of a type that cannot be hashed, and unknown scaling keys of mixed types, refused in one line; a YaRN attention
factor that float32 tables cannot hold refused at build; positions of uint16/32/64 refused in one line. Entries
that cannot run here are skipped with their reason.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import functional_call

import rope

YARN = {"type": "yarn", "factor": 2.0, "original_max_seq_len": 8}
DYNAMIC_NTK = {"type": "dynamic_ntk", "factor": 4.0, "original_max_seq_len": 8}


def _runnable(name: str, device: torch.device) -> None:
    """Skip the test, with the entry's own reason, where ``name`` cannot run on ``device``."""
    reason = rope.get(name).unavailable_reason(device)
    if reason is not None:
        pytest.skip(reason)


# -- a meta-device build materialised with to_empty ------------------------------------------------------
@pytest.mark.parametrize("name", ["torch", "none"])
@pytest.mark.parametrize("scaling", [None, YARN], ids=["no-scaling", "yarn"])
def test_to_empty_after_a_meta_build_holds_the_tables_of_a_build(name, scaling):
    """A module on the meta device then ``.to_empty(device=...)`` (how large models are initialised; ``.to("meta")``
    stands in for a build under ``torch.device("meta")``, whose first use imports for seconds): the tables are those
    of a plain build, bit for bit. They used to be the uninitialised memory to_empty leaves, and no checkpoint fills
    them (they are not in the state_dict), so the rotation was silently wrong."""
    r = rope.build(name, 8, 16, variant="full", scaling=scaling).to("meta")
    assert r.cos.is_meta
    r.to_empty(device="cpu")
    want = rope.build(name, 8, 16, variant="full", scaling=scaling)
    assert r.cos.dtype == torch.float32 and torch.equal(r.cos, want.cos) and torch.equal(r.sin, want.sin)
    q = torch.randn(2, 5, 3, 8)
    assert torch.equal(r(q), want(q))


def test_to_empty_keeps_the_current_dynamic_ntk_length():
    """A dynamic_ntk module sent to meta after a long call and materialised again holds that length's tables."""
    r = rope.build("torch", 8, 64, variant="full", scaling=DYNAMIC_NTK)
    r(torch.randn(1, 40, 1, 8))
    want_cos, want_sin = r.cos.clone(), r.sin.clone()
    r.to("meta").to_empty(device="cpu")
    assert torch.equal(r.cos, want_cos) and torch.equal(r.sin, want_sin)


def test_attention_initialised_on_meta_then_loaded_matches_the_original():
    """The usual large-model recipe on RoPEAttention: on meta, to_empty, load_state_dict; the same output."""
    torch.manual_seed(0)
    ref = rope.RoPEAttention(32, 4, impl="torch", max_seq_len=16).eval()
    attn = rope.RoPEAttention(32, 4, impl="torch", max_seq_len=16).eval().to("meta")
    attn.to_empty(device="cpu")
    attn.load_state_dict(ref.state_dict())
    x = torch.randn(2, 6, 32)
    torch.testing.assert_close(attn(x), ref(x), rtol=0, atol=0)


# -- tables swapped past __setattr__ ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["torch", "triton_v4", "triton_v2"])
def test_tables_swapped_by_functional_call_or_register_buffer_are_the_ones_used(name, device):
    """``functional_call`` and ``register_buffer`` write ``_buffers`` directly: the rotation uses the tables they
    put there (cos 1, sin 0: the identity) and, after functional_call, the module's own again. The Triton entries
    read a cached reference to the tables, which went stale and rotated with the old ones, silently."""
    _runnable(name, device)
    r = rope.build(name, 8, 16, variant="full").to(device)
    q = torch.randn(1, 3, 2, 8, device=device)
    rotated = r(q)
    ones, zeros = torch.ones_like(r.cos), torch.zeros_like(r.sin)
    assert torch.equal(functional_call(r, {"cos": ones, "sin": zeros}, (q,)), q)
    assert torch.equal(r(q), rotated) and not torch.equal(rotated, q)
    r.register_buffer("cos", ones, persistent=False)
    r.register_buffer("sin", zeros, persistent=False)
    assert torch.equal(r(q), q)


# -- scaling arguments refused in one line ---------------------------------------------------------------
@pytest.mark.parametrize("scaling,argument,match", [
    ({"type": ["linear"], "factor": 2.0}, "scaling.type", r"^scaling.type must be one of .*, got \['linear'\]$"),
    ({"type": "linear", "factor": 2.0, 1: 2, "foo": 3}, "scaling.1", r"^scaling.type=linear has no parameter 1 "),
])
def test_scaling_keys_and_type_of_any_type_get_one_line(scaling, argument, match):
    """A list as scaling.type (a config's mistake) raised a bare "unhashable type", and unknown keys of mixed types
    a TypeError from sorting them, both naming nothing."""
    for call in (rope.check_args, rope.build):
        with pytest.raises(rope.RopeArgumentError, match=match) as e:
            call("torch", 8, 16, scaling=scaling)
        assert e.value.argument == argument and len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize("extra,argument", [
    ({"attention_factor": 1e300}, "scaling.attention_factor"),
    ({"attention_factor": 1e-300}, "scaling.attention_factor"),
    ({"mscale": 1e308, "mscale_all_dim": 1.0}, "scaling.mscale"),
    ({"mscale": 1.0, "mscale_all_dim": 1e308}, "scaling.mscale_all_dim"),
])
def test_yarn_attention_factor_that_float32_tables_cannot_hold_is_refused(extra, argument):
    """The factor multiplies the float32 cos/sin tables: past float32's range every output was inf or NaN, below its
    smallest normal every rotated output 0, silently. Refused at check_args and build, naming the parameter."""
    scaling = {**YARN, **extra}
    for call in (rope.check_args, rope.build):
        with pytest.raises(rope.RopeArgumentError, match=r"^scaling.type=yarn gives an attention factor of .* "
                                                         r"which float32 cos/sin tables cannot hold") as e:
            call("torch", 8, 16, variant="full", scaling=scaling)
        assert e.value.argument == argument and len(str(e.value).splitlines()) == 1
    r = rope.build("torch", 8, 16, variant="full", scaling={**YARN, "attention_factor": 3.0})  # in range: built
    assert math.isclose(r.cos[0, 0].item(), 3.0)


# -- positions of torch's unsigned dtypes beyond uint8 -------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_positions_of_a_dtype_without_reductions_are_refused_in_one_line(dtype):
    """torch's uint16/32/64 have no min/max on the CPU: such positions failed inside torch with "min_all not
    implemented"; now the module and rope.apply refuse them in one line naming the dtypes allowed."""
    r = rope.build("torch", 8, 16)
    q = torch.randn(1, 3, 2, 8)
    pos = torch.tensor([0, 1, 2]).to(dtype)
    pattern = rf"^positions must be an integer tensor of dtype torch.int64 / .*, got {dtype}$"
    with pytest.raises(TypeError, match=pattern):
        r(q, positions=pos)
    with pytest.raises(TypeError, match=pattern):
        rope.apply(q, q, 16, positions=pos)
    assert torch.equal(r(q, positions=pos.long()), r(q))  # the same positions as int64 work
