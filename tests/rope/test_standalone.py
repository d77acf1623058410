"""The standalone API: ``rope.rope_triton`` / ``rope.apply`` (a module per setting, built once) and
``rope.RoPEAttention`` (causal, relative positions, KV cache), importing nothing of ``llm``."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import float32_entries

import rope
from rope import functional

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
# the Triton entries run under the interpreter on the CPU (tests/conftest.py): tiny shapes only
#: Every entry that runs here, each float32 code once (the tests' tensors are float32; helpers.FLOAT32_SAME_AS)
IMPLS = float32_entries([n for n in rope.available() if rope.get(n).unavailable_reason(CPU) is None])


@pytest.fixture(autouse=True)
def fresh_module_cache():
    functional.clear_cache()
    yield
    functional.clear_cache()


@pytest.mark.parametrize("impl", IMPLS)
def test_apply_is_the_registry_module_built_once(impl, monkeypatch):
    q, k = torch.randn(2, 5, 4, 8), torch.randn(2, 5, 2, 8)
    builds = []
    real = functional.build
    monkeypatch.setattr(functional, "build", lambda *a, **kw: builds.append(a) or real(*a, **kw))
    q2, k2 = rope.apply(q, k, 16, 500.0, impl=impl, variant="full")
    eq2, ek2 = rope.build(impl, 8, 16, 500.0, variant="full")(q, k)
    torch.testing.assert_close(q2, eq2, rtol=0, atol=0)
    torch.testing.assert_close(k2, ek2, rtol=0, atol=0)
    rope.apply(q, k, 16, 500.0, impl=impl, variant="full")
    rope.apply(q[:, :3], None, 16, 500.0, impl=impl, variant="full")  # another length, same table
    assert len(builds) == 1, "the module is built once per (impl, head_dim, seq_len, theta, variant, device)"
    rope.apply(q, k, 16, 500.0, impl=impl)  # another variant: another module
    assert len(builds) == 2


def test_rope_triton_is_triton_v4_and_takes_positions():
    if rope.get("triton_v4").unavailable_reason(CPU) and not torch.cuda.is_available():
        pytest.skip("triton_v4 cannot run here")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    q, k = torch.randn(1, 6, 2, 16, device=device), torch.randn(1, 6, 2, 16, device=device)
    ref_q, ref_k = rope.apply(q, k, 32, impl="torch")
    q2, k2 = rope.rope_triton(q, k, 32)
    torch.testing.assert_close(q2, ref_q, rtol=0, atol=2e-6)
    torch.testing.assert_close(k2, ref_k, rtol=0, atol=2e-6)
    assert [key[0] for key in functional._MODULES] == ["torch", "triton_v4"]
    # the last 2 tokens of the sequence, rotated on their own at their absolute positions
    tail_q, _ = rope.rope_triton(q[:, 4:], k[:, 4:], 32, positions=torch.arange(4, 6, device=device))
    torch.testing.assert_close(tail_q, q2[:, 4:], rtol=0, atol=2e-6)


@pytest.mark.parametrize("kwargs,argument,message", [
    ({"seq_len": 0}, "seq_len", "seq_len must be a positive int, got 0"),
    ({"theta": -1.0}, "theta", "theta must be a finite number > 0, got -1.0"),
    ({"impl": "nope"}, "impl", "impl='nope': unknown RoPE implementation; available: "),
    ({"variant": "bogus"}, "variant", "variant must be one of ('partial', 'full'), got 'bogus'"),
])
def test_bad_arguments_name_the_argument(kwargs, argument, message):
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(rope.RopeArgumentError) as e:
        rope.apply(q, q, **{"seq_len": 16, **kwargs})
    assert e.value.argument == argument and str(e.value).startswith(message) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"q must be a \(B, T, H, D\) tensor"):
        rope.apply(q[0], q[0], 16)


@pytest.mark.parametrize("seq_len,given", [(16, 16.0), (16, "np.int64(16)"), (1, True)])
def test_a_refused_argument_stays_refused_after_a_call_with_its_int(seq_len, given):
    """16.0, np.int64(16) and True compare and hash equal to the ints 16 and 1: a module built for the int must not be
    handed to them. They are refused with or without an earlier call, not accepted by what ran before."""
    import numpy as np

    given = np.int64(16) if given == "np.int64(16)" else given
    q = torch.randn(1, 1, 2, 8)
    rope.apply(q, None, seq_len)
    with pytest.raises(rope.RopeArgumentError, match="seq_len must be a positive") as e:
        rope.apply(q, None, given)
    assert e.value.argument == "seq_len"


def test_the_module_cache_stays_small():
    q = torch.randn(1, 2, 1, 8)
    for length in range(4, 4 + functional.CACHE_SIZE + 5):
        rope.apply(q, q, length)
    assert len(functional._MODULES) == functional.CACHE_SIZE
    assert [key[2] for key in functional._MODULES][-1] == 4 + functional.CACHE_SIZE + 4  # newest kept


# -- RoPEAttention -------------------------------------------------------------------------------------
def _attention(impl: str, seed: int = 0) -> rope.RoPEAttention:
    torch.manual_seed(seed)
    attn = rope.RoPEAttention(32, 4, dropout=0.1, impl=impl, max_seq_len=16).eval()
    with torch.no_grad():
        attn.qkv.weight.mul_(8)  # sharp attention: positions matter to the output
    return attn


@pytest.mark.parametrize("impl", IMPLS)
def test_attention_with_the_kv_cache_equals_the_whole_sequence(impl):
    attn = _attention(impl)
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        full = attn(x)
        cache = attn.new_cache()
        pieces = [attn(x[:, :4], cache=cache), attn(x[:, 4:6], cache=cache)]  # a prompt, a chunk after it
        pieces += [attn(x[:, t:t + 1], cache=cache) for t in range(6, 9)]  # then one token at a time
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-5)
    assert full.shape == x.shape and cache.length == 9


def _without_the_interpreter(code: str) -> subprocess.CompletedProcess:
    """``code`` run in a fresh process without ``TRITON_INTERPRET`` (a CPU where no Triton kernel runs): what
    ``import rope`` does there is decided at that import, so a test of it needs a process of its own."""
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_attention_is_causal_and_rotary():
    attn = _attention("torch")
    x = torch.randn(1, 8, 32)
    with torch.no_grad():
        y = attn(x)
        x2 = x.clone()
        x2[:, 5:] += 1.0
        y2 = attn(x2)
        assert torch.equal(y2[:, :5], y[:, :5]) and (y2[:, 5:] - y[:, 5:]).abs().max() > 0.1
        # the same token at another position attends differently: positions reach the scores
        x3 = x.clone()
        x3[:, 6] = x[:, 2]
        assert (attn(x3)[:, 6] - y[:, 2]).abs().max() > 1e-3


def test_scores_depend_on_relative_positions_only():
    q, k = torch.randn(1, 6, 1, 16), torch.randn(1, 6, 1, 16)

    def scores(start: int, variant: str) -> torch.Tensor:
        pos = torch.arange(start, start + 6)
        q2, k2 = rope.apply(q, k, 64, impl="torch", variant=variant, positions=pos)
        return q2[0, :, 0] @ k2[0, :, 0].T

    for variant in ("partial", "full"):
        torch.testing.assert_close(scores(37, variant), scores(0, variant), rtol=0, atol=1e-4)
        assert (scores(0, variant) - q[0, :, 0] @ k[0, :, 0].T).abs().max() > 0.1


def test_attention_dropout_only_in_training_and_bad_arguments():
    attn = _attention("torch")
    x = torch.randn(1, 8, 32)
    assert torch.equal(attn(x), attn(x))
    attn.train()
    assert not torch.equal(attn(x), attn(x))
    with pytest.raises(ValueError, match="d_model=30 must be divisible by n_heads=4"):
        rope.RoPEAttention(30, 4)
    with pytest.raises(rope.RopeArgumentError, match="d_model/n_heads must be a multiple of 4 .*, got 6$"):
        rope.RoPEAttention(24, 4, impl="torch")
    with pytest.raises(rope.RopeArgumentError, match="impl='nope'"):
        rope.RoPEAttention(32, 4, impl="nope")
    with pytest.raises(ValueError, match=r"x must be a \(B, T, d_model=32\) tensor"):
        attn(torch.randn(1, 8, 16))
    cache = attn.eval().new_cache(max_len=4)
    attn(x[:, :4], cache=cache)
    with pytest.raises(ValueError, match="KV cache full: 4 cached \\+ 1 new positions > max_len=4"):
        attn(x[:, 4:5], cache=cache)


def test_standalone_in_a_fresh_process_imports_nothing_of_llm_and_surfaces_the_kernel_s_refusal():
    """One process for both (each costs a torch import): ``import rope`` + the API loads no ``llm``
    module, and rope_triton on CPU tensors without the interpreter is the registry's one line. And on a CPU build
    of torch, ``import rope`` leaves torch's compiler unimported (rope.triton.ops.traced_ops): it is slow to import,
    and only a compiled graph needs it."""
    code = ("import sys, torch, rope\n"
            "print(sorted(m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules))\n"
            "q = torch.randn(1, 4, 2, 8)\n"
            "rope.RoPEAttention(16, 2, impl='torch')(torch.randn(1, 3, 16)); rope.apply(q, q, 16)\n"
            "print(sorted(m for m in sys.modules if m == 'llm' or m.startswith('llm.')))\n"
            "try:\n    rope.rope_triton(q, q, 16)\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    proc = _without_the_interpreter(code)
    compiler, *lines = proc.stdout.strip().splitlines() or [""]
    if not (torch.version.cuda or torch.version.hip):
        assert compiler == "[]", proc.stdout + proc.stderr[-2000:]
    assert lines and lines[0] == "[]", proc.stdout + proc.stderr[-2000:]
    if not torch.cuda.is_available():
        assert len(lines) == 2 and "CUDA" in lines[1] and "TRITON_INTERPRET=1" in lines[1], lines


def test_a_standalone_caller_s_refusals_name_implementations_not_a_command_line():
    """Every one-line refusal a caller of ``rope`` alone can meet names implementations by their registered names
    (``liger runs on a CUDA GPU ...; use the torch implementation``), never a program's ``rope=<name>`` syntax: a
    caller of ``rope.build("liger")`` types no such thing. A fresh process without the interpreter (a CPU where no
    Triton kernel runs), and an implementation of the caller's own, for the checks no built-in one fails."""
    code = ("import inspect, torch, rope\n"
            "@rope.register('mine')\n"
            "class Mine(rope.RotaryEmbedding):\n"
            "    layouts = ('half',)\n"
            "    def __init__(self, head_dim, max_seq_len, base=10000.0, variant='partial', layout='half',\n"
            "                 rotary_dim=None, scaling=None, block=inspect.Parameter.empty):\n"
            "        super().__init__(head_dim, max_seq_len, base, variant, layout, rotary_dim, scaling)\n"
            "    def rotate(self, q, k, positions):\n"
            "        return q, k\n"
            "said = [rope.get(n).unavailable_reason('cpu') for n in rope.available()]\n"
            "said.append(rope.attention_unavailable_reason('cpu'))\n"
            "q = torch.randn(1, 4, 2, 16)\n"
            "calls = [lambda: rope.build('torch', 16, 8, foo=1), lambda: rope.check_args('mine', 16, 8),\n"
            "         lambda: rope.check_args('mine', 16, 8, block=1, layout='interleaved'),\n"
            "         lambda: rope.check_args('mine', 16, 8, block=1, rotary_dim=8),\n"
            "         lambda: rope.check_args('liger', 16, 8, layout='interleaved'),\n"
            "         lambda: rope.apply(q, q, 8, impl='liger'), lambda: rope.apply(q, q, 8, impl='triton_v4'),\n"
            "         lambda: rope.build('mine', 16, 8, block=1)(q.double(), q.double()),\n"
            "         lambda: rope.build('triton_v2', 16, 8)(q.int(), q.int())]\n"
            "for call in calls:\n"
            "    try:\n        call()\n"
            "    except Exception as e:\n        said.append(f'{type(e).__name__}: {e}')\n"
            "    else:\n        said.append(None)\n"
            "print(repr(said))\n")
    proc = _without_the_interpreter(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    refusals = [s for s in said[-9:] if s is not None]
    assert len(refusals) == 9, said  # every call of the list is refused, on a GPU machine too (CPU tensors)
    assert said[-9].startswith("UnknownRopeOptionError: torch has no option 'foo'"), said[-9]
    assert said[-8] == "RopeArgumentError: mine needs the option 'block'", said[-8]
    reasons = [s for s in said[:-9] if s is not None]
    assert any(s.startswith("triton_v4 runs on a CUDA GPU") for s in reasons), reasons
    for line in reasons + refusals:
        assert "rope=" not in line and "\n" not in line, line


def test_the_interpreter_counts_as_it_was_when_rope_was_imported():
    """``TRITON_INTERPRET=1`` set after ``import rope`` changes no answer about the CPU: rope's Triton kernels were
    defined (compiled, not interpreted) at that import, and every check says so alike (it used to make liger and
    the fused attention say yes, while triton_v4's kernels could not run). A fresh process without the variable."""
    code = ("import os, torch, rope\n"
            "def answers():\n"
            "    said = [rope.get(n).unavailable_reason('cpu') is None for n in ('triton_v4', 'triton_v2', 'liger')]\n"
            "    attn = rope.RoPEAttention(16, 2, impl='torch', max_seq_len=8, attention='fused_rope').eval()\n"
            "    try:\n        attn(torch.randn(1, 3, 16), cache=attn.new_cache())\n"
            "    except ValueError:\n        runs = False\n"
            "    else:\n        runs = True\n"
            "    return [*said, rope.attention_unavailable_reason('cpu') is None, runs]\n"
            "before = answers()\n"
            "os.environ['TRITON_INTERPRET'] = '1'\n"
            "print(before, answers())\n")
    proc = _without_the_interpreter(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == f"{[False] * 5} {[False] * 5}", proc.stdout
