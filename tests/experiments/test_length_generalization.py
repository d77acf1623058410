"""``+experiment=length_generalization``: the preset's sweep and callback, and the whole pipeline on a CPU: a tiny
sweep trained through the Hydra entry point, each run evaluated at two lengths with two scalings when the sweep
ends, and the report in the sweep dir."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

from helpers import CONF, ROOT
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from llm.report.length import CSV_FILE, CURVES_FILE, MD_FILE, POSITION_FILE


def test_preset_sweeps_partial_full_and_none_over_three_seeds_and_evaluates_at_the_end():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=length_generalization"], return_hydra_config=True)
        full = compose("config", overrides=["rope=torch_full"])
    assert dict(cfg.hydra.sweeper.params) == {"rope": "torch,torch_full,none", "seed": "0,1,2"}
    assert (full.rope.name, full.rope.variant) == ("torch", "full")
    assert cfg.model.name == "seed004" and cfg.model.seq_len == 512 and cfg.optim.name == "muon"
    assert cfg.data.name == "text_files" and cfg.sweep.name == "length_generalization"
    cb = cfg.hydra.callbacks.length_generalization
    assert list(cb.lengths) == [512, 1024, 2048, 4096, 8192] and list(cb.scalings) == ["none", "linear", "ntk", "yarn"]
    assert "compare" in cfg.hydra.callbacks, "the usual comparison still runs"
    callback = instantiate(cb)
    assert callback.requests == [{"type": "none"}, {"type": "linear", "factor": "auto"},
                                 {"type": "ntk", "factor": "auto"}, {"type": "yarn", "factor": "auto"}]


TINY = ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.d_ff=64", "model.seq_len=32",
        "train.batch_size=4", "train.grad_accum=1", "train.max_steps=2", "train.eval_every=2", "train.eval_batches=2",
        "train.sample_every=0", "logger=none", "data.val_fraction=0.3"]


def test_sweep_trains_evaluates_each_run_at_other_lengths_and_writes_the_report(tmp_path):
    corpus = tmp_path / "corpus"  # text it does not repeat: this checkout's Python source
    corpus.mkdir()
    for i, src in enumerate(sorted((ROOT / "llm").rglob("*.py"))[:30]):
        (corpus / f"{i:02d}_{src.stem}.txt").write_text(src.read_text())
    sweep = tmp_path / "sweep"
    cb = "hydra.callbacks.length_generalization"
    cmd = [sys.executable, "-m", "llm.train", "-m", "+experiment=length_generalization", f"data.path={corpus}", *TINY,
           "rope=torch,none", "seed=0", f"{cb}.lengths=[32,64]", f"{cb}.scalings=[none,yarn]", f"{cb}.tokens=128",
           f"hydra.sweep.dir={sweep}", f"cache_dir={tmp_path / 'cache'}"]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    torch_run, none_run = sweep / "0_torch_s0", sweep / "1_none_s0"
    assert sorted(p.name for p in (torch_run / "eval_lengths").glob("*.json")) == ["torch-none.json",
                                                                                 "torch-yarn_auto.json"]
    assert sorted(p.name for p in (none_run / "eval_lengths").glob("*.json")) == ["none-none.json"], \
        "rope=none rotates nothing: evaluated without scaling only"
    yarn = json.loads((torch_run / "eval_lengths" / "torch-yarn_auto.json").read_text())
    assert [(m["length"], m["factor"], m["val_tokens"]) for m in yarn["lengths"]] == [(32, 1.0, 128), (64, 2.0, 128)]
    summary = json.loads((torch_run / "summary.json").read_text())
    assert yarn["seed"] == summary["seed"] == 0 and yarn["rope_label"] == summary["rope_label"]
    logged = proc.stdout + proc.stderr
    assert "length evaluation 2/2: 1_none_s0" in logged and "L=    64" in logged, "progress per length"

    for name in (MD_FILE, CSV_FILE, CURVES_FILE, POSITION_FILE):
        assert (sweep / name).is_file(), name
    with open(sweep / CSV_FILE) as f:
        table = [(r["variant"], r["scaling"], r["length"], r["n"]) for r in csv.DictReader(f)]
    assert table == [("none", "none", "32", "1"), ("none", "none", "64", "1"),
                     ("torch (partial, float32)", "none", "32", "1"), ("torch (partial, float32)", "none", "64", "1"),
                     ("torch (partial, float32)", "yarn (factor L/32)", "32", "1"),
                     ("torch (partial, float32)", "yarn (factor L/32)", "64", "1")]
    md = (sweep / MD_FILE).read_text()
    assert "| torch (partial, float32) | yarn (factor L/32) | 1 |" in md and "## Not evaluated" not in md
    assert (sweep / "comparison.md").is_file(), "the sweep's usual comparison is still written"
