"""Kernels must train the same model: same seed, same data -> the same val losses (CPU, interpreter)."""

from __future__ import annotations

import pytest
from helpers import run_inprocess, train_losses, val_losses

# float32 kernels differ from the reference only by rounding: a few float32 ulps of a loss near 11
BOUND = 5e-6
# Few steps (each runs the Triton kernels under the interpreter) at a learning rate high enough that the model
# learns to use positions within them: dropping RoPE must move the val losses far past the bound (the second test)
COMMON = ["train.max_steps=6", "train.eval_every=3", "train.eval_batches=2", "train.log_every=1", "optim.lr=1e-2",
          "seed=5"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The float32 reference run both tests compare with (trained once per worker; the tests only read it)."""
    run_dir = tmp_path_factory.mktemp("fidelity") / "torch"
    summary = run_inprocess(run_dir, ["rope=torch", *COMMON])
    return run_dir, summary


def test_triton_v4_trains_the_same_model_as_the_float32_reference(tmp_path, reference):
    ref_dir, ref = reference
    v4 = run_inprocess(tmp_path / "v4", ["rope=triton_v4", *COMMON])
    assert v4["rope"] == "triton_v4" and ref["rope"] == "torch"
    ref_val, v4_val = val_losses(ref_dir), val_losses(tmp_path / "v4")
    assert ref_val.keys() == v4_val.keys() == {3, 6}
    for step in ref_val:
        assert abs(ref_val[step] - v4_val[step]) < BOUND, (step, ref_val[step], v4_val[step])
    ref_tr, v4_tr = train_losses(ref_dir), train_losses(tmp_path / "v4")
    assert max(abs(ref_tr[s] - v4_tr[s]) for s in ref_tr) < BOUND


def test_no_rope_trains_a_different_model(tmp_path, reference):
    """The bound above is meaningful: dropping RoPE moves the losses by far more."""
    ref_dir, _ = reference
    run_inprocess(tmp_path / "none", ["rope=none", *COMMON])
    diffs = [abs(a - b) for a, b in zip(val_losses(ref_dir).values(),
                                        val_losses(tmp_path / "none").values(), strict=True)]
    assert max(diffs) > 20 * BOUND, diffs
