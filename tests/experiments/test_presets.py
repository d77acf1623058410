"""The seed experiment's presets: Muon + AdamW, the seed004 model, the experiment recipes."""

from __future__ import annotations

import pytest
import torch
from helpers import compose_cfg, run_inprocess

from llm.model import build_model
from llm.optim import build_optimizers, lr_multiplier

SEED004_SMALL = ["+experiment=seed004", "model.n_layer=1", "model.n_embd=96", "model.d_ff=192", "model.seq_len=32",
                 "train.batch_size=4", "train.grad_accum=2", "train.eval_batches=2", "train.eval_every=5"]


def test_seed004_preset_is_the_seed_model_and_recipe():
    cfg = compose_cfg(["+experiment=seed004"], small=False)
    m = cfg.model
    assert (m.n_embd, m.n_head, m.n_layer, m.d_ff, m.seq_len) == (384, 8, 6, 1536, 512)
    assert m.mlp == "silu" and m.dropout == 0.1 and m.tie_embeddings and m.scale_embeddings
    assert cfg.optim.name == "muon" and cfg.optim.muon_lr == 0.01 and cfg.optim.adamw_lr == pytest.approx(0.001)
    assert cfg.optim.momentum == 0.95 and cfg.optim.nesterov and cfg.optim.weight_decay == 0.1
    t = cfg.train
    assert (t.batch_size, t.grad_accum, t.eval_every, t.eval_batches) == (24, 4, 500, 100)
    assert t.grad_clip == 1.0 and t.warmup_frac == 0.05 and t.min_lr_frac == 0.1
    model = build_model(m, cfg.rope, vocab_size=1000)
    assert model.cfg.head_dim == 48
    assert torch.count_nonzero(model.rotary.cos[:, 12:] != 1) == 0  # 12 real + 12 zero frequencies


def test_muon_takes_block_matrices_and_adamw_the_rest():
    cfg = compose_cfg(["+experiment=seed004", "model.n_layer=2"])
    model = build_model(cfg.model, cfg.rope, vocab_size=1000)
    muon, adamw = build_optimizers(model, cfg.optim, torch.device("cpu"))
    assert isinstance(muon, torch.optim.Muon) and isinstance(adamw, torch.optim.AdamW)
    names = {id(p): n for n, p in model.named_parameters()}
    muon_names = {names[id(p)] for g in muon.param_groups for p in g["params"]}
    adamw_names = {names[id(p)] for g in adamw.param_groups for p in g["params"]}
    assert muon_names and all(n.startswith("blocks.") and "norm" not in n for n in muon_names)
    assert "embed.weight" in adamw_names and any("norm" in n for n in adamw_names)
    assert not muon_names & adamw_names
    assert len(muon_names) + len(adamw_names) == len(list(model.parameters()))
    assert model.head.weight is model.embed.weight  # the head is tied: it trains with AdamW
    assert muon.param_groups[0]["lr"] == 0.01 and adamw.param_groups[0]["lr"] == pytest.approx(0.001)


def test_schedule_warms_up_then_decays_to_min_fraction():
    assert lr_multiplier(0, 100, 5, 0.1) == pytest.approx(0.2)
    assert lr_multiplier(4, 100, 5, 0.1) == pytest.approx(1.0)
    assert lr_multiplier(5, 100, 5, 0.1) == pytest.approx(1.0)
    assert lr_multiplier(100, 100, 5, 0.1) == pytest.approx(0.1)
    assert 0.1 < lr_multiplier(50, 100, 5, 0.1) < 1.0


def test_seed004_run_steps_both_optimizers_and_resume_restores_them(tmp_path, monkeypatch):
    import llm.training.trainer as train_mod

    captured = {}
    real_build = train_mod.build_optimizers

    def spy(model, cfg, device):
        opts = real_build(model, cfg, device)
        captured["model"], captured["opts"] = model, opts
        captured["before"] = {n: p.detach().clone() for n, p in model.named_parameters()}
        return opts

    monkeypatch.setattr(train_mod, "build_optimizers", spy)
    summary = run_inprocess(tmp_path, [*SEED004_SMALL, "train.max_steps=2", "train.stop_at_step=1"])
    assert summary["status"] == "interrupted" and summary["optim"] == "muon"
    muon, adamw = captured["opts"]
    model, before = captured["model"], captured["before"]
    names = {id(p): n for n, p in model.named_parameters()}
    for opt in (muon, adamw):
        for p in (p for g in opt.param_groups for p in g["params"]):
            assert not torch.equal(p.detach(), before[names[id(p)]]), f"{names[id(p)]} did not change"
            assert opt.state[p], f"{type(opt).__name__} holds no state for {names[id(p)]}"
    saved = {i: {k: v.clone() for k, v in opt.state_dict()["state"][0].items()} for i, opt in enumerate((muon, adamw))}

    summary = run_inprocess(tmp_path, [*SEED004_SMALL, "train.max_steps=2", "train.stop_at_step=1",
                                       "train.resume=auto"])
    # stop_at_step=1: resuming at step 1 runs no step, so the restored state is exactly what was saved
    assert summary["step"] == 1
    muon2, adamw2 = captured["opts"]
    for i, opt in enumerate((muon2, adamw2)):
        state0 = opt.state_dict()["state"][0]
        for k, v in saved[i].items():
            assert torch.equal(state0[k], v), f"{type(opt).__name__} state {k} not restored"


COMPARISONS = {"rope_quality": ("torch,torch_bf16,triton_v2,triton_v4,liger", "0,1,2"),
               "rope_variant": ("torch,torch_full", "range(20)"), "fidelity": ("torch,triton_v4,triton_v2", "0,1,2")}


@pytest.mark.parametrize("experiment", sorted(COMPARISONS))
def test_comparison_experiments_are_the_low_noise_recipe_on_the_code_corpus(experiment):
    """One recipe for every comparison: the seed recipe (model, optimizer, loop), deterministic, 1000 steps, the
    code corpus (built on first use: no data.path to prepare), K jobs per GPU; only rope and seed vary."""
    from omegaconf import OmegaConf

    from llm.config_check import validate_config

    raw = OmegaConf.load(compose_cfg.__globals__["CONF"] / "experiment" / f"{experiment}.yaml")
    params = raw.hydra.sweeper.params
    assert set(params) == {"rope", "seed"} and (str(params.rope), str(params.seed)) == COMPARISONS[experiment]
    cfg = compose_cfg([f"+experiment={experiment}"], small=False)
    seed = compose_cfg(["+experiment=seed004"], small=False)
    assert cfg.model == seed.model and cfg.optim == seed.optim and cfg.sweep.name == experiment
    for key in ("batch_size", "grad_accum", "grad_clip", "warmup_frac", "min_lr_frac", "dtype"):
        assert cfg.train[key] == seed.train[key], key
    t = cfg.train
    assert t.deterministic is True and t.compile is True
    assert (t.max_steps, t.eval_every, t.eval_batches) == (1000, 100, 40)
    assert cfg.data.name == "code_corpus" and cfg.data.manifest is None
    validate_config(compose_cfg([f"+experiment={experiment}", "rope=torch", "device=cpu"], small=False))


def test_the_recipe_reads_its_corpus_at_most_once():
    """1000 steps of the recipe draw 49M tokens: less than one pass over the code corpus an H200 image gives
    (88.6M train tokens, docs/results.md §4)."""
    t = compose_cfg(["+experiment=rope_variant"], small=False).train
    assert t.max_steps * t.batch_size * t.grad_accum * 512 == 49_152_000 < 88_600_000
