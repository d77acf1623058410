"""What the report's pairing by seed rests on: runs of one seed start alike and draw alike, whatever their RoPE.

The report pairs each implementation's run with the reference's run of the same seed; the pairing removes the
seed's share of the noise only where both runs start from the same weights, read the same batches and draw the
same dropout masks, and where a resumed run goes on drawing as it would have without the stop.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from llm.errors import ResumeError
from llm.training.distributed import DistInfo

CONF = Path(__file__).resolve().parents[3] / "conf"
#: A model, data and eval small enough for a 2-core CPU (the suite's usual sizes).
SMALL = ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.seq_len=32", "tokenizer=bytes",
         "train.batch_size=4", "train.eval_batches=1", "data.max_files=40", "data.val_fraction=0.2", "logger=none"]


def compose_cfg(overrides: list[str]) -> DictConfig:
    """The composed config of ``overrides`` on top of :data:`SMALL`."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[*SMALL, *overrides])


def _start(tmp_path, name: str, overrides: list[str]) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """A new run's initial weights, its first batch and the next numbers of the generator its dropout draws from."""
    from llm.training.trainer import Trainer

    trainer = Trainer(compose_cfg(["device=cpu", *overrides]), tmp_path / name, DistInfo())
    weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    x, _, _ = trainer.batch(0)
    return weights, x, torch.rand(8)


@pytest.mark.parametrize("other", ["none", "triton_v4", "torch_full"])
def test_runs_of_one_seed_start_alike_whatever_their_rope(tmp_path, other):
    """The RoPE module is built before the weights are drawn: one that drew random numbers, or took parameters,
    would give its runs other initial weights than the reference's of the same seed."""
    ref_weights, ref_batch, ref_draws = _start(tmp_path, "torch", ["rope=torch", "model.dropout=0.1"])
    weights, batch, draws = _start(tmp_path, other, [f"rope={other}", "model.dropout=0.1"])
    assert weights.keys() == ref_weights.keys()
    assert all(torch.equal(weights[k], ref_weights[k]) for k in weights)
    assert torch.equal(batch, ref_batch)
    assert torch.equal(draws, ref_draws), "the dropout masks would differ from the first step on"


def test_the_val_loss_of_a_model_is_the_same_at_every_evaluation(tmp_path):
    """The val windows are fixed and evaluation draws nothing (dropout off): a checkpoint's val loss does not depend
    on the generator's state or on the mode the model was in."""
    from llm.data import prepare_data
    from llm.model import build_model
    from llm.training.evaluate import evaluate

    cfg = compose_cfg(["device=cpu", "model.dropout=0.1", "train.eval_batches=2"])
    data = prepare_data(cfg.data, cfg.tokenizer.name, cfg.cache_dir)
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.rope, data.vocab_size).train()
    results = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        results.append(evaluate(model, data.val, cfg.train.batch_size, cfg.model.seq_len, cfg.train.eval_batches,
                                torch.device("cpu"), nullcontext(), DistInfo(), data.vocab_size))
    assert results[0].metrics == results[1].metrics and results[0].starts == results[1].starts
    assert model.training, "evaluation must give the model back in training mode"


def _saved_and_asked(saved: list[str], asked: list[str]) -> tuple[dict, object, list[str]]:
    asked = ["train.resume=auto", *asked]
    return OmegaConf.to_container(compose_cfg(saved), resolve=True), compose_cfg(asked), asked


def test_a_resume_refuses_to_switch_compile_where_dropout_draws_masks():
    """Compiled and eager training draw dropout masks with different generators: a run resumed with the other
    train.compile is another draw from the resumed step on (seen: final val loss 3.5837 uninterrupted, 3.4861
    resumed compiled at step 5 of 12), its masks no longer those of its seed's runs it is paired with."""
    from llm.training.resume import reconcile_resume_config

    saved, composed, asked = _saved_and_asked(["model.dropout=0.1"], ["train.compile=true"])
    with pytest.raises(ResumeError, match=r"train.compile \(saved False, asked True\): with model.dropout > 0"):
        reconcile_resume_config(saved, composed, asked)


def test_a_resume_may_switch_compile_where_nothing_is_drawn():
    """Without dropout the switch changes rounding only, as resuming on another device does: allowed."""
    from llm.training.resume import reconcile_resume_config

    saved, composed, asked = _saved_and_asked(["model.dropout=0.0"], ["train.compile=true"])
    assert reconcile_resume_config(saved, composed, asked).train.compile is True
