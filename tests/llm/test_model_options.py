"""The model's options as a researcher varies them (grouped-query attention, tied or untied embeddings, biases,
d_ff, the MLP's activation): the numbers the run reports about the model (its parameter count before it is built,
its FLOPs per token, hence MFU) are those of the model that trains."""

from __future__ import annotations

import pytest
import torch

from llm.model import GPT, build_model

VOCAB = 257  # the byte tokenizer's
TINY = {"n_layer": 2, "n_head": 4, "n_embd": 32, "seq_len": 16, "mlp": "gelu", "dropout": 0.0,
        "tie_embeddings": True}
OPTIONS = [{}, {"bias": True}, {"tie_embeddings": False}, {"n_kv_head": 2}, {"n_kv_head": 1, "d_ff": 48},
           {"mlp": "silu", "bias": True, "tie_embeddings": False, "n_kv_head": 2, "d_ff": 40, "vocab_multiple": 64}]


def tiny(rope: dict | None = None, **overrides: object) -> GPT:
    torch.manual_seed(0)
    return build_model({**TINY, **overrides}, rope or {"name": "torch"}, VOCAB)


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_the_config_parameter_count_is_the_built_models(options):
    """GPTConfig.param_count (the memory checks' count, before the model is built) left out the biases of
    model.bias=true: a count other than the summary's ``params`` for the same model."""
    model = tiny(**options)
    assert model.cfg.param_count() == model.num_params()


@pytest.mark.parametrize("options", [{}, {"n_kv_head": 2, "bias": True}], ids=["default", "gqa,bias"])
def test_untied_embeddings_cost_no_more_flops_than_tied(options):
    """An untied model runs the same matrix products as a tied one (the input embedding is a lookup, not a product):
    flops_per_token counted 6 x the embedding's parameters on top, overstating MFU by 6·V·d per token (with a 100k
    vocabulary, most of a small model's FLOPs)."""
    tied, untied = tiny(**options), tiny(tie_embeddings=False, **options)
    assert untied.num_params() == tied.num_params() + tied.embed.weight.numel()
    assert untied.flops_per_token() == tied.flops_per_token()
    c = tied.cfg
    assert tied.flops_per_token() == 6 * tied.num_params() + 12 * c.n_layer * c.n_embd * c.seq_len


COMBOS = [({"n_kv_head": 2}, {"name": "torch"}),
          ({"n_kv_head": 1, "tie_embeddings": False, "bias": True, "scale_embeddings": True, "mlp": "silu", "d_ff": 40},
           {"name": "torch", "layout": "interleaved", "rotary_dim": 4}),
          ({"n_kv_head": 2, "dropout": 0.2}, {"name": "torch", "variant": "full", "rotary_dim": 6, "base": 500.0}),
          ({"n_kv_head": 2}, {"name": "none"}),
          ({"n_kv_head": 2}, {"name": "torch", "scaling": {"type": "yarn", "factor": 2.0, "original_max_seq_len": 8}})]


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize(("model_opts", "rope"), COMBOS, ids=["gqa", "gqa1,untied,bias,scaled,silu,interleaved,r4",
                                                                "gqa,dropout,full,r6,base500", "gqa,none", "gqa,yarn"])
def test_cached_decoding_of_a_combination_of_options_is_the_full_forward(model_opts, rope, static):
    """What generation relies on: the prompt, then one token at a time through the KV cache, gives the logits of
    the full forward, for grouped-query attention with every rotation option."""
    model = tiny(rope, **model_opts).eval()
    x = torch.randint(0, VOCAB, (2, TINY["seq_len"]), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for p in model.parameters():  # sharper attention than the init's near-uniform one: positions matter
            if p.dim() == 2:
                p.mul_(8)
        full = model(x)[0]
        cache = model.new_cache(static=static)
        steps = [model(x[:, :5], cache=cache)[0]] + [model(x[:, t:t + 1], cache=cache)[0] for t in range(5, x.shape[1])]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-4, atol=1e-4)


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest_with_the_configured_keys():
    from llm.optim import build_optimizers

    model = tiny(n_kv_head=2, bias=True, tie_embeddings=False)
    cfg = {"name": "muon", "muon_lr": 0.05, "adamw_lr": 0.004, "momentum": 0.9, "nesterov": False, "ns_steps": 3,
           "weight_decay": 0.2, "adamw_weight_decay": 0.3, "betas": [0.8, 0.9], "eps": 1e-6}
    muon, adamw = build_optimizers(model, cfg, torch.device("cpu"))
    names = {id(p): n for n, p in model.named_parameters()}
    (group,) = muon.param_groups
    assert {names[id(p)] for p in group["params"]} == {n for n, p in model.named_parameters()
                                                        if n.startswith("blocks.") and p.dim() == 2}
    assert (group["lr"], group["momentum"], group["nesterov"], group["ns_steps"], group["weight_decay"]) == \
        (0.05, 0.9, False, 3, 0.2)
    decayed, plain = adamw.param_groups
    assert {names[id(p)] for p in decayed["params"]} == {"embed.weight", "head.weight"}
    assert decayed["weight_decay"] == 0.3 and plain["weight_decay"] == 0.0
    assert all(p.dim() == 1 for p in plain["params"])
    assert (decayed["lr"], decayed["betas"], decayed["eps"]) == (0.004, (0.8, 0.9), 1e-6)
