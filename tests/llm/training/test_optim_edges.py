"""The optimizers and the learning-rate schedule as training relies on them: the lr of every step, which parameters
each optimizer steps and decays, clipping, grad accumulation, and an exact resume of optimizer state."""

from __future__ import annotations

import pytest
import torch
from helpers import compose_cfg, read_metrics, run_inprocess

from llm.config_check import check_config_keys, validate_config
from llm.model import build_model
from llm.optim import build_optimizers, lr_multiplier
from llm.training.distributed import DistInfo
from llm.training.trainer import Trainer

CPU = torch.device("cpu")
#: model shapes whose parameters differ in kind: tied (the default), untied with biases, grouped-query attention
SHAPES = [[], ["model.tie_embeddings=false", "+model.bias=true"], ["+model.n_kv_head=1"]]


def _model_and_optimizers(overrides: list[str]) -> tuple[torch.nn.Module, list[torch.optim.Optimizer]]:
    cfg = compose_cfg(overrides)
    model = build_model(cfg.model, cfg.rope, vocab_size=300)
    return model, build_optimizers(model, cfg.optim, CPU)


def _decay_of(model: torch.nn.Module, optimizers: list[torch.optim.Optimizer]) -> dict[str, list[float]]:
    """Each parameter's name and the weight decay of every group that holds it (two entries: held twice)."""
    names = {id(p): n for n, p in model.named_parameters()}
    held: dict[str, list[float]] = {}
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                held.setdefault(names[id(p)], []).append(group["weight_decay"])
    return held


# -- the schedule -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("max_steps", "warmup", "floor"), [(10, 3, 0.1), (1, 0, 0.1), (5, 0, 0.0), (4, 4, 0.1),
                                                            (7, 1, 1.0)])
def test_schedule_at_its_landmarks(max_steps, warmup, floor):
    """Step index i (metrics' step i + 1): warmup (i + 1) / W, the peak at the last warmup step, then a cosine from
    the peak at i = W towards ``floor`` at i = max_steps; never above 1 nor below the floor."""
    values = [lr_multiplier(i, max_steps, warmup, floor) for i in range(max_steps)]
    if warmup:
        assert values[0] == pytest.approx(1 / warmup) and values[warmup - 1] == pytest.approx(1.0)
    else:
        assert values[0] == 1.0
    assert all(floor - 1e-12 <= v <= 1.0 + 1e-12 for v in values)
    assert lr_multiplier(max_steps, max_steps, warmup, floor) == pytest.approx(1.0 if warmup == max_steps else floor)
    decay = values[warmup:]
    assert decay == sorted(decay, reverse=True), "the cosine part never rises"


def test_each_logged_step_trained_at_the_schedule_lr(tmp_path):
    """metrics.jsonl's lr at step s is the lr of the update that made step s: multiplier(s - 1) x the base lr."""
    run_inprocess(tmp_path, ["train.max_steps=5", "train.warmup_frac=0.4", "train.log_every=1", "train.eval_every=5",
                             "optim.lr=0.01"])
    logged = {m["step"]: m["lr"] for m in read_metrics(tmp_path) if m["kind"] == "train"}
    assert logged == {s: 0.01 * lr_multiplier(s - 1, 5, 2, 0.1) for s in range(1, 6)}
    assert logged[1] == pytest.approx(0.005) and logged[2] == pytest.approx(0.01)


# -- which parameters each optimizer steps and decays --------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("optim", ["adamw", "muon"])
def test_every_parameter_in_exactly_one_group(optim, shape):
    model, optimizers = _model_and_optimizers([f"optim={optim}", *shape])
    held = _decay_of(model, optimizers)
    assert set(held) == {n for n, _ in model.named_parameters()}, "a parameter no optimizer steps"
    assert all(len(v) == 1 for v in held.values()), {n: v for n, v in held.items() if len(v) != 1}
    stepped = [p for opt in optimizers for g in opt.param_groups for p in g["params"]]
    assert len({id(p) for p in stepped}) == len(stepped) == len(list(model.parameters()))
    if model.cfg.tie_embeddings:  # the head is the embedding: one tensor, once, with AdamW
        assert model.head.weight is model.embed.weight and "head.weight" not in held
    if optim == "muon":
        muon, adamw = optimizers
        in_muon = {id(p) for g in muon.param_groups for p in g["params"]}
        assert in_muon == {id(p) for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() == 2}


@pytest.mark.parametrize("shape", SHAPES)
def test_adamw_decays_matrices_only(shape):
    model, optimizers = _model_and_optimizers(["optim=adamw", "optim.weight_decay=0.1", *shape])
    for name, (decay,) in _decay_of(model, optimizers).items():
        p = model.get_parameter(name)
        assert decay == (0.1 if p.dim() >= 2 and "embed" not in name else 0.0), name


@pytest.mark.parametrize("shape", SHAPES)
def test_muon_adamw_weight_decay_spares_norms_and_biases(shape):
    """optim.adamw_weight_decay decays AdamW's matrices (the embedding, an untied head), never a norm's gain or a
    bias: decay pulls an RMSNorm gain towards 0 (it decayed every one before)."""
    model, optimizers = _model_and_optimizers(["optim=muon", "optim.weight_decay=0.1",
                                               "optim.adamw_weight_decay=0.05", *shape])
    muon = {id(p) for g in optimizers[0].param_groups for p in g["params"]}
    for name, (decay,) in _decay_of(model, optimizers).items():
        p = model.get_parameter(name)
        expected = 0.1 if id(p) in muon else 0.05 if p.dim() >= 2 else 0.0
        assert decay == expected, name


def test_muon_without_adamw_decay_keeps_one_adamw_group():
    """The default (adamw_weight_decay 0) keeps AdamW's single group: its checkpoints' optimizer state still loads."""
    _, (_, adamw) = _model_and_optimizers(["optim=muon"])
    assert len(adamw.param_groups) == 1 and adamw.param_groups[0]["weight_decay"] == 0.0


# -- one step of the trainer: clipping, accumulation ---------------------------------------------------------------
def _trainer(tmp_path, overrides: list[str]) -> Trainer:
    cfg = compose_cfg(["train.max_steps=4", *overrides])
    return Trainer(cfg, tmp_path, DistInfo())


def _fixed_rows(trainer: Trainer, rows: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Feed micro-batch m the m-th slice of ``rows`` (as many rows as train.batch_size)."""
    x, y = rows
    b = trainer.tc.batch_size
    trainer.batch = lambda micro: (x[micro * b:(micro + 1) * b], y[micro * b:(micro + 1) * b], {})


def _grads_at_step(trainer: Trainer) -> list[dict[str, torch.Tensor]]:
    """Record, at each optimizer step of ``trainer``, the gradients the optimizers are about to apply."""
    seen: list[dict[str, torch.Tensor]] = []
    opt = trainer.optimizers[0]
    real_step = opt.step

    def spy(*args: object, **kwargs: object) -> object:
        seen.append({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})
        return real_step(*args, **kwargs)

    opt.step = spy
    return seen


def test_grad_accumulation_equals_one_larger_batch(tmp_path):
    """N micro-batches of B rows give the optimizers the gradient (after clipping) and the loss of one batch of
    N x B rows, at every step (to float rounding)."""
    torch.manual_seed(0)
    rows = torch.randint(0, 300, (8, 33))
    rows = rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
    runs = []
    for i, (batch, accum) in enumerate(((8, 1), (2, 4))):
        # on the CPU wherever the test runs: the rows below are CPU tensors, and float32 without autocast; cl100k's
        # vocabulary, whose embedding rows each see a few of the rows' tokens (atol is that rounding's)
        t = _trainer(tmp_path / str(i), [f"train.batch_size={batch}", f"train.grad_accum={accum}",
                                         "train.grad_clip=0.5", "device=cpu", "tokenizer=cl100k_base"])
        _fixed_rows(t, rows)
        seen = _grads_at_step(t)
        results = [t.train_step(), t.train_step()]
        runs.append((results, seen))
    (one, one_grads), (accum, accum_grads) = runs
    for r1, r2 in zip(one, accum, strict=True):
        assert r2.loss == pytest.approx(r1.loss, rel=1e-5) and r2.grad_norm == pytest.approx(r1.grad_norm, rel=1e-4)
    assert len(one_grads) == len(accum_grads) == 2
    for g1, g2 in zip(one_grads, accum_grads, strict=True):
        assert g1.keys() == g2.keys()
        for name in g1:
            torch.testing.assert_close(g2[name], g1[name], rtol=1e-4, atol=1e-7, msg=name)


def test_clipping_scales_the_global_norm(tmp_path):
    """train.grad_clip bounds the norm of all the gradients together (each tensor once, the tied one too), and the
    norm logged is the one before clipping."""
    t = _trainer(tmp_path, ["train.grad_clip=0.01", "optim=muon"])
    seen = _grads_at_step(t)
    result = t.train_step()
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in seen[0].values()])).item()
    assert result.grad_norm > 0.01 and norm == pytest.approx(0.01, rel=1e-4)
    assert len(seen[0]) == len(list(t.model.parameters())), "every parameter has its gradient, the tied one once"


# -- resume --------------------------------------------------------------------------------------------------------
def test_muon_resume_with_accumulation_continues_bitwise(tmp_path):
    """A run stopped at step 2 and resumed logs the uninterrupted run's losses, lrs and grad norms exactly, and ends
    with the same weights and optimizer state."""
    steps = ["optim=muon", "optim.adamw_weight_decay=0.01", "train.max_steps=4", "train.warmup_frac=0.5",
             "train.grad_accum=2", "train.log_every=1", "train.eval_every=4", "train.batch_size=2"]
    run_inprocess(tmp_path / "full", steps)
    run_inprocess(tmp_path / "resumed", [*steps, "train.stop_at_step=2"])
    run_inprocess(tmp_path / "resumed", [*steps, "train.resume=auto"])

    def logged(run):
        return [(m["step"], m["loss"], m["lr"], m["lr_adamw"], m["grad_norm"])
                for m in read_metrics(run) if m["kind"] == "train"]

    assert logged(tmp_path / "resumed") == logged(tmp_path / "full")
    a, b = (torch.load(r / "checkpoints" / "last.pt", weights_only=False) for r in (tmp_path / "full",
                                                                                     tmp_path / "resumed"))
    for name, w in a["model"].items():
        assert torch.equal(b["model"][name], w), name
    for opt_a, opt_b in zip(a["optimizers"], b["optimizers"], strict=True):
        assert opt_a["param_groups"] == opt_b["param_groups"]
        for index, state in opt_a["state"].items():
            for key, value in state.items():
                assert torch.equal(torch.as_tensor(opt_b["state"][index][key]), torch.as_tensor(value)), (index, key)


# -- refusals ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["optim.lr=-0.1"], "optim.lr=-0.1 must be a finite number > 0"),
        (["optim.betas=[0.9,1.0]"], "optim.betas=[0.9, 1.0] must be a list of two numbers in [0, 1)"),
        (["optim.betas=[-0.1,0.9]"], "optim.betas=[-0.1, 0.9] must be a list of two numbers in [0, 1)"),
        (["optim.eps=0"], "optim.eps=0 must be a finite number > 0"),
        (["optim=muon", "optim.adamw_weight_decay=-1"], "optim.adamw_weight_decay=-1 must be a finite number >= 0"),
        (["optim=muon", "optim.momentum=1"], "optim.momentum=1 must be a number in [0, 1)"),
        (["optim=muon", "optim.ns_steps=100"], "optim.ns_steps=100 must be an integer >= 1 (Newton-Schulz "
                                                "iterations) and < 100"),
        (["train.warmup_frac=-0.1"], "train.warmup_frac=-0.1 must be in [0, 1)"),
        (["train.min_lr_frac=1.5"], "train.min_lr_frac=1.5 must be in [0, 1]"),
        (["train.grad_clip=-1"], "train.grad_clip=-1 must be a finite number >= 0"),
        (["+optim.muon_lr=0.1"], "optim.muon_lr is a key of optim=muon only"),
        (["optim=muon", "+optim.lr=0.1"], "optim.lr is a key of optim=adamw only"),
    ],
)
def test_bad_optim_and_schedule_values_are_one_line(overrides, message):
    cfg = compose_cfg(overrides)
    with pytest.raises(ValueError) as exc:
        check_config_keys(cfg)
        validate_config(cfg)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_muon_ns_steps_below_torchs_limit_trains():
    """The largest ns_steps the check accepts is one torch.optim.Muon steps with (100 failed at the first step)."""
    cfg = compose_cfg(["optim=muon", "optim.ns_steps=99"])
    validate_config(cfg)
    model = build_model(cfg.model, cfg.rope, vocab_size=300)
    muon, _ = build_optimizers(model, cfg.optim, CPU)
    for group in muon.param_groups:
        for p in group["params"]:
            p.grad = torch.ones_like(p)
    muon.step()


def test_a_checkpoint_of_other_parameter_groups_is_one_line_on_resume(tmp_path):
    """A Muon run with adamw_weight_decay > 0 saved before norms and biases were exempted holds one AdamW group,
    where this code makes two: torch's load_state_dict raised its ValueError, a traceback."""
    from llm.errors import ResumeError
    from llm.training.run import run_training

    steps = ["optim=muon", "optim.adamw_weight_decay=0.01", "train.max_steps=4", "train.eval_every=4"]
    run_inprocess(tmp_path / "run", [*steps, "train.stop_at_step=2"])
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    state = torch.load(last, weights_only=False)
    groups = state["optimizers"][1]["param_groups"]
    merged = {**groups[0], "params": [i for g in groups for i in g["params"]]}  # the old code's one group
    state["optimizers"][1]["param_groups"] = [merged]
    torch.save(state, last)
    resume = [*steps, "train.resume=auto"]
    with pytest.raises(ResumeError, match=r"its AdamW state does not fit this code's parameter groups .*start a new "
                                          r"run, or train.init_from="):
        run_training(compose_cfg(resume), tmp_path / "run", resume)
