"""llm.checks: the count check every config reader shares, and how a refusal shows the value typed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llm.checks import as_typed, is_positive_int, positive_int
from llm.data.config import DataError
from llm.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", [True, False])
def test_a_bool_is_no_count_though_python_counts_true_as_1(value):
    assert not is_positive_int(value) and not is_positive_int(value, minimum=0)
    with pytest.raises(ConfigError) as err:
        positive_int(value, "train.max_steps")
    assert str(err.value) == f"train.max_steps={value!r} must be a positive integer"


@pytest.mark.parametrize("value", [0, -3])
def test_zero_and_negatives_are_refused_naming_the_key_and_value(value):
    assert not is_positive_int(value)
    with pytest.raises(ConfigError, match=rf"^max_new_tokens={value} must be a positive integer$"):
        positive_int(value, "max_new_tokens")


@pytest.mark.parametrize("value", [1.0, "5", [2]])
def test_a_value_of_another_type_is_refused(value):
    with pytest.raises(ConfigError) as err:
        positive_int(value, "num_samples")
    assert str(err.value) == f"num_samples={value!r} must be a positive integer"


def test_a_count_comes_back_unchanged():
    assert positive_int(1, "k") == 1 and positive_int(10**30, "k") == 10**30
    assert is_positive_int(3) and is_positive_int(0, minimum=0)


def test_minimum_zero_admits_zero_and_names_the_bound():
    assert positive_int(0, "train.ckpt_every", minimum=0) == 0
    with pytest.raises(ConfigError, match=r"^train\.ckpt_every=-1 must be an integer >= 0$"):
        positive_int(-1, "train.ckpt_every", minimum=0)


def test_null_is_refused_unless_allowed_and_then_says_so():
    with pytest.raises(ConfigError, match=r"^k=None must be a positive integer$"):
        positive_int(None, "k")
    assert positive_int(None, "k", allow_none=True) is None
    with pytest.raises(ConfigError, match=r"^model\.d_ff=0 must be a positive integer or null$"):
        positive_int(0, "model.d_ff", allow_none=True)


def test_the_error_class_the_wording_and_the_shown_value_are_the_callers():
    with pytest.raises(ValueError) as err:
        positive_int(0, "model.n_head", error=ValueError)
    assert type(err.value) is ValueError
    with pytest.raises(DataError, match=r"^data\.max_docs=abc must be a positive integer or null$"):
        positive_int("abc", "data.max_docs", allow_none=True, error=DataError, shown=str)
    with pytest.raises(ConfigError, match=r"^top_k=0 must be a positive integer, or null for no top-k cut$"):
        positive_int(0, "top_k", allow_none=True, must_be="a positive integer, or null for no top-k cut")


@pytest.mark.parametrize("value,shown", [("5", "'5'"), (None, "null"), (5, "5"), (True, "True"), (0.5, "0.5")])
def test_as_typed_quotes_a_string_and_writes_none_as_null(value, shown):
    assert as_typed(value) == shown


def test_a_value_is_shown_as_the_command_line_typed_it():
    """``train.max_steps='5'``: the quotes made it a string, and the refusal must show them."""
    with pytest.raises(ConfigError) as err:
        positive_int("5", "train.max_steps", shown=as_typed)
    assert str(err.value) == "train.max_steps='5' must be a positive integer"
    with pytest.raises(ConfigError, match=r"^train\.ckpt_every=null must be an integer >= 0$"):
        positive_int(None, "train.ckpt_every", minimum=0, shown=as_typed)


def test_importing_it_loads_neither_torch_nor_omegaconf():
    """The data and report layers use it: it must stay as light as llm.errors."""
    code = ("import sys, llm.checks\n"
            "print(sorted(m for m in ('torch', 'numpy', 'omegaconf', 'rope') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
