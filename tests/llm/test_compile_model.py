"""``llm.model.compile_model``: the one ``torch.compile`` of the trainer and the step benchmarks, with
the Inductor options the model's RoPE module asks for (the Triton entries: Inductor's static launcher
for their kernels, which took the compiled seed004 step off the host's critical path on the H100)."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from llm.model import build_model, compile_model, compile_options, export_to_compile_workers
from llm.training import trainer as trainer_mod

CFG = OmegaConf.create({"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 16})
STATIC = {"static_launch_user_defined_triton_kernels": True}


@pytest.fixture
def compiles(monkeypatch) -> list[dict]:
    """``torch.compile`` replaced by a recorder of its keyword arguments (returns the model)."""
    seen: list[dict] = []
    monkeypatch.setattr(torch, "compile", lambda model, **kw: seen.append(kw) or model)
    return seen


@pytest.mark.parametrize("name,options", [("torch", None), ("triton_v4", STATIC), ("triton_v2", STATIC)])
def test_compile_model_passes_the_rope_modules_options(name, options, compiles):
    model = build_model(CFG, {"name": name}, 50)
    assert compile_model(model, fullgraph=True) is model
    assert compiles[-1] == {"options": options, "fullgraph": True}
    compile_model(model, mode="reduce-overhead")  # torch.compile refuses mode and options together
    assert compiles[-1] == {"mode": "reduce-overhead"}


ENV = "TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS"


def test_options_reach_the_compile_workers(monkeypatch, compiles):
    """Inductor's compile workers decide the static launch and see torch.compile's options only through the
    environment: compile_model exports them and restarts a pool started without them, once."""
    from torch._inductor import async_compile

    shutdowns = []
    monkeypatch.setattr(async_compile, "shutdown_compile_workers", lambda: shutdowns.append(1))
    monkeypatch.delenv(ENV, raising=False)
    compile_model(build_model(CFG, {"name": "torch"}, 50))
    assert ENV not in os.environ and not shutdowns  # nothing asked, nothing exported
    compile_model(build_model(CFG, {"name": "triton_v4"}, 50))
    assert os.environ[ENV] == "1" and shutdowns == [1]
    compile_model(build_model(CFG, {"name": "triton_v2"}, 50))
    assert shutdowns == [1]  # already exported: the running pool has it
    monkeypatch.setenv(ENV, "0")
    assert export_to_compile_workers({"static_launch_user_defined_triton_kernels": True})
    assert os.environ[ENV] == "1" and shutdowns == [1, 1]
    code = "import torch._inductor.config as c; print(c.static_launch_user_defined_triton_kernels)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True", out  # what a worker started now reads


def test_options_this_torch_lacks_are_dropped(monkeypatch):
    model = build_model(CFG, {"name": "triton_v4"}, 50)
    monkeypatch.setattr(type(model.rotary), "inductor_options", {**STATIC, "no_such_inductor_option": 1})
    assert compile_options(model) == STATIC


def test_the_trainer_compiles_through_compile_model(monkeypatch):
    seen = []
    monkeypatch.setattr(trainer_mod, "compile_model", lambda m: seen.append(m) or m)
    model = build_model(CFG, {"name": "triton_v4"}, 50)
    fake = SimpleNamespace(tc=SimpleNamespace(compile=True), dist=SimpleNamespace(enabled=False))
    assert trainer_mod.Trainer._wrap(fake, model) is model and seen == [model]
