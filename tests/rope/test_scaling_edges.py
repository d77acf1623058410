"""RoPE scaling at the edges of what its checks accept (``rope/scaling.py``).

A scaling dict that ``check_args`` accepts must build, and one it refuses must be refused in one
:class:`rope.RopeArgumentError` naming the parameter, never a traceback from the arithmetic after it:

* ``test_extreme_betas_build_as_they_check``: YaRN's beta_fast / beta_slow are any finite numbers > 0; one far
  from 1 made ``length / (beta 2 pi)`` overflow or underflow and ``math.log`` / ``math.ceil`` raise at build time,
  after ``check_args`` (and a training run's config check) had passed.
* ``test_huge_ints_are_refused_naming_the_parameter``: an int too large for a float (YAML reads ``1`` followed
  by 400 zeros as one) raised OverflowError from ``math.isfinite`` (or later, from the frequencies' arithmetic);
  it is refused in one short line (its size, not its digits).
* ``test_other_real_numbers_build_like_floats``: a ``fractions.Fraction`` passes the checks as a real number,
  then torch could not divide the frequencies by it.
* ``test_numpy_int_original_len_says_how_to_convert``: "must be a positive int, got np.int64(16)" read as a
  contradiction; the message now says what ``rope.build``'s own int arguments say.
"""

from __future__ import annotations

import fractions

import numpy as np
import pytest
import torch

import rope
from rope.scaling import normalize_scaling

YARN = {"type": "yarn", "factor": 4.0, "original_max_seq_len": 16}
HUGE = 10**400  # no float holds it


def _build_both(scaling: dict) -> rope.RotaryEmbedding:
    rope.check_args("torch", 32, 64, variant="full", scaling=scaling)
    return rope.build("torch", 32, 64, variant="full", scaling=scaling)


@pytest.mark.parametrize("extreme,moderate", [
    ({"beta_fast": 1e308}, {"beta_fast": 1e200}),  # beta_fast * 2 pi overflows: log(0)
    ({"beta_slow": 1e-308}, {"beta_slow": 1e-200}),  # length / (beta_slow 2 pi) overflows: ceil(inf)
    ({"beta_fast": 1e308, "beta_slow": 1e-308}, {"beta_fast": 1e200, "beta_slow": 1e-200}),
])
@pytest.mark.parametrize("truncate", [True, False])
def test_extreme_betas_build_as_they_check(extreme, moderate, truncate):
    """Both clamp the ramp to the same ends (all extrapolated below, all interpolated above): the same table."""
    r = _build_both({**YARN, **extreme, "truncate": truncate})
    ref = _build_both({**YARN, **moderate, "truncate": truncate})
    assert r.cos.isfinite().all() and r.sin.isfinite().all()
    assert torch.equal(r.cos, ref.cos) and torch.equal(r.sin, ref.sin)


@pytest.mark.parametrize("scaling,argument", [
    ({"type": "linear", "factor": HUGE}, "scaling.factor"),
    ({**YARN, "beta_fast": HUGE}, "scaling.beta_fast"),
    ({**YARN, "mscale": HUGE}, "scaling.mscale"),
    ({**YARN, "attention_factor": HUGE}, "scaling.attention_factor"),
    ({"type": "llama3", "factor": 8.0, "original_max_seq_len": 64, "high_freq_factor": HUGE},
     "scaling.high_freq_factor"),
    ({**YARN, "original_max_seq_len": HUGE}, "scaling.original_max_seq_len"),
    ({"type": "llama3", "factor": 8.0, "original_max_seq_len": HUGE}, "scaling.original_max_seq_len"),
    ({"type": "dynamic_ntk", "factor": 2.0, "original_max_seq_len": HUGE}, "scaling.original_max_seq_len"),
], ids=lambda v: v if isinstance(v, str) else v["type"])
def test_huge_ints_are_refused_naming_the_parameter(scaling, argument):
    for call in (rope.check_args, rope.build):
        with pytest.raises(rope.RopeArgumentError) as err:
            call("torch", 32, 64, variant="full", scaling=scaling)
        assert err.value.argument == argument
        text = str(err.value)
        assert text.startswith(argument) and "\n" not in text and len(text) < 200, text  # not its 401 digits


def test_other_real_numbers_build_like_floats():
    """A Fraction (or a NumPy float) factor gives the table of the float it equals, and a plain float in r.scaling."""
    for factor, same in ((fractions.Fraction(3, 2), 1.5), (np.float32(2.0), 2.0), (np.float64(2.5), 2.5)):
        for kind in ("linear", "ntk", "yarn", "llama3", "dynamic_ntk"):
            extra = {} if kind in ("linear", "ntk") else {"original_max_seq_len": 16}
            r = _build_both({"type": kind, "factor": factor, **extra})
            ref = _build_both({"type": kind, "factor": same, **extra})
            x = torch.randn(1, 40, 1, 32)
            assert torch.equal(r(x), ref(x)), f"{kind} x{factor!r}"
            assert type(r.scaling["factor"]) is float and r.describe() == ref.describe()
    assert normalize_scaling({**YARN, "beta_slow": fractions.Fraction(1, 2)})["beta_slow"] == 0.5


def test_numpy_int_original_len_says_how_to_convert():
    with pytest.raises(rope.RopeArgumentError, match=r"positive Python int, got np\.int64\(16\).*int\(\)") as err:
        rope.build("torch", 32, 64, scaling={**YARN, "original_max_seq_len": np.int64(16)})
    assert err.value.argument == "scaling.original_max_seq_len"
    assert normalize_scaling({**YARN, "original_max_seq_len": 16})["original_max_seq_len"] == 16  # an int stays one
