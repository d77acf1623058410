"""``+experiment=length_generalization`` and its fine-tuning arm ``+experiment=length_finetune``: the presets' sweeps
and callbacks, and the whole pipeline on a CPU: a tiny sweep trained through the Hydra entry point (in this
process), each run evaluated at two lengths with two scalings when the sweep ends, the report in the sweep dir; then
the fine-tuning sweep started from its runs, evaluated beside them by worker processes. Both packings run (the
presets sweep them), so the document-aligned runs train, evaluate and pair with the random-window ones end to end."""

from __future__ import annotations

import csv
import json
import re

from helpers import CONF, ROOT, run_command_inprocess
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import OmegaConf

from llm.report.length import CSV_FILE, CURVES_FILE, MD_FILE, POSITION_FILE

CB = "hydra.callbacks.length_generalization"


def test_preset_sweeps_partial_full_and_none_with_both_packings_over_five_seeds_with_the_low_noise_recipe():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=length_generalization"], return_hydra_config=True)
        full = compose("config", overrides=["rope=torch_full"])
    assert dict(cfg.hydra.sweeper.params) == {"rope": "torch,torch_full,none", "data.packing": "random,documents",
                                              "seed": "0,1,2,3,4"}
    assert cfg.data.packing == "random", "the default stays; the sweep sets both"
    assert (full.rope.name, full.rope.variant) == ("torch", "full")
    assert cfg.model.name == "seed004" and cfg.model.seq_len == 512 and cfg.optim.name == "muon"
    assert cfg.train.max_steps >= 1000 and cfg.train.deterministic and cfg.train.batch_size * cfg.train.grad_accum == 96
    assert cfg.data.name == "code_corpus" and cfg.sweep.name == "length_generalization" and cfg.train.compile
    subdir = OmegaConf.to_container(cfg.hydra.sweep)["subdir"]
    assert subdir == "${hydra:runtime.choices.rope}_${data.packing}_s${seed}", "the fine-tuning arm finds runs by it"
    cb = cfg.hydra.callbacks.length_generalization
    assert list(cb.lengths) == [512, 1024, 2048, 4096, 8192] and cb.tokens >= 2**20
    assert list(cb.scalings) == ["none", "linear", "ntk", "yarn", "dynamic_ntk", "llama3"]
    assert "compare" in cfg.hydra.callbacks, "the usual comparison still runs"
    callback = instantiate(cb)
    assert callback.requests[:2] == [{"type": "none"}, {"type": "linear", "factor": "auto"}]
    assert callback.requests[-1] == {"type": "llama3", "factor": "auto"} and callback.options["tokens"] == 2**20


def test_the_fine_tuning_arm_starts_each_run_from_its_zero_shot_run_at_four_times_the_length():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=length_finetune", "finetune.source=/sweeps/zero",
                                           "rope=torch_full", "data.packing=documents", "seed=3"],
                      return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # what a Hydra job holds: hydra:runtime.choices resolves
    try:
        assert cfg.train.init_from == "/sweeps/zero/torch_full_documents_s3", "its own zero-shot run, same packing"
    finally:
        HydraConfig.instance().cfg = None
    assert cfg.model.seq_len == 4 * 512 and cfg.train.max_steps == 200 and cfg.data.name == "code_corpus"
    assert cfg.train.batch_size * cfg.train.grad_accum * cfg.model.seq_len == 24 * 4 * 512, "the same tokens per step"
    assert (cfg.rope.scaling.type, cfg.rope.scaling.factor) == ("yarn", 4)
    cb = cfg.hydra.callbacks.length_generalization
    assert list(cb.scalings) == ["run"] and cb.reference_len == 512
    assert instantiate(cb).requests == [None], "evaluated as fine-tuned: its own YaRN x4"
    assert dict(cfg.hydra.sweeper.params) == {"rope": "torch,torch_full,none", "data.packing": "random,documents",
                                              "seed": "0,1,2,3,4"}


# a corpus of its own (the code corpus of every installed package would take minutes to build here), no compile
TINY = ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.d_ff=64", "model.seq_len=32", "tokenizer=bytes",
        "train.batch_size=4", "train.grad_accum=1", "train.max_steps=1", "train.eval_every=1", "train.eval_batches=2",
        "train.sample_every=0", "train.compile=false", "logger=none", "data.val_fraction=0.3"]


def test_sweep_trains_evaluates_each_run_at_other_lengths_and_the_fine_tuning_arm_sits_beside_it(tmp_path, capsys):
    corpus = tmp_path / "corpus"  # text it does not repeat: this checkout's Python source
    corpus.mkdir()
    for i, src in enumerate(sorted((ROOT / "llm").rglob("*.py"))[:30]):
        (corpus / f"{i:02d}_{src.stem}.txt").write_text(src.read_text())
    sweep = tmp_path / "sweep"
    common = ["data=text_files", f"data.path={corpus}", *TINY, "seed=0", f"{CB}.lengths=[32,64]", f"{CB}.tokens=128",
              f"cache_dir={tmp_path / 'cache'}"]
    assert run_command_inprocess(["+experiment=length_generalization", *common, "rope=torch,none",
                                   f"{CB}.scalings=[none,yarn]", f"hydra.sweep.dir={sweep}"], small=False) == 0
    logged = capsys.readouterr().out

    torch_run, docs_run = sweep / "torch_random_s0", sweep / "torch_documents_s0"
    for run in (torch_run, docs_run):
        assert sorted(p.name for p in (run / "eval_lengths").glob("*.json")) == ["torch-none.json",
                                                                               "torch-yarn_auto.json"]
    for run in (sweep / "none_random_s0", sweep / "none_documents_s0"):
        assert sorted(p.name for p in (run / "eval_lengths").glob("*.json")) == ["none-none.json"], \
            "rope=none rotates nothing: evaluated without scaling only"
    yarn = json.loads((torch_run / "eval_lengths" / "torch-yarn_auto.json").read_text())
    assert [(m["length"], m["factor"], m["val_tokens"]) for m in yarn["lengths"]] == [(32, 1.0, 128), (64, 2.0, 128)]
    assert yarn["lengths"][1]["degradation"] is not None and yarn["lengths"][0]["degradation"] is None
    summary = json.loads((torch_run / "summary.json").read_text())
    assert yarn["seed"] == summary["seed"] == 0 and yarn["rope_label"] == summary["rope_label"]
    assert (yarn["packing"], json.loads((docs_run / "eval_lengths" / "torch-yarn_auto.json").read_text())["packing"]) \
        == ("random", "documents")
    # one process (no GPU) says which run it starts; processes on the GPUs say which one finished
    assert re.search(r"length evaluation 4/4( done)?: ", logged) and "L=    64" in logged, "progress per length"
    for name in (MD_FILE, CSV_FILE, CURVES_FILE, POSITION_FILE):
        assert (sweep / name).is_file(), name
    with open(sweep / CSV_FILE) as f:
        table = list(csv.DictReader(f))
    partial, docs = "torch (partial, float32)", "torch (partial, float32) · documents"
    groups = [("none", "none"), (partial, "none"), (partial, "yarn (factor L/32)"), ("none · documents", "none"),
              (docs, "none"), (docs, "yarn (factor L/32)")]
    assert [(r["variant"], r["scaling"], r["length"], r["n"]) for r in table] == \
        [(v, s, L, "1") for v, s in groups for L in ("32", "64")], "each packing a block of its own"
    at64 = next(r for r in table if (r["variant"], r["scaling"], r["length"]) == (docs, "yarn (factor L/32)", "64"))
    assert (at64["random_packing_variant"], at64["vs_random_pairing"], at64["reference_variant"]) == \
        (partial, "paired", ""), "documents against random of the same seed; the documents reference itself"
    md = (sweep / MD_FILE).read_text()
    assert "| torch (partial, float32) | yarn (factor L/32) | 1 |" in md and "## Not evaluated" not in md
    assert "## Document-aligned − random training windows" in md
    comparison = (sweep / "comparison.md").read_text()
    assert "against **torch (partial, float32)** (" in comparison, "the reference: partial rotation on random windows"
    assert "- torch (partial, float32) · documents: " in comparison and "differing config key" not in logged, \
        "the sweep's usual comparison keeps the two packings apart, each an implementation of its own"

    tuned = tmp_path / "tuned"
    assert run_command_inprocess(["+experiment=length_finetune", f"finetune.source={sweep}", *common, "rope=torch",
                                   "model.seq_len=64", "train.batch_size=2", "train.grad_accum=1",
                                   f"{CB}.reference_len=32", f"{CB}.devices=[cpu,cpu]", f"{CB}.per_device=1",
                                   f"hydra.sweep.dir={tuned}"], small=False) == 0
    assert "length evaluation of 2 run(s) in 2 processes on cpu" in capsys.readouterr().out, "the parallel path"
    for packing, source in (("random", torch_run), ("documents", docs_run)):
        config = OmegaConf.load(tuned / f"torch_{packing}_s0" / "config.yaml")
        assert (config.train.init_from, config.data.packing) == (str(source), packing), "its own zero-shot run"
    run = tuned / "torch_random_s0"
    config = OmegaConf.load(run / "config.yaml")
    assert config.rope.scaling.original_max_seq_len == 32
    (result,) = [json.loads(p.read_text()) for p in (run / "eval_lengths").glob("*.json")]
    assert (result["label"], result["reference_len"], result["init_from"]) == ("torch-yarn_x4", 32, str(torch_run))
    at64 = result["lengths"][1]
    assert at64["val_tokens"] == yarn["lengths"][1]["val_tokens"] and at64["degradation"] is not None
