"""``data.packing=documents`` through the trainer: a run trains and evaluates on windows laid out by document,
and a setting that cannot keep attention inside a document is refused before any work."""

from __future__ import annotations

import pytest
from helpers import run_inprocess, train_losses

from llm.errors import ConfigError


@pytest.fixture(scope="module")
def short_documents(tmp_path_factory):
    """A corpus of short documents, so that every 32-token window holds several end-of-text tokens."""
    corpus = tmp_path_factory.mktemp("corpus")
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()
    for i in range(60):
        (corpus / f"{i:02d}.txt").write_text(" ".join(words[(i + j) % len(words)] for j in range(5 + i % 7)))
    return corpus


def overrides(corpus, cache, *extra: str) -> list[str]:
    return ["data=text_files", f"data.path={corpus}", "data.val_fraction=0.3", f"cache_dir={cache}",
            "train.max_steps=2", "train.eval_every=2", "train.log_every=1", *extra]


def test_a_documents_packed_run_trains_and_evaluates_on_its_own_layout(tmp_path, short_documents, monkeypatch):
    import llm.training.trainer as trainer

    evaluated_with = []  # the end-of-text id each eval laid its windows out by (None: as they come)

    def evaluate(*args, **kwargs):
        evaluated_with.append(args[9] if len(args) > 9 else kwargs.get("documents_eot"))
        return real_evaluate(*args, **kwargs)

    real_evaluate = trainer.evaluate
    monkeypatch.setattr(trainer, "evaluate", evaluate)
    cache = tmp_path / "cache"
    documents = run_inprocess(tmp_path / "documents", overrides(short_documents, cache, "data.packing=documents"))
    packed_randomly = run_inprocess(tmp_path / "random", overrides(short_documents, cache))
    assert documents["status"] == packed_randomly["status"] == "completed"
    assert documents["val_loss"] is not None and documents["val_tokens"] == packed_randomly["val_tokens"]
    # the same tokens at every step (llm.data.packing), seen at other positions and through another mask
    first = train_losses(tmp_path / "documents")[1], train_losses(tmp_path / "random")[1]
    assert first[0] != first[1]
    assert evaluated_with[0] is not None and evaluated_with[1:] == [None], "evaluated on the layout it trained on"


def test_documents_with_flash_attention_is_refused_before_any_work(tmp_path, short_documents):
    run = tmp_path / "run"
    with pytest.raises(ConfigError) as err:
        run_inprocess(run, overrides(short_documents, tmp_path / "cache", "data.packing=documents",
                                     "train.attention=flash"))
    line = str(err.value)
    assert "\n" not in line and "data.packing=documents" in line and "train.attention=flash" in line
    assert not run.exists() and not (tmp_path / "cache").exists()


def test_evaluation_of_a_documents_packed_run_lays_each_val_window_out_by_document():
    """The val windows and targets are the usual ones; each is laid out as training lays it out."""
    from contextlib import nullcontext

    import numpy as np
    import torch
    import torch.nn.functional as F

    import rope
    from llm.data.packing import document_layout
    from llm.doc_attention import DocumentMask
    from llm.model import GPT, GPTConfig
    from llm.training.distributed import DistInfo
    from llm.training.evaluate import evaluate

    eot, vocab, T = 63, 64, 16
    rng = np.random.default_rng(0)
    stream = np.concatenate([np.append(rng.integers(0, eot, size=n), eot) for n in rng.integers(2, 12, size=30)])
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=vocab, seq_len=T, n_layer=1, n_head=2, n_embd=16, vocab_multiple=8)
    model = GPT(cfg, rope.build("torch", cfg.head_dim, T, variant="full"))
    args = (model, stream, 2, T, 2, torch.device("cpu"), nullcontext(), DistInfo(), vocab)
    documents, plain = evaluate(*args, documents_eot=eot), evaluate(*args)
    assert documents.starts == plain.starts
    x = torch.from_numpy(np.stack([stream[s:s + T] for s in documents.starts]).astype(np.int64))
    y = torch.from_numpy(np.stack([stream[s + 1:s + T + 1] for s in documents.starts]).astype(np.int64))
    positions, doc_ids = document_layout(x, eot)
    with torch.no_grad():
        logits, _ = model.eval()(x, positions=positions, doc_mask=DocumentMask.build(doc_ids))
    want = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view_as(y).double().mean(dim=1)
    assert np.allclose(documents.window_loss, want.tolist(), rtol=0, atol=1e-6)
    assert not np.allclose(plain.window_loss, want.tolist(), rtol=0, atol=1e-3)


def test_an_unknown_packing_is_one_line_naming_the_key_and_the_choices():
    from llm.data import check_data_config

    with pytest.raises(ConfigError, match=r"^data\.packing=document must be one of random, documents$"):
        check_data_config({"name": "pystdlib", "packing": "document"}, "cl100k_base")
    check_data_config({"name": "pystdlib", "packing": "documents"}, "cl100k_base")
