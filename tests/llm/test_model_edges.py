"""The GPT at its edges: config values it cannot honour are refused in one line naming the key, a cached step
outside ``torch.no_grad()`` gives the full forward's answer whatever the cache's ``attention``, a document mask of
another window is refused, and a tied model's state survives save and load."""

from __future__ import annotations

import io
import math

import pytest
import torch

from llm.data.packing import document_layout
from llm.doc_attention import DocumentMask
from llm.model import GPT, build_model, check_model_config

EOT = 99
VOCAB = 100
TINY = {"n_layer": 2, "n_head": 4, "n_embd": 32, "seq_len": 16, "mlp": "gelu", "dropout": 0.0,
        "tie_embeddings": True}


def tiny(**overrides: object) -> GPT:
    torch.manual_seed(0)
    return build_model({**TINY, **overrides}, {"name": "torch"}, VOCAB)


@pytest.mark.parametrize(("key", "value"), [("vocab_multiple", 0), ("vocab_multiple", -3), ("vocab_multiple", 1.5),
                                            ("norm_eps", -1.0), ("norm_eps", math.nan), ("norm_eps", math.inf),
                                            ("norm_eps", "1e-6"), ("vocab_size", 50)])
def test_a_value_the_model_cannot_honour_is_refused_in_one_line_naming_its_key(key, value):
    """vocab_multiple=0 divided by zero in the memory check, a negative one padded the vocabulary below its size
    (an IndexError at the first high token id), a bad norm_eps gave NaN activations or a TypeError at the first
    forward, and model.vocab_size a TypeError about keyword arguments."""
    for check in (lambda: check_model_config({**TINY, key: value}),
                  lambda: build_model({**TINY, key: value}, {"name": "torch"}, VOCAB)):
        with pytest.raises(ValueError, match=f"^model\\.{key}") as err:
            check()
        assert "\n" not in str(err.value)


def test_zero_norm_eps_and_a_vocab_multiple_of_one_are_still_accepted():
    assert check_model_config({**TINY, "norm_eps": 0, "vocab_multiple": 1}).padded_vocab == 100_277


def full_and_cached(model: GPT, x: torch.Tensor, static: bool, attention: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The full forward's logits (no grad), and the cached steps' (a prompt, a chunk, then one token at a time),
    run with grad mode on."""
    with torch.no_grad():
        full = model(x)[0]
    cache = model.new_cache(static=static, attention=attention)
    steps = [model(x[:, :5], cache=cache)[0], model(x[:, 5:8], cache=cache)[0]]
    steps += [model(x[:, t:t + 1], cache=cache)[0] for t in range(8, x.shape[1])]
    return full, torch.cat(steps, 1)


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("attention", ["sdpa", "fused_rope"])
def test_cached_steps_outside_no_grad_give_the_full_forward_whatever_the_cache_attends_with(static, attention):
    """With attention=fused_rope the kernel, which has no backward, refused a step whose queries ask for
    gradients; such a step now attends by SDPA, and a static cache (which builds its SDPA mask only for steps it
    does not fuse) agrees with the model about it: the answers are the full forward's."""
    pytest.importorskip("triton")
    model = tiny(n_kv_head=2).eval()
    x = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    full, cached = full_and_cached(model, x, static, attention)
    assert cached.requires_grad
    assert torch.allclose(cached, full, atol=1e-5, rtol=0)


def test_a_fused_cache_in_training_mode_drops_attention_as_the_sdpa_cache_does():
    """Attention dropout: the fused kernel has none, so a training-mode step of a fused_rope cache silently left
    it out; it now takes SDPA, and under one seed both caches draw the same dropout and give the same logits."""
    pytest.importorskip("triton")
    model = tiny(dropout=0.5).train()
    x = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(2))
    out = {}
    for attention in ("sdpa", "fused_rope"):
        cache = model.new_cache(attention=attention)
        torch.manual_seed(3)
        with torch.no_grad():
            out[attention] = torch.cat([model(x[:, :4], cache=cache)[0],
                                        *(model(x[:, t:t + 1], cache=cache)[0] for t in range(4, 8))], 1)
        assert cache.attention == attention, "the step's switch to SDPA must not outlive the step"
    assert torch.equal(out["sdpa"], out["fused_rope"])


def test_a_document_mask_of_another_window_is_refused():
    """A mask of one row over a batch of two broadcast: the first row's documents imposed on the second, a
    silently wrong answer; one of another length failed inside SDPA with a shape error."""
    model = tiny().eval()
    x = torch.tensor([[5, 7, EOT, 3, 4, 9, EOT, EOT], [EOT, 2, 2, 2, 2, 2, 2, 2]])
    positions, doc_ids = document_layout(x, EOT)
    with torch.no_grad():
        model(x, positions=positions, doc_mask=DocumentMask.build(doc_ids))
        for ids in (doc_ids[:1], doc_ids[:, :4]):
            with pytest.raises(ValueError, match="doc_mask.doc_ids has shape"):
                model(x, positions=positions, doc_mask=DocumentMask.build(ids))


def round_trip(state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf)


def test_a_tied_model_round_trips_its_state():
    model = tiny()
    again = tiny(dropout=0.0)
    with torch.no_grad():
        again.embed.weight.add_(1.0)
    again.load_state_dict(round_trip(model.state_dict()))
    assert again.head.weight is again.embed.weight and torch.equal(again.embed.weight, model.embed.weight)


def test_untied_weights_are_refused_by_a_tied_model_not_half_loaded():
    """Both keys were copied into the one shared tensor, the head's last: the embedding was silently lost."""
    untied = tiny(tie_embeddings=False)
    tied = tiny()
    before = tied.embed.weight.detach().clone()
    with pytest.raises(RuntimeError, match="head.weight differs from embed.weight") as err:
        tied.load_state_dict(round_trip(untied.state_dict()))
    assert "\n" not in str(err.value) and torch.equal(tied.embed.weight, before)
    tiny(tie_embeddings=False).load_state_dict(tied.state_dict())  # a tied state fits an untied model


def test_loading_with_assign_keeps_the_head_tied():
    """``assign=True`` gives each key its own tensor: the head and the embedding then trained apart."""
    model = tiny()
    again = tiny()
    again.load_state_dict(round_trip(model.state_dict()), assign=True)
    assert again.head.weight is again.embed.weight
    assert again.num_params() == model.num_params()
