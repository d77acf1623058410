"""The mistakes a RoPE implementation of one's own is likely to make, each refused in one line at the step where it
is made, naming the class and what it should do: a class without ``rotate`` (refused by ``register``), a ``rotate``
returning one tensor instead of the pair (q, k) (refused at the call, before the tensor's batch is split into two
unnoticed), and an ``__init__`` that skips ``super().__init__`` (refused by ``rope.build``)."""

from __future__ import annotations

import pytest
import torch

import rope
from rope import registry
from rope.reference import TorchRotary, gather_tables, rotate_half_split


@pytest.fixture(autouse=True)
def own_registry(monkeypatch):
    """A copy of the registry for each test, so that whatever a test registers is gone after it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def _rotated(r: rope.RotaryEmbedding, x: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
    cos, sin = gather_tables(positions, x.shape[1], r.cos, r.sin)
    return rotate_half_split(x, cos, sin)


# -- a class without rotate ----------------------------------------------------------------------------------------
def test_register_refuses_a_class_that_does_not_define_rotate():
    class NoRotate(rope.RotaryEmbedding):
        pass

    before = rope.available()
    with pytest.raises(TypeError) as e:
        rope.register("no_rotate")(NoRotate)
    assert str(e.value) == "class NoRotate registered as 'no_rotate' does not define rotate(q, k, positions)"
    assert rope.available() == before


def test_register_accepts_a_rotate_it_inherits():
    """A subclass of an implementation inherits its ``rotate``: that is no mistake."""

    class Inherits(TorchRotary):
        pass

    assert rope.register("inherits_rotate")(Inherits) is Inherits
    assert rope.get("inherits_rotate") is Inherits


def test_the_base_rotate_says_what_is_missing():
    """An unregistered class built directly still gets a message, not a bare NotImplementedError."""

    class NoRotate(rope.RotaryEmbedding):
        pass

    with pytest.raises(NotImplementedError) as e:
        NoRotate(16, 8)(torch.randn(1, 4, 2, 16))
    assert str(e.value) == ("NoRotate does not define rotate(q, k, positions), which every RotaryEmbedding subclass "
                            "must: it returns the pair (rotated q, rotated k or None)")


# -- rotate returning something other than the pair (q, k) ----------------------------------------------------------
class OneTensor(rope.RotaryEmbedding):
    """Returns q rotated alone, for q and k alike."""

    def rotate(self, q, k, positions):
        return _rotated(self, q, positions)


class Pair(rope.RotaryEmbedding):
    """The right rotation, returned as ``self.wrap`` says (the pair itself by default)."""

    wrap = staticmethod(lambda yq, yk: (yq, yk))

    def rotate(self, q, k, positions):
        return self.wrap(_rotated(self, q, positions), None if k is None else _rotated(self, k, positions))


@pytest.mark.parametrize("batch", [2, 3])
def test_rotate_returning_one_tensor_is_refused_in_one_line(batch):
    """With a batch of 2, unpacking the tensor used to split it into two silently (q given k's place); otherwise it
    raised "too many values to unpack", naming neither the class nor what rotate must return."""
    r = OneTensor(16, 8)
    q, k = torch.randn(batch, 5, 3, 16), torch.randn(batch, 5, 1, 16)
    with pytest.raises(TypeError) as e:
        r(q, k)
    assert str(e.value) == ("OneTensor.rotate must return the pair (q rotated, k rotated), float32 tensors of shapes "
                            f"({batch}, 5, 3, 16) and ({batch}, 5, 1, 16); got a float32 tensor ({batch}, 5, 3, 16)")
    with pytest.raises(TypeError) as e:
        r(q)
    assert str(e.value) == ("OneTensor.rotate must return the pair (q rotated, None) for k None, q rotated a float32 "
                            f"tensor of shape ({batch}, 5, 3, 16); got a float32 tensor ({batch}, 5, 3, 16)")
    with pytest.raises(TypeError, match=r"^OneTensor.rotate must return the pair \(q rotated, k rotated\)"):
        r.rotate_qkv(torch.randn(batch, 5, 5 * 16), 3, 1)  # the default _rotate_qkv calls rotate too


@pytest.mark.parametrize("wrap,k_given,got", [
    (lambda yq, yk: (yq, yk, yk), True, "a tuple of 3: (float32 tensor (2, 5, 3, 16), float32 tensor (2, 5, 1, 16), "
                                        "float32 tensor (2, 5, 1, 16))"),
    (lambda yq, yk: (yq, yq), True, "a tuple of 2: (float32 tensor (2, 5, 3, 16), float32 tensor (2, 5, 3, 16))"),
    (lambda yq, yk: (yq[:1], yk), True, "a tuple of 2: (float32 tensor (1, 5, 3, 16), float32 tensor (2, 5, 1, 16))"),
    (lambda yq, yk: (yq, None), True, "a tuple of 2: (float32 tensor (2, 5, 3, 16), NoneType)"),
    (lambda yq, yk: (yq, yq), False, "a tuple of 2: (float32 tensor (2, 5, 3, 16), float32 tensor (2, 5, 3, 16))"),
    (lambda yq, yk: None, False, "NoneType"),
    (lambda yq, yk: (yq.double(), yk), True, "a tuple of 2: (float64 tensor (2, 5, 3, 16), float32 tensor "
                                             "(2, 5, 1, 16))"),
    (lambda yq, yk: (yq, yk.half()), True, "a tuple of 2: (float32 tensor (2, 5, 3, 16), float16 tensor "
                                           "(2, 5, 1, 16))"),
], ids=["three", "q-twice", "batch-cut", "k-dropped", "k-for-none", "none", "q-dtype", "k-dtype"])
def test_rotate_returning_a_wrong_pair_is_refused(wrap, k_given, got):
    r = Pair(16, 8)
    r.wrap = wrap
    q, k = torch.randn(2, 5, 3, 16), torch.randn(2, 5, 1, 16)
    with pytest.raises(TypeError, match=r"^Pair.rotate must return the pair .*; got (.*)$") as e:
        r(q, k) if k_given else r(q)
    assert str(e.value).endswith(f"; got {got}") and len(str(e.value).splitlines()) == 1


def test_rotate_may_return_a_list_pair():
    r = Pair(16, 8)
    r.wrap = lambda yq, yk: [yq, yk]
    q, k = torch.randn(2, 5, 3, 16), torch.randn(2, 5, 1, 16)
    yq, yk = r(q, k)
    torch.testing.assert_close((yq, yk), rope.build("torch", 16, 8)(q, k), rtol=0, atol=1e-6)


def test_the_returned_pair_check_compiles_whole():
    """The check reads shapes only: a module calling the rotation compiles with fullgraph=True (no graph break) and
    gives the eager result; the check still refuses a bad return under torch.compile."""

    class Block(torch.nn.Module):
        def __init__(self, r: rope.RotaryEmbedding) -> None:
            super().__init__()
            self.r = r

        def forward(self, q, k, positions):
            yq, yk = self.r(q, k, positions=positions)
            return (yq * 2).sum() + yk.sum()

    q, k = torch.randn(2, 5, 3, 16), torch.randn(2, 5, 1, 16)
    pos = torch.randint(0, 8, (2, 5))
    block = Block(Pair(16, 8))
    torch._dynamo.reset()
    got = torch.compile(block, fullgraph=True, backend="aot_eager")(q, k, pos)
    torch.testing.assert_close(got, block(q, k, pos), rtol=1e-6, atol=1e-5)
    torch._dynamo.reset()
    with pytest.raises(TypeError, match=r"^OneTensor.rotate must return the pair \(q rotated, k rotated\)"):
        torch.compile(Block(OneTensor(16, 8)), backend="aot_eager")(q, k, pos)


# -- an __init__ without super().__init__ ---------------------------------------------------------------------------
class SkipsBaseInit(Pair):
    """Calls nn.Module.__init__ but not RotaryEmbedding.__init__: no tables, no variant."""

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, variant: str = "partial") -> None:
        torch.nn.Module.__init__(self)
        self.head_dim = head_dim


class SkipsEveryInit(Pair):
    """Calls no base __init__ at all."""

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0, variant: str = "partial") -> None:
        self.head_dim = head_dim


@pytest.mark.parametrize("cls", [SkipsBaseInit, SkipsEveryInit])
def test_build_refuses_an_init_that_skips_the_base_init(cls):
    """``rope.build`` used to succeed; the first call then failed on ``KeyError: 'cos'`` and training on a missing
    ``variant``."""
    rope.register(f"skips_{cls.__name__.lower()}")(cls)
    with pytest.raises(TypeError) as e:
        rope.build(f"skips_{cls.__name__.lower()}", 16, 8)
    assert str(e.value) == (f"{cls.__name__}.__init__ did not call RotaryEmbedding.__init__ "
                            "(super().__init__(head_dim, max_seq_len, base, ...))")
