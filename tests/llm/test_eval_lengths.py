"""``python -m llm.eval_lengths``: a finished run evaluated at other context lengths, on the same val tokens at
every length, with any scaling and any implementation of its rotation; bad input is one line naming the key,
before the weights load."""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import CONF, ROOT, float32_entries, run_inprocess, run_module_main, short_documents_only
from helpers import eval_lengths_inprocess as run_eval
from hydra import compose, initialize_config_dir

import llm.evaluation.lengths as lengths_mod
import llm.evaluation.losses as losses_mod
import rope
from llm.errors import ConfigError
from llm.evaluation.documents import document_segments, select_windows
from llm.evaluation.lengths import LengthEvaluator, open_for_eval, read_settings
from llm.evaluation.losses import gather_windows, sliding_losses, sliding_plan, window_losses
from llm.evaluation.metrics import length_metrics
from llm.model import GPT, GPTConfig

TRAIN_LEN = 32  # tests/helpers.py SMALL: model.seq_len=32, eval 2 batches of 4 windows (256 val tokens)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("lengths") / "run"
    # on the CPU, as the evaluation below is (run_eval): a GPU's eval differs from the CPU's in the 6th digit
    run_inprocess(run_dir, ["train.max_steps=2", "train.eval_every=2", "device=cpu"])
    return run_dir


def eval_cfg(run_dir, *overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("eval_lengths", overrides=[f"run={run_dir}", "device=cpu", *overrides])


def test_an_evaluation_cut_short_keeps_the_lengths_it_finished(trained_run, tmp_path, monkeypatch):
    """Ctrl-C at the second length: the file holds the first one (written after each length), not nothing."""
    import shutil

    from llm.evaluation import lengths as lengths_module

    run = tmp_path / "run"
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns("eval_lengths"))
    real = lengths_module.window_losses

    def interrupted_at_64(model, tokens, starts, L, *args):
        if L == 64:
            raise KeyboardInterrupt
        return real(model, tokens, starts, L, *args)

    monkeypatch.setattr(lengths_module, "window_losses", interrupted_at_64)
    with pytest.raises(KeyboardInterrupt) as stop:
        run_eval(run, "lengths=[32,64]", "tokens=256", "label=cut")
    saved = json.loads((run / "eval_lengths" / "cut.json").read_text())
    assert [m["length"] for m in saved["lengths"]] == [32]
    assert stop.value.json_path == run / "eval_lengths" / "cut.json"  # what the command's line names
    with pytest.raises(KeyboardInterrupt) as stop:  # before the first length finished: nothing written, and said so
        run_eval(run, "lengths=[64]", "tokens=256", "label=early")
    assert stop.value.json_path is None and not (run / "eval_lengths" / "early.json").exists()


@pytest.mark.parametrize("stop,code,done,none_yet", [
    ("ctrl_c", 130, "Interrupted: the lengths evaluated so far are in ",
     "Interrupted before the first length finished: nothing was written"),
    ("sigterm", 128 + signal.SIGTERM, "Stopped by SIGTERM: the lengths evaluated so far are in ",
     "Stopped by SIGTERM before the first length finished: nothing was written"),
], ids=["ctrl_c", "sigterm"])
def test_the_command_stopped_mid_evaluation_says_what_it_kept(trained_run, tmp_path, monkeypatch, capsys, stop, code,
                                                               done, none_yet):
    """The command's own __main__, stopped at the second length by Ctrl-C or by a SIGTERM (a job scheduler's stop,
    `kill`): the first length stays written, one line names the file, exit 128 + the signal (as llm.train ends);
    stopped before the first length finished, the line says nothing was written. (A SIGTERM ended it silently,
    exit -15.)"""
    import shutil

    from llm.evaluation import lengths as lengths_module

    run = tmp_path / "run"
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns("eval_lengths"))
    real = lengths_module.window_losses

    def stopped_at_64(model, tokens, starts, L, *args):
        if L == 64:
            if stop == "ctrl_c":
                raise KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before the next bytecode of this frame
        return real(model, tokens, starts, L, *args)

    monkeypatch.setattr(lengths_module, "window_losses", stopped_at_64)

    def unhandled(signum, frame):  # the command took no SIGTERM of its own (the default would end pytest here)
        pytest.fail("the command left SIGTERM to the default handler, which ends the process without a word")

    before = signal.signal(signal.SIGTERM, unhandled)
    try:
        args = [f"run={run}", "device=cpu", "tokens=256"]
        exit_code, lines = run_module_main(monkeypatch, capsys, "llm.eval_lengths",
                                           [*args, "lengths=[32,64]", "label=cut"])
        path = run / "eval_lengths" / "cut.json"
        assert (exit_code, lines) == (code, [f"{done}{path}"])
        assert [m["length"] for m in json.loads(path.read_text())["lengths"]] == [32]
        exit_code, lines = run_module_main(monkeypatch, capsys, "llm.eval_lengths",
                                           [*args, "lengths=[64]", "label=early"])
        assert (exit_code, lines) == (code, [none_yet]) and not (run / "eval_lengths" / "early.json").exists()
        assert signal.getsignal(signal.SIGTERM) is unhandled  # the command's own handler is gone once it ends
    finally:
        signal.signal(signal.SIGTERM, before)


def val_stream(run_dir) -> tuple[np.ndarray, int]:
    from llm.data import prepare_data
    from llm.generation.load import open_run

    cfg = open_run(str(run_dir)).config
    data = prepare_data(cfg.data, cfg.tokenizer.name, cfg.cache_dir)
    return np.asarray(data.val), data.eot


def test_windows_come_from_whole_documents_and_the_split_metrics_agree(trained_run):
    """Every window is one document's (an end-of-text token only as its first input, the document's start
    marker, or as its last target); at L = T nothing lies beyond T and both baselines are the plain loss; beyond
    T, gain and degradation are the differences of the reported losses, and the buckets average to them."""
    result, lines = run_eval(trained_run, "lengths=[64,32]", "tokens=512", "bucket_size=16")
    at = {m["length"]: m for m in result["lengths"]}
    assert list(at) == [32, 64] and result["reference_len"] == TRAIN_LEN
    val, eot = val_stream(trained_run)
    segments = document_segments(val, eot)
    for L, m in at.items():
        assert m["eligible_documents"] == int((segments.lengths >= L).sum())
        assert m["documents"] == min(m["eligible_documents"], m["windows"]), "one window per document first"
        assert m["windows"] == 512 // L and m["val_tokens"] == m["windows"] * L, "the budget, in whole windows"
        sel = select_windows(segments, L, 512)
        x, y = gather_windows(val, sel.starts, L)
        assert not (x[:, 1:] == eot).any() and not (y[:, :-1] == eot).any(), "a window crosses a document boundary"
    same = at[32]
    assert same["loss_beyond_train"] is None and same["gain_beyond_train"] is None and same["degradation"] is None
    assert same["sliding_loss"] == pytest.approx(same["val_loss"], abs=1e-6)
    assert same["baseline_loss"] == pytest.approx(same["val_loss"], abs=1e-6)
    assert same["loss_within_train"] == pytest.approx(same["val_loss"], abs=1e-12)
    m = at[64]
    buckets = m["buckets"]
    assert [(b["start"], b["end"]) for b in buckets] == [(0, 16), (16, 32), (32, 48), (48, 64)]
    assert np.mean([b["loss"] for b in buckets]) == pytest.approx(m["val_loss"], abs=1e-9)
    assert np.mean([b["loss"] for b in buckets[2:]]) == pytest.approx(m["loss_beyond_train"], abs=1e-9)
    assert np.mean([b["baseline"] for b in buckets[2:]]) == pytest.approx(m["baseline_beyond_train"], abs=1e-9)
    assert m["gain_beyond_train"] == pytest.approx(m["loss_beyond_train"] - m["sliding_beyond_train"], abs=1e-9)
    assert m["degradation"] == pytest.approx(m["loss_beyond_train"] - m["baseline_beyond_train"], abs=1e-9)
    assert m["sliding_loss"] == m["baseline_loss"], "evaluated as trained: the model's own baseline is the run's"
    assert m["sliding_beyond_train"] != pytest.approx(m["loss_beyond_train"], abs=1e-4), "the context is truncated"
    assert [b["loss"] for b in buckets[:2]] == pytest.approx([b["sliding"] for b in buckets[:2]], abs=1e-6)
    # one progress line per baseline, then one per length, and the files in the run dir
    assert [ln.split(":")[0] for ln in lines[1:3]] == ["  baseline L=32", "  baseline L=64"]
    assert [ln.split()[0] for ln in lines if ln.startswith("  L=")] == ["L=", "L="]
    assert "L=    32" in lines[3] and "L=    64" in lines[4] and "degradation" in lines[4]
    assert lines[-1].startswith("wrote ")
    assert result["label"] == "torch-none" and result["tokens"] == 512 and result["skipped"] == []
    saved = json.loads((trained_run / "eval_lengths" / "torch-none.json").read_text())
    assert saved["config"]["rope"]["32"]["max_seq_len"] == 64, "the RoPE cache is sized to the longest length"
    assert saved["config"]["lengths"] == [32, 64] and saved["train_seq_len"] == TRAIN_LEN
    assert saved["baseline"]["window"] == TRAIN_LEN and saved["baseline"]["stride"] == TRAIN_LEN // 2
    with open(trained_run / "eval_lengths" / "torch-none.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["length"]) for r in rows] == [32, 64]
    for key in ("loss_beyond_train", "sliding_beyond_train", "gain_beyond_train", "baseline_beyond_train",
                "degradation", "degradation_se", "documents", "eligible_documents", "eligible_tokens"):
        assert rows[1][key] != "" and float(rows[1][key]) == pytest.approx(m[key]), key


def test_a_baseline_whose_window_is_the_length_is_the_full_context_loss(trained_run):
    result, _ = run_eval(trained_run, "lengths=[32,64]", "tokens=256", "baseline_window=64", "label=wide")
    for m in result["lengths"]:
        assert m["sliding_loss"] == pytest.approx(m["val_loss"], abs=1e-6)
        assert m["baseline_loss"] == pytest.approx(m["val_loss"], abs=1e-6)
    assert result["lengths"][1]["gain_beyond_train"] == pytest.approx(0, abs=1e-6)


def test_a_budget_beyond_the_documents_is_a_smaller_evaluation_with_a_note(trained_run, monkeypatch):
    short_documents_only(monkeypatch, 100)  # at most one window of 64 per document: a few windows in all
    result, lines = run_eval(trained_run, "lengths=[64]", f"tokens={10**7}", "label=big")
    (m,) = result["lengths"]
    assert m["val_tokens"] == m["eligible_tokens"] == 64 * m["eligible_documents"] and m["windows"] >= 2
    note = next(ln for ln in lines if ln.startswith("  note: tokens: "))
    assert f"fewer than the budget {10**7}: the val split has {m['eligible_documents']} document(s)" in note
    assert result["notes"] == [note.removeprefix("  note: ")]


def test_a_length_no_document_reaches_is_skipped_with_a_warning_and_none_at_all_is_refused(trained_run, monkeypatch):
    short_documents_only(monkeypatch, 64)
    result, lines = run_eval(trained_run, "lengths=[32,64]", "tokens=256", "label=short")
    assert [m["length"] for m in result["lengths"]] == [32]
    reason = ("lengths: 64 skipped: no val document has 64 tokens (the longest has 63); a corpus with longer "
              "documents, or shorter lengths")
    assert result["skipped"] == [{"length": 64, "reason": reason}] and f"  warning: {reason}" in lines

    def never(*a, **k):
        raise AssertionError("the weights were loaded before the lengths were checked against the documents")

    monkeypatch.setattr(lengths_mod, "load_run_model", never)
    with pytest.raises(ConfigError, match=r"^lengths: no val document has 64 tokens \(the longest has 63\); "
                                          r"evaluation windows come from whole documents"):
        run_eval(trained_run, "lengths=[64,128]", "tokens=256", "label=short")


def test_factor_auto_is_the_scaling_each_length_needs(trained_run):
    """factor=auto: 1 at the training length (YaRN x1 is no scaling: the same loss), L/32 beyond (another loss);
    original_max_seq_len defaults to the training length, and the output says so."""
    none, _ = run_eval(trained_run, "lengths=[32,64]", "tokens=128")
    yarn, lines = run_eval(trained_run, "lengths=[32,64]", "tokens=128", "rope.scaling.type=yarn",
                           "rope.scaling.factor=auto")
    assert yarn["label"] == "torch-yarn_auto" and yarn["scaling_label"] == "yarn (factor L/32)"
    assert [m["factor"] for m in yarn["lengths"]] == [1.0, 2.0]
    assert yarn["lengths"][0]["scaling"]["original_max_seq_len"] == TRAIN_LEN
    assert any("original_max_seq_len not given: 32, the run's training length" in ln for ln in lines)
    assert yarn["lengths"][0]["val_loss"] == none["lengths"][0]["val_loss"]
    assert yarn["lengths"][1]["val_loss"] != none["lengths"][1]["val_loss"], "the scaling must reach the model"
    y, n = yarn["lengths"][1], none["lengths"][1]
    assert y["baseline_beyond_train"] == n["baseline_beyond_train"], "the run's own level, whatever the scaling"
    assert y["sliding_beyond_train"] != pytest.approx(y["baseline_beyond_train"], abs=1e-6), "YaRN x2 on windows of T"
    assert y["degradation"] == pytest.approx(y["loss_beyond_train"] - n["baseline_beyond_train"], abs=1e-12)
    assert y["gain_beyond_train"] == pytest.approx(y["loss_beyond_train"] - y["sliding_beyond_train"], abs=1e-12)
    fixed, _ = run_eval(trained_run, "lengths=[32]", "tokens=64", "rope.scaling.type=linear", "rope.scaling.factor=4",
                        "label=lin")
    assert fixed["label"] == "lin" and fixed["lengths"][0]["scaling"] == {"type": "linear", "factor": 4}


def test_dynamic_ntk_under_factor_auto_counts_the_length_once():
    """dynamic_ntk scales by the length itself (factor L / original - (factor - 1)): factor=auto gave it L/T as its
    factor too, an effective factor of r^2 - r + 1 for r = L/T (13 at 4T where ntk under auto has 4). Now its
    table at each length is ntk's under auto, the factor each length needs."""
    from llm.evaluation.scaling import resolve_scaling
    from rope.scaling import dynamic_factor, scaled_frequencies

    freqs = 1.0 / 10000.0 ** (torch.arange(0, 32, 2, dtype=torch.float64) / 32)
    dynamic = resolve_scaling({"type": "dynamic_ntk", "factor": "auto"}, {"scaling": None}, 512)
    ntk = resolve_scaling({"type": "ntk", "factor": "auto"}, {"scaling": None}, 512)
    for length in (256, 512, 1024, 2048, 8192):
        at = dynamic.for_length(length)
        assert dynamic_factor(at, length) == max(1.0, length / 512)
        assert torch.equal(scaled_frequencies(freqs, 10000.0, 32, at, length),
                           scaled_frequencies(freqs, 10000.0, 32, ntk.for_length(length), length))


# every registered implementation that runs here (the Triton ones under the interpreter), each float32 code once
# (the run is float32; helpers.FLOAT32_SAME_AS), but none: a swap to none is refused (it is another function, see
# test_bad_input_...)
SWAPS = float32_entries([n for n in rope.available() if n not in ("torch", "none")
                         and rope.get(n).unavailable_reason(torch.device("cpu")) is None])


@pytest.fixture(scope="module")
def torch_yarn(trained_run) -> dict:
    return run_eval(trained_run, "lengths=[64]", "tokens=64", "rope.scaling.type=yarn", "rope.scaling.factor=2")[0]


@pytest.mark.parametrize("impl", SWAPS)
def test_every_implementation_evaluates_the_run_with_a_scaling(trained_run, torch_yarn, impl):
    """rope=<name> swaps the kernel and keeps the run's rotation; the scaling reaches it (the base class's
    tables), so its numbers are the reference's."""
    result, lines = run_eval(trained_run, "lengths=[64]", "tokens=64", f"rope={impl}", "rope.scaling.type=yarn",
                             "rope.scaling.factor=2")
    assert result["label"] == f"{impl}-yarn_x2" and f"rope={impl} (partial" in lines[0]
    assert result["lengths"][0]["val_loss"] == pytest.approx(torch_yarn["lengths"][0]["val_loss"], abs=1e-4)


def test_default_lengths_are_multiples_of_the_training_length(trained_run):
    evaluator = LengthEvaluator(open_for_eval(str(trained_run)), read_settings(eval_cfg(trained_run)))
    assert evaluator.lengths == (32, 64, 128, 256, 512)
    plan = evaluator.plan({"type": "ntk", "factor": 16})
    assert plan.label == "torch-ntk_x16" and all(r["max_seq_len"] == 512 for r in plan.rope_cfgs.values())


def tiny_gpt(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=61, seq_len=16, n_layer=2, n_head=4, n_embd=32, vocab_multiple=8)
    model = GPT(cfg, rope.build("torch", cfg.head_dim, 16, variant="full")).eval()
    with torch.no_grad():  # sharpen attention so that positions matter
        for block in model.blocks:
            block.attn.qkv.weight.mul_(10)
    return model


CPU = torch.device("cpu")
NO_AUTOCAST = torch.autocast("cpu", enabled=False)


def test_chunked_head_and_uneven_batches_equal_the_full_forward(monkeypatch):
    """Per-position loss from the head run 5 positions at a time over batches of 3, 3 and 1 windows equals the
    full forward's cross-entropy per window, and the SE is over windows."""
    model = tiny_gpt()
    monkeypatch.setattr(losses_mod, "LOGITS_CHUNK_ELEMENTS", 5 * model.cfg.padded_vocab)
    val = np.random.default_rng(0).integers(0, 61, size=7 * 16 + 1).astype(np.uint32)
    starts = np.arange(7) * 16
    loss, correct = window_losses(model, val, starts, 16, 3, 61, CPU, NO_AUTOCAST)
    got = length_metrics(loss, correct, loss, loss, 8, 4)
    x = torch.from_numpy(val[:-1].astype(np.int64)).view(7, 16)
    y = torch.from_numpy(val[1:].astype(np.int64)).view(7, 16)
    with torch.no_grad():
        logits, _ = model(x)
    ref = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(7, 16).double()
    assert got["val_loss"] == pytest.approx(ref.mean().item(), abs=1e-6)
    assert got["val_loss_se"] == pytest.approx(ref.mean(1).std().item() / math.sqrt(7), rel=1e-5)
    assert got["val_acc"] == (logits[..., :61].argmax(-1) == y).double().mean().item()
    assert [b["loss"] for b in got["buckets"]] == pytest.approx(ref.mean(0).view(4, 4).mean(1).tolist(), abs=1e-6)
    assert got["loss_beyond_train"] == pytest.approx(ref[:, 8:].mean().item(), abs=1e-6)
    assert (got["windows"], got["val_tokens"]) == (7, 112)


@pytest.mark.parametrize("length,window,stride", [(16, 6, 4), (16, 6, 6), (16, 5, 1), (12, 4, 2)])
def test_the_sliding_window_baseline_predicts_each_target_from_its_last_window_tokens(length, window, stride):
    """Each target p >= window is predicted by a forward of the window tokens ending at the first stride boundary
    at or after p (the last sub-window ends at L): a brute-force forward per target agrees; targets before the
    window see their whole context; the context is never shorter than window - stride + 1."""
    model = tiny_gpt(1)
    rng = np.random.default_rng(1)
    val = rng.integers(0, 61, size=3 * length + 5).astype(np.uint32)
    starts = np.array([0, length + 2, 2 * length + 4])
    plan = sliding_plan(length, window, stride)
    got = sliding_losses(model, val, starts, plan, 4, 61, CPU, NO_AUTOCAST)
    full, _ = window_losses(model, val, starts, length, 2, 61, CPU, NO_AUTOCAST)
    want = np.empty_like(full)
    for i, s in enumerate(starts):
        for p in range(length):
            end = window if p < window else min(length, window + -(-(p + 1 - window) // stride) * stride)
            lo = end - window
            assert p < window or p - lo + 1 >= window - stride + 1
            x, y = gather_windows(val, np.array([s + lo]), window)
            with torch.no_grad():
                logits, _ = model(x)
            want[i, p] = F.cross_entropy(logits[0, p - lo][None].float(), y[0, p - lo][None]).item()
    assert got == pytest.approx(want, abs=1e-5)
    assert got[:, :window] == pytest.approx(full[:, :window], abs=1e-5)
    assert np.abs(got[:, window:] - full[:, window:]).max() > 1e-3, "beyond the window the context is cut"


def test_a_sliding_window_as_long_as_the_window_is_the_full_forward():
    model = tiny_gpt(2)
    val = np.random.default_rng(2).integers(0, 61, size=4 * 16 + 1).astype(np.uint32)
    starts = np.arange(4) * 16
    full, _ = window_losses(model, val, starts, 16, 4, 61, CPU, NO_AUTOCAST)
    for window in (16, 40):
        plan = sliding_plan(16, window, 3)
        assert plan.pieces == ((0, 0, 16),)
        assert sliding_losses(model, val, starts, plan, 3, 61, CPU, NO_AUTOCAST) == pytest.approx(full, abs=1e-6)


@pytest.mark.parametrize("overrides,message", [
    (["lengths=[0]"], r"lengths=\[0\] must be a list of positive integers"),
    (["lengths=[32,abc]"], r"lengths=\[32, 'abc'\] must be a list of positive integers"),
    (["lengths=[100000000]"], r"lengths: 100000000 needs at least [\d.]+ GiB for one window, more than the"),
    (["rope.scaling.type=bogus"], r"rope.scaling.type='bogus'; allowed: none, linear, ntk, dynamic_ntk, yarn"),
    (["rope.scaling.type=yarn"], r"rope.scaling.factor: scaling.type=yarn needs scaling.factor"),
    (["rope.scaling.factor=2"], r"rope.scaling.factor=2 needs rope.scaling.type"),
    (["rope.scaling.type=linear", "rope.scaling.factor=0.5"], r"rope.scaling.factor=0.5: scaling.factor must be"),
    (["rope.scaling.type=yarn", "rope.scaling.factor=2", "+rope.scaling.bogus=1"],
     r"rope.scaling.bogus=1: scaling.type=yarn has no parameter 'bogus'"),
    (["rope=none"], r"rope=none: the run was trained with rope=torch"),
    (["+rope.base=500"], r"rope.base=500: llm.eval_lengths evaluates with the run's rotation"),  # was ignored
    (["lengths=[32]", "tokens=10"], r"tokens=10 must be at least the longest length 32"),
    (["baseline_window=8", "baseline_stride=9"], r"baseline_stride=9 must be at most baseline_window=8"),
    (["baseline_stride=40"], r"baseline_stride=40 must be at most the baseline window 32 \(baseline_window"),
    (["batch_tokens=0"], r"batch_tokens=0 must be a positive integer"),
    (["dtype=float16"], r"dtype='float16'; allowed: auto, float32, bfloat16"),
    (["device=mps"], r"device=mps: runs on a CPU or a CUDA GPU, not mps"),  # was a traceback once the data loaded
])
def test_bad_input_is_one_line_naming_the_key_before_the_weights_load(trained_run, monkeypatch, overrides, message):
    def never(*a, **k):
        raise AssertionError("the weights were loaded before the input was checked")

    monkeypatch.setattr(lengths_mod, "load_run_model", never)
    with pytest.raises(ConfigError, match=message) as e:
        run_eval(trained_run, *overrides)
    assert "\n" not in str(e.value)


def test_a_run_dir_without_a_checkpoint_is_refused(tmp_path, trained_run):
    shutil.copy(trained_run / "config.yaml", tmp_path / "config.yaml")
    with pytest.raises(ConfigError, match=f"run={tmp_path} has no checkpoint"):
        run_eval(tmp_path)
    (tmp_path / "bare").mkdir()  # a directory, but no run's
    with pytest.raises(ConfigError, match="run=.*bare is not a run dir: it holds neither config.yaml nor checkpoints/"):
        run_eval(tmp_path / "bare")
    with pytest.raises(ConfigError, match="run=.*nope is not a directory"):
        run_eval(tmp_path / "nope")
    with pytest.raises(ConfigError, match="run= is required: the run dir to evaluate"):
        run_eval("")


def test_the_command_line_is_one_line_and_exit_2_on_bad_input(trained_run):
    """The real command (python -m): Hydra composes conf/eval_lengths.yaml, the error is one line, no traceback."""
    bad = subprocess.run([sys.executable, "-m", "llm.eval_lengths", f"run={trained_run}", "rope.scaling.type=bogus"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert bad.stderr.strip().startswith("Error: rope.scaling.type='bogus'; allowed:"), bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not bad.stdout
    assert not (ROOT / ".hydra").exists() and not (ROOT / "eval_lengths.log").exists()


def test_multirun_is_refused_in_one_line_leaving_nothing(trained_run, tmp_path, monkeypatch, capsys):
    """-m ran the jobs one after another, left multirun/<date>/<time>/ (multirun.yaml, an empty dir per job) in the
    current dir where the results go to the run's eval_lengths/, and a job's refusal (a scaling without its factor)
    ended the sweep after the jobs before it: refused before Hydra starts, naming the loop to run instead."""
    from llm.eval_lengths import MULTIRUN_REFUSAL as REFUSAL

    monkeypatch.chdir(tmp_path)
    before = sorted(trained_run.rglob("*"))
    code, lines = run_module_main(monkeypatch, capsys, "llm.eval_lengths",
                                  ["-m", f"run={trained_run}", "lengths=[32]", "rope.scaling.type=none,linear"])
    assert (code, lines) == (2, [f"Error: {REFUSAL}"])
    assert list(tmp_path.iterdir()) == [] and sorted(trained_run.rglob("*")) == before


# -- fine-tuning at a longer length from a run's weights (train.init_from), then evaluating it ----------------
FINETUNE = ["model.seq_len=64", "rope.scaling.type=yarn", "rope.scaling.factor=2"]


def capture_fit(monkeypatch) -> dict:
    """Replace Trainer.fit by a probe of what the run would start training from."""
    import llm.training.run as run_mod
    from llm.training.trainer import TrainOutcome

    seen: dict = {}

    def fit(self):
        seen.update(state={k: v.detach().clone() for k, v in self.model.state_dict().items()}, step=self.step,
                    opt_state=[dict(o.state) for o in self.optimizers], cfg=self.cfg,
                    context=self.model.context_len)
        return TrainOutcome({"status": "completed"}, 0)

    monkeypatch.setattr(run_mod.Trainer, "fit", fit)
    return seen


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


def test_init_from_starts_a_new_run_from_the_weights_only(trained_run, tmp_path, monkeypatch):
    seen = capture_fit(monkeypatch)
    run_inprocess(tmp_path / "ft", [f"train.init_from={trained_run}", *FINETUNE])
    source = torch.load(trained_run / "checkpoints" / "last.pt", weights_only=False)
    assert same_weights(seen["state"], source["model"]), "the model starts from the source run's weights"
    assert seen["step"] == 0 and not any(seen["opt_state"]), "not its step, not its optimizer state"
    assert seen["cfg"].model.seq_len == 64 and seen["context"] == 64, "the RoPE cache covers the new length"
    assert seen["cfg"].rope.scaling.original_max_seq_len == TRAIN_LEN, "defaults to the source's training length"


@pytest.mark.parametrize("overrides,message", [
    (["model.n_layer=2"], r"model.n_layer=2 differs from 1 of the run train.init_from=.* starts from; its weights fit "
                          r"only its own architecture \(model.seq_len, model.dropout may change\)"),
    (["model.n_head=4"], r"model.n_head=4 differs from 2 of the run train.init_from="),
    (["model.n_embd=64"], r"model.n_embd=64 differs from 32 of the run"),  # not d_ff, which follows from it
    (["model.mlp=silu"], r"model.mlp='silu' differs from 'gelu'"),
    (["tokenizer=gpt2"], r"tokenizer.name='gpt2' differs from 'bytes' of the run train.init_from="),
])
def test_init_from_refuses_another_architecture_before_any_work(trained_run, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message) as e:
        run_inprocess(tmp_path / "ft", [f"train.init_from={trained_run}", *FINETUNE, *overrides])
    assert "\n" not in str(e.value) and not (tmp_path / "ft" / "config.yaml").exists()


def test_init_from_without_a_run_or_a_checkpoint_is_refused(trained_run, tmp_path):
    with pytest.raises(ConfigError, match=r"train.init_from=/no/such/run is not a run dir"):
        run_inprocess(tmp_path / "a", ["train.init_from=/no/such/run"])
    with pytest.raises(ConfigError, match=f"train.init_from={trained_run.parent} is not a run dir"):
        run_inprocess(tmp_path / "a", [f"train.init_from={trained_run.parent}"])  # a directory holding runs
    empty = tmp_path / "empty"
    empty.mkdir(parents=True)  # the refused run above removed its run dir, and its parent when left empty
    shutil.copy(trained_run / "config.yaml", empty / "config.yaml")
    with pytest.raises(ConfigError, match=f"train.init_from={empty} has no checkpoint"):
        run_inprocess(tmp_path / "b", [f"train.init_from={empty}"])


def test_a_fine_tuned_run_resumes_its_own_weights_and_is_evaluated_with_its_scaling(trained_run, tmp_path,
                                                                                   monkeypatch):
    ft = tmp_path / "ft"
    summary = run_inprocess(ft, [f"train.init_from={trained_run}", *FINETUNE, "train.max_steps=2",
                                 "train.stop_at_step=1"])
    assert summary["status"] == "interrupted" and summary["scaling"] == "yarn x2 (original_max_seq_len=32)"
    seen = capture_fit(monkeypatch)
    run_inprocess(ft, ["train.resume=auto", "train.max_steps=2"])
    own = torch.load(ft / "checkpoints" / "last.pt", weights_only=False)["model"]
    source = torch.load(trained_run / "checkpoints" / "last.pt", weights_only=False)["model"]
    assert same_weights(seen["state"], own) and not same_weights(own, source), "a resume keeps its own weights"
    assert seen["step"] == 1
    monkeypatch.undo()
    result, lines = run_eval(ft, "lengths=[64]", "tokens=64")
    assert result["label"] == "torch-yarn_x2" and result["scaling"]["from_run"]
    scaling = result["lengths"][0]["scaling"]
    assert (scaling["type"], scaling["factor"], scaling["original_max_seq_len"]) == ("yarn", 2, TRAIN_LEN)
    assert result["train_seq_len"] == 64


def test_results_are_never_lost_to_a_later_evaluation(trained_run):
    """More lengths of the same evaluation join the file (one evaluated again replaces only itself); another
    evaluation under the same label (here another target budget) moves the earlier file to superseded/."""
    out = trained_run / lengths_mod.OUT_DIR
    first, _ = run_eval(trained_run, "lengths=[32,64]", "tokens=128", "label=keep")
    run_eval(trained_run, "lengths=[64]", "tokens=128", "label=keep")
    on_disk = json.loads((out / "keep.json").read_text())
    assert [m["length"] for m in on_disk["lengths"]] == [32, 64]
    assert on_disk["lengths"][0]["val_loss"] == first["lengths"][0]["val_loss"]
    run_eval(trained_run, "lengths=[128]", "tokens=128", "label=keep")  # a longer one: larger cache, same buckets
    on_disk = json.loads((out / "keep.json").read_text())
    assert [m["length"] for m in on_disk["lengths"]] == [32, 64, 128] and on_disk["bucket_size"] == first["bucket_size"]
    _, lines = run_eval(trained_run, "lengths=[64]", "tokens=64", "label=keep")
    assert [m["length"] for m in json.loads((out / "keep.json").read_text())["lengths"]] == [64]
    (moved,) = (out / "superseded").glob("keep-*.json")
    assert [m["length"] for m in json.loads(moved.read_text())["lengths"]] == [32, 64, 128]
    assert any("held another evaluation (tokens=128 (this one: 64))" in line for line in lines)


def test_init_from_says_when_the_rotation_or_the_original_length_differs(trained_run, tmp_path, monkeypatch, caplog):
    """Switching the rotation, or an original_max_seq_len other than the source's training length, is allowed (a
    study may want it) but logged: the weights were trained otherwise (generate and eval_lengths refuse both)."""
    capture_fit(monkeypatch)
    with caplog.at_level(logging.INFO):
        run_inprocess(tmp_path / "ft", [f"train.init_from={trained_run}", "model.seq_len=64", "rope.variant=full",
                                        "rope.scaling.type=yarn", "rope.scaling.factor=2",
                                        "rope.scaling.original_max_seq_len=512"])
    assert "rope.variant='full' differs from 'partial', the rotation the weights of train.init_from=" in caplog.text
    assert f"rope.scaling.original_max_seq_len=512 is not {TRAIN_LEN}, the model.seq_len the run" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        run_inprocess(tmp_path / "ft2", [f"train.init_from={trained_run}", *FINETUNE])
    assert "differs from" not in caplog.text and "is not" not in caplog.text  # the same rotation: no note


def test_a_checkpoint_of_another_model_is_refused_before_any_work(trained_run, tmp_path, monkeypatch):
    """checkpoint= of a full-rotation run: its result would be recorded under this run's label; refused in one line,
    before the weights load."""
    state = torch.load(trained_run / "checkpoints" / "last.pt", weights_only=False)
    state["config"]["rope"]["variant"] = "full"
    path = tmp_path / "full.pt"
    torch.save(state, path)
    monkeypatch.setattr(lengths_mod, "load_run_model", lambda *a, **k: pytest.fail("the weights were loaded"))
    with pytest.raises(ConfigError, match=r"holds another model than run=.*: rope.variant='full' \(the run: "
                                          r"'partial'\)") as e:
        run_eval(trained_run, f"checkpoint={path}", "lengths=[32]", "tokens=256")
    assert "\n" not in str(e.value)


def test_an_explicit_rotation_key_other_than_the_run_s_is_refused(trained_run, tmp_path, monkeypatch, capsys):
    """``rope=torch rope.variant=full`` on a partial run is refused; ``rope.variant=partial`` on a full run, the
    kernel's default, was ignored (evaluated full, labelled as asked): refused the same way, before any work."""
    import yaml

    run = tmp_path / "full"
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns("eval_lengths"))
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["rope"]["variant"] = "full"
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    code, lines = run_module_main(monkeypatch, capsys, "llm.eval_lengths",
                                  [f"run={run}", "device=cpu", "rope=torch", "rope.variant=partial"])
    assert (code, lines) == (2, ["Error: rope.variant='partial': the run was trained with rope.variant='full'; a RoPE "
                                 "override may change the kernel, not the rotation"]), lines
    assert not (run / "eval_lengths").exists()


def test_a_run_that_did_not_complete_is_evaluated_with_a_warning(trained_run, tmp_path):
    """A run stopped by Ctrl-C (summary status interrupted): its checkpoint is evaluated, not refused, and one line
    says the run did not complete, naming the status and step (it said nothing, and the length report then left the
    run out)."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns("eval_lengths"))
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted", "step": 1}))
    _, lines = run_eval(run, "lengths=[32]", "tokens=256")
    warnings = [line for line in lines if "did not complete" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {run} did not complete: status interrupted at "
                                                         "step 1 of 2"), lines
    (run / "summary.json").write_text(json.dumps(summary))  # completed: no warning
    _, lines = run_eval(run, "lengths=[32]", "tokens=256", "label=done")
    assert not any("did not complete" in line for line in lines)


def test_the_cpu_memory_check_counts_no_dense_scores_where_sdpa_is_fused(monkeypatch):
    # measured on a CPU (torch 2.13): this model's forward at 32768 tokens peaked 0.6 GiB above its loaded RSS,
    # where dense scores alone would be 32 GiB: CPU SDPA with is_causal runs a fused kernel
    cfg = GPTConfig(vocab_size=100277, n_layer=4, n_head=4, n_embd=128, seq_len=128)
    monkeypatch.setattr(lengths_mod, "device_memory_bytes", lambda device: 4 * 2**30)
    assert lengths_mod.batch_for_length(cfg, 32768, 32768, CPU, "auto") == 1
    with pytest.raises(ConfigError, match=r"^lengths: 32768 needs at least [\d.]+ GiB for one window, more than the "
                                          r"4.0 GiB of cpu; drop it from lengths \(attention=math holds"):
        lengths_mod.batch_for_length(cfg, 32768, 65536, CPU, "math")  # the math kernel does hold the scores
    with pytest.raises(ConfigError, match=r"^lengths: 1048576 needs at least"):
        lengths_mod.batch_for_length(cfg, 2**20, 65536, CPU, "auto")  # what cannot fit is still refused


def test_one_window_has_no_standard_error_on_the_console_or_in_the_csv(tmp_path):
    loss = np.full((1, 8), 2.0)
    m = {"length": 8, "factor": None, **length_metrics(loss, loss > 0, loss, loss, 4, 4), "documents": 1,
         "batch_size": 1, "seconds": 0.1}
    assert m["val_loss_se"] is None  # not nan: one window has no spread
    line = lengths_mod._progress_line(m, 4)
    assert "val_loss 2.0000  acc" in line and "±" not in line and "nan" not in line
    _, csv_path = lengths_mod.write_result({"label": "x", "lengths": [m]}, tmp_path)
    row = next(csv.DictReader(csv_path.open()))
    assert row["val_loss_se"] == "" and row["val_loss"] == "2.0"
