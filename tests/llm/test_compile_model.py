"""``llm.model.compile_model``: the one ``torch.compile`` of the trainer and the step benchmarks, with
the Inductor options the model's RoPE module asks for (the Triton entries: Inductor's static launcher
for their kernels, which took the compiled seed004 step off the host's critical path on the H100)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from llm.model import build_model, compile_model, compile_options
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
