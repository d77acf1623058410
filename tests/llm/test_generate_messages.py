"""What ``python -m llm.generate`` (and ``llm.eval_lengths``, which opens runs the same way) says to a user who gives
a checkpoint file where the run dir goes, or a checkpoint without its run, and how it reports a slow decode."""

from __future__ import annotations

import pytest
import torch
from helpers import CONF, run_inprocess
from hydra import compose, initialize_config_dir

from llm.errors import ConfigError
from llm.evaluation.lengths import open_for_eval
from llm.generation.command import _speed_line, generate_from_config
from llm.generation.decode import Generated
from llm.generation.load import open_run


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("messages") / "run"
    run_inprocess(run_dir, ["train.max_steps=2", "train.eval_every=2", "device=cpu"])
    return run_dir


def test_a_checkpoint_given_as_run_names_the_run_dir_to_give(trained_run, tmp_path):
    last = trained_run / "checkpoints" / "last.pt"
    with pytest.raises(ConfigError) as refused:
        open_run(str(last))
    assert str(refused.value) == (f"run={last} is a file, not a run dir (a run dir holds config.yaml and "
                                  f"checkpoints/); give run={trained_run} checkpoint={last}")
    other = tmp_path / "weights.pt"  # a file in no run dir: how to give a checkpoint, no run dir made up
    other.write_bytes(b"")
    with pytest.raises(ConfigError, match=r"is a file, not a run dir .*; a checkpoint file is given as "
                                          r"checkpoint=<file>, beside run=<its run dir>$"):
        open_run(str(other))


def test_a_checkpoint_without_run_names_its_run_dir(trained_run):
    last = trained_run / "checkpoints" / "last.pt"
    hint = f"checkpoint={last} is in the run dir {trained_run}: give run={trained_run}"
    with pytest.raises(ConfigError, match="run= is required") as refused:
        open_run(None, str(last))
    assert hint in str(refused.value)
    with pytest.raises(ConfigError, match="run= is required: the run dir to evaluate") as refused:
        open_for_eval(None, str(last))
    assert hint in str(refused.value)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):  # as the command line composes it
        cfg = compose("generate", overrides=[f"checkpoint={last}", "device=cpu"])
    with pytest.raises(ConfigError, match="give run="):
        generate_from_config(cfg)


@pytest.mark.parametrize("seconds,rate", [(20.0, "0.2"), (0.5, "8"), (0.04, "100"), (0.001, "4,000")])
def test_a_slow_decode_is_not_reported_as_0_tokens_per_second(seconds, rate):
    """5 new tokens, 4 after the first: 0.2 tokens/s (the Triton interpreter on a loaded CPU) read "0 tokens/s"."""
    line = _speed_line(Generated(torch.zeros(1, 5, dtype=torch.long), "max_new_tokens", 0.1, seconds), False)
    assert line == f"[first token after 100.0 ms (the prompt), then {rate} tokens/s]\n"
