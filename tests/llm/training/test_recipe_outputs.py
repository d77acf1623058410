"""What a run records for the report (its data fingerprint, the final eval's per-window losses) and the
comparison recipe's speed options (Liger's fused linear + cross-entropy, Inductor's deterministic mode)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import run_inprocess
from omegaconf import OmegaConf

import llm.training.trainer as trainer_mod
from llm.data import prepare_data, val_window_starts
from llm.errors import ConfigError
from llm.model import build_model
from llm.training.trainer import FusedLinearCrossEntropy, Trainer, check_train_config, inductor_determinism


def test_a_run_records_its_data_and_the_final_evals_windows(tmp_path):
    summary = run_inprocess(tmp_path, ["train.max_steps=10", "train.eval_every=5", "train.eval_batches=2"])
    cfg = OmegaConf.load(tmp_path / "config.yaml")
    data = prepare_data(cfg.data, cfg.tokenizer.name, cfg.cache_dir)
    fp = summary["data_fingerprint"]
    assert fp["id"] == data.meta["data_id"] and fp["source"] == "pystdlib" and fp["tokenizer"] == "bytes"
    assert fp["tokens_sha256"] == data.meta["sha256"] and fp["split"]["val_fraction"] == 0.2
    assert summary["train_passes"] == pytest.approx(10 * 4 * 32 / len(data.train))
    windows = json.loads((tmp_path / "eval_windows.json").read_text())
    assert windows["step"] == 10 and windows["seq_len"] == 32
    n = cfg.train.eval_batches * cfg.train.batch_size
    starts = val_window_starts(len(data.val), cfg.train.batch_size, 32, cfg.train.eval_batches, spread=True)
    assert windows["starts"] == starts.tolist() and len(windows["loss"]) == n
    assert windows["starts"][-1] > (len(data.val) - 1) // 2  # spread over the whole val split, not its head
    # every window holds seq_len tokens, so the mean of the window means is the eval's loss
    assert np.mean(windows["loss"]) == pytest.approx(summary["val_loss"], rel=1e-9)
    assert np.std(windows["loss"], ddof=1) / np.sqrt(n) == pytest.approx(summary["val_loss_se"], rel=1e-6)


def test_the_spread_val_windows_are_fixed_and_cover_the_stream():
    tokens = np.arange(10_001, dtype=np.uint16)
    starts = val_window_starts(len(tokens), 4, 10, 3, spread=True)
    assert len(starts) == 12 and starts[0] == 0 and starts[-1] > 9000 and np.all(starts % 10 == 0)
    assert np.all(np.diff(starts) >= 10)  # non-overlapping
    assert val_window_starts(len(tokens), 4, 10, 3).tolist() == list(range(0, 120, 10))  # the first windows


@pytest.mark.interpreter
def test_fused_linear_cross_entropy_is_the_models_own_loss():
    """Liger's fused head + loss gives the model's mean cross-entropy and the same gradients (float32, CPU)."""
    torch.manual_seed(0)
    model = build_model(OmegaConf.create({"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 16}), {"name": "torch"},
                        300)
    x, y = torch.randint(0, 300, (2, 16)), torch.randint(0, 300, (2, 16))
    _, want = model(x, y)
    want.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    fused = FusedLinearCrossEntropy(model)
    logits, got = fused(x, y)
    got.backward()
    assert logits is None and got.item() == pytest.approx(want.item(), rel=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[name], rtol=1e-4, atol=1e-6, msg=name)
    assert fused.rotary is model.rotary


def _compiled_fused(monkeypatch, model):
    """The module a compiled fused-loss run trains through (Trainer._wrap), compiled by aot_eager: Dynamo and
    AOTAutograd as on the GPU, without Inductor's code generation."""
    monkeypatch.setattr(trainer_mod, "compile_model", lambda m: torch.compile(m, backend="aot_eager"))
    fake = SimpleNamespace(tc=OmegaConf.create({"compile": True, "fused_linear_ce": True}),
                           dist=SimpleNamespace(enabled=False))
    return Trainer._wrap(fake, model)


def test_a_compiled_fused_loss_forward_compiles_the_hidden_states_and_runs_the_loss_eagerly(monkeypatch):
    """train.compile=true with train.fused_linear_ce=true: Dynamo must not trace the loss (it cannot trace Liger's
    fused linear cross-entropy); a stand-in loss sees itself called outside compilation, every step, and the
    loss and gradients are the eager forward's."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = build_model(OmegaConf.create({"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 16}), {"name": "torch"},
                        300)
    compiled = _compiled_fused(monkeypatch, model)
    calls = []

    class StandIn(torch.nn.Module):
        def forward(self, weight, hidden, targets):
            calls.append(torch.compiler.is_compiling())
            return torch.nn.functional.cross_entropy(hidden @ weight.T, targets)

    compiled._orig_mod.loss = StandIn()
    x, y = torch.randint(0, 300, (2, 16)), torch.randint(0, 300, (2, 16))
    _, want = model(x, y)
    want.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    for _ in range(2):
        _, got = compiled(x, y)
        got.backward()
    assert calls == [False, False], "the loss ran inside the compiled graph"
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, 2 * grads[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.interpreter
def test_liger_fused_loss_under_a_compiled_model_is_the_models_own_loss(monkeypatch):
    """Liger's real kernel (the Triton interpreter on the CPU) behind the compiled hidden states."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = build_model(OmegaConf.create({"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 16}), {"name": "torch"},
                        300)
    x, y = torch.randint(0, 300, (2, 16)), torch.randint(0, 300, (2, 16))
    _, want = model(x, y)
    _, got = _compiled_fused(monkeypatch, model)(x, y)
    got.backward()
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    assert all(p.grad is not None for p in model.parameters())


def test_fused_linear_ce_is_refused_in_one_line_without_liger(monkeypatch):
    tc = OmegaConf.load(trainer_mod.Path(__file__).resolve().parents[3] / "conf" / "train" / "default.yaml")
    tc.fused_linear_ce = True
    check_train_config(tc)  # installed here ([liger])
    monkeypatch.setattr(trainer_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError) as err:
        check_train_config(tc)
    assert str(err.value) == "train.fused_linear_ce=true needs Liger-Kernel: pip install -e '.[liger]'"
    tc.fused_linear_ce = "yes"
    with pytest.raises(ConfigError, match="train.fused_linear_ce='yes' must be true or false"):
        check_train_config(tc)


def test_compiling_sets_inductors_deterministic_mode_to_the_runs(monkeypatch):
    """A compiled deterministic run turns Inductor's deterministic mode on, and the next compiled run (another job
    of the sweep, same process) turns it off again; the fused-loss forward is what gets compiled."""
    from torch._inductor import config as inductor_config

    compiled = []
    monkeypatch.setattr(trainer_mod, "compile_model", lambda m: compiled.append(m) or m)
    monkeypatch.setattr(inductor_config, "deterministic", False)
    model = build_model(OmegaConf.create({"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 16}), {"name": "torch"},
                        300)

    def wrap(**train):
        fake = SimpleNamespace(tc=OmegaConf.create(train), dist=SimpleNamespace(enabled=False))
        return Trainer._wrap(fake, model)

    assert wrap(compile=True, deterministic=True, fused_linear_ce=True) is compiled[-1]
    assert inductor_config.deterministic is True and isinstance(compiled[-1], FusedLinearCrossEntropy)
    assert wrap(compile=True, deterministic=False) is model and inductor_config.deterministic is False
    inductor_determinism(True)
    assert inductor_config.deterministic is True
    assert wrap(compile=False, deterministic=False) is model and len(compiled) == 2


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [False, True])
def test_compiled_deterministic_runs_repeat_bit_for_bit(tmp_path, fused):
    """The comparison recipe's promise on a GPU: train.compile=true under train.deterministic=true (and with
    Liger's fused loss) gives the same train and val losses, bit for bit, when one seed is run twice."""
    from helpers import train_losses, val_losses

    if fused:
        pytest.importorskip("liger_kernel")
    common = ["+experiment=seed004", "model.n_layer=2", "train.batch_size=8", "train.grad_accum=2",
              "train.max_steps=30", "train.log_every=5", "train.eval_every=10", "train.eval_batches=2",
              "train.sample_every=0", "train.compile=true", "train.deterministic=true", "device=cuda",
              f"train.fused_linear_ce={str(fused).lower()}"]
    a, b = (run_inprocess(tmp_path / name, common) for name in ("a", "b"))
    assert a["status"] == b["status"] == "completed"
    assert train_losses(tmp_path / "a") == train_losses(tmp_path / "b")
    assert val_losses(tmp_path / "a") == val_losses(tmp_path / "b") and len(val_losses(tmp_path / "a")) == 3
