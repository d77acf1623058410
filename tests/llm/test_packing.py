"""Document-aligned training windows (``llm.data.packing``) and document-causal attention (``llm.doc_attention``):
positions restart at each document, attention never crosses a document boundary, and the layout is the one
the RoPE modules' ``cu_seqlens`` path computes.

The attention tests run a small stand-in of the GPT's attention (a fused qkv projection, a registered RoPE
module rotating at the batch's ``positions``, :func:`document_attention`), the path ``llm.model`` takes with
``data.packing=documents``; the last test runs the real GPT once it takes ``positions`` and ``doc_mask``.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import flex_attention

import rope
from llm.data.batches import sample_batch
from llm.data.packing import DocumentBatch, document_batch, document_layout, segment_starts
from llm.doc_attention import DocumentMask, dense_document_mask, document_attention, document_block_mask
from rope.base import packed_positions

EOT = 99
VOCAB = 100


def test_positions_restart_at_each_end_of_text_token_and_at_each_row():
    x = torch.tensor([[5, 7, EOT, 3, 4, 9, EOT, EOT, 1],
                      [EOT, 2, 2, 2, 2, 2, 2, 2, 2]])
    positions, doc_ids = document_layout(x, EOT)
    assert positions.tolist() == [[0, 1, 0, 1, 2, 3, 0, 0, 1], [0, 1, 2, 3, 4, 5, 6, 7, 8]]
    assert doc_ids.tolist() == [[0, 0, 1, 1, 1, 1, 2, 3, 3], [0] * 9] and doc_ids.dtype == torch.int32
    batch = DocumentBatch(x, x, positions, doc_ids)
    assert batch.cu_seqlens.tolist() == [0, 2, 6, 7, 9, 18] and batch.cu_seqlens.dtype == torch.int32
    assert torch.equal(packed_positions(batch.cu_seqlens, 18, 64).long(), positions.flatten()), \
        "the RoPE modules' cu_seqlens path computes the same positions"


def test_document_batches_are_the_random_windows_laid_out_by_document():
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, EOT, size=n) for n in rng.integers(1, 40, size=60)]
    stream = np.concatenate([np.append(d, EOT) for d in docs]).astype(np.uint16)
    b = document_batch(stream, EOT, 8, 32, seed=3, step=5, micro_step=1)
    x, y = sample_batch(stream, 8, 32, 3, 5, 1)
    assert torch.equal(b.x, x) and torch.equal(b.y, y), "the same tokens as data.packing=random"
    for row, pos in zip(b.x, b.positions, strict=True):
        starts = [0, *(int(i) for i in torch.nonzero(row == EOT).flatten() if i > 0)]
        assert torch.nonzero(pos == 0).flatten().tolist() == starts
    assert int(b.positions.max()) < 32 and torch.equal(segment_starts(b.positions), b.cu_seqlens)
    again = document_batch(stream, EOT, 8, 32, seed=3, step=5, micro_step=1)
    assert torch.equal(again.positions, b.positions) and torch.equal(again.doc_ids, b.doc_ids)
    share = b.rows(slice(2, 4))
    assert torch.equal(share.x, b.x[2:4]) and torch.equal(share.doc_ids, b.doc_ids[2:4])


class StandIn(nn.Module):
    """Two layers of the GPT's attention path under document packing (no MLP: attention is what is tested)."""

    def __init__(self, dropout: float = 0.0, d: int = 32, heads: int = 4, max_len: int = 64) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.heads, self.dropout = heads, dropout
        self.embed = nn.Embedding(VOCAB, d)
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d, bias=False) for _ in range(2))
        self.proj = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(2))
        self.rotary = rope.build("torch", head_dim=d // heads, max_seq_len=max_len, variant="full")
        self.head = nn.Linear(d, VOCAB, bias=False)
        with torch.no_grad():  # sharpen attention so that what a query may see matters
            for lin in self.qkv:
                lin.weight.mul_(8)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None, mask: DocumentMask) -> torch.Tensor:
        B, T = x.shape
        h = self.embed(x)
        for qkv, proj in zip(self.qkv, self.proj, strict=True):
            q, k, v = self.rotary.rotate_qkv(qkv(F.rms_norm(h, (h.shape[-1],))), self.heads, positions=positions)
            y = document_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask,
                                   dropout_p=self.dropout if self.training else 0.0)
            h = h + proj(y.transpose(1, 2).reshape(B, T, -1))
        return self.head(h)


def logits_of(model: StandIn, x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    positions, doc_ids = document_layout(x, EOT)
    torch.manual_seed(seed)  # the same dropout draws for both inputs
    with torch.no_grad():
        return model(x, positions, DocumentMask.build(doc_ids, dense=model.dropout > 0))


def three_documents(rng: np.random.Generator) -> torch.Tensor:
    """A window of two rows: a piece of document A, then B and C, each after its end-of-text marker."""
    a, b, c = (rng.integers(0, EOT, size=n).tolist() for n in (11, 9, 7))
    row = [*a, EOT, *b, EOT, *c]
    return torch.tensor([row, row[::-1]])


@pytest.mark.parametrize("dropout", [0.0, 0.3], ids=["flex_attention", "sdpa_with_dropout"])
def test_attention_never_crosses_a_document_boundary(dropout):
    """Perturbing the tokens of the previous documents changes nothing in the next one's logits; in training
    with attention dropout (the SDPA path) as in evaluation (flex_attention)."""
    model = StandIn(dropout).train(dropout > 0)
    x = three_documents(np.random.default_rng(1))
    base = logits_of(model, x)
    b_start = 12  # A is x[0, :11], B's marker x[0, 11]
    perturbed = x.clone()
    perturbed[0, :11] = torch.from_numpy(np.random.default_rng(2).integers(0, EOT, size=11))
    out = logits_of(model, perturbed)
    assert torch.equal(out[0, b_start - 1:], base[0, b_start - 1:]), "a later document saw an earlier one"
    assert not torch.allclose(out[0, :11], base[0, :11]), "the perturbed document's own logits must change"
    assert torch.equal(out[1], base[1])


def rotated(model: StandIn, x: torch.Tensor, positions: torch.Tensor | None, doc_ids: torch.Tensor) -> list:
    """The rotated q and k of every layer when ``model`` reads ``x`` at ``positions``."""
    seen = []
    real = model.rotary.rotate_qkv

    def spy(*args, **kwargs):
        q, k, v = real(*args, **kwargs)
        seen.append((q.detach().clone(), k.detach().clone()))
        return q, k, v

    model.rotary.rotate_qkv = spy
    try:
        with torch.no_grad():
            model(x, positions, DocumentMask.build(doc_ids))
    finally:
        del model.rotary.rotate_qkv
    return seen


def test_a_document_reads_the_same_wherever_it_sits_in_the_window():
    """Positions restart at its start marker and attention sees only it: a document after another is rotated
    at the positions, and has the logits, it has at the start of a window. (With RoPE the logits depend only
    on distances inside the document, so they would agree without the restart too; the rotations would not.)"""
    model = StandIn().eval()
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, EOT, size=13).tolist(), rng.integers(0, EOT, size=10).tolist()
    after = torch.tensor([[*a, EOT, *b]])
    alone = torch.tensor([[EOT, *b, *a]])
    got, want = logits_of(model, after)[0, 13:], logits_of(model, alone)[0, :11]
    assert torch.allclose(got, want, atol=1e-5, rtol=0)
    (pos_after, ids_after), (pos_alone, ids_alone) = document_layout(after, EOT), document_layout(alone, EOT)
    for (qa, ka), (qb, kb) in zip(rotated(model, after, pos_after, ids_after), rotated(model, alone, pos_alone,
                                                                                       ids_alone), strict=True):
        assert torch.allclose(qa[0, 13:], qb[0, :11], atol=1e-5) and torch.allclose(ka[0, 13:], kb[0, :11], atol=1e-5)


def test_flex_attention_and_the_dense_mask_equal_attention_run_on_each_document_alone():
    torch.manual_seed(4)
    x = three_documents(np.random.default_rng(4))
    _, doc_ids = document_layout(x, EOT)
    q, k, v = (torch.randn(2, 3, x.shape[1], 8) for _ in range(3))
    mask = DocumentMask.build(doc_ids, dense=True)
    assert mask.block_mask is None and DocumentMask.build(doc_ids).dense is None, "only the mask the path takes"
    flex = flex_attention(q, k, v, block_mask=document_block_mask(doc_ids))  # flex itself: the CPU path is dense
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense)
    want = torch.empty_like(q)
    for b in range(2):
        for d in doc_ids[b].unique():
            idx = torch.nonzero(doc_ids[b] == d).flatten()
            want[b, :, idx] = F.scaled_dot_product_attention(q[b, :, idx], k[b, :, idx], v[b, :, idx], is_causal=True)
    assert torch.allclose(flex, want, atol=1e-5) and torch.allclose(dense, want, atol=1e-5)
    assert torch.equal(mask.dense, dense_document_mask(doc_ids)) and mask.dense.shape == (2, 1, 29, 29)


def test_training_gradients_stay_inside_documents_on_the_cpu():
    """The backward (the dense path on a CPU, where flex_attention has none): a later document's outputs send
    no gradient to an earlier document's queries, keys or values."""
    torch.manual_seed(8)
    x = three_documents(np.random.default_rng(8))
    _, doc_ids = document_layout(x, EOT)
    q, k, v = (torch.randn(2, 3, x.shape[1], 8, requires_grad=True) for _ in range(3))
    out = document_attention(q, k, v, DocumentMask.build(doc_ids))
    out[0, :, 11:].sum().backward()  # documents B and C of row 0 (B's start marker at 11)
    for t in (q, k, v):
        assert not t.grad[0, :, :11].any() and t.grad[0, :, 11:].abs().sum() > 0 and not t.grad[1].any()


def _model_takes_documents() -> bool:
    from llm.model import GPT

    params = inspect.signature(GPT.forward).parameters
    return "positions" in params and "doc_mask" in params


@pytest.mark.skipif(not _model_takes_documents(), reason="llm.model.GPT.forward takes no positions/doc_mask yet")
def test_the_gpt_keeps_documents_apart():
    from llm.model import GPT, GPTConfig

    torch.manual_seed(5)
    cfg = GPTConfig(vocab_size=VOCAB, seq_len=32, n_layer=2, n_head=4, n_embd=32, vocab_multiple=8)
    model = GPT(cfg, rope.build("torch", cfg.head_dim, 32, variant="full")).eval()
    x = three_documents(np.random.default_rng(5))
    perturbed = x.clone()
    perturbed[0, :11] = torch.from_numpy(np.random.default_rng(6).integers(0, EOT, size=11))
    outs = []
    for inp in (x, perturbed):
        positions, doc_ids = document_layout(inp, EOT)
        with torch.no_grad():
            outs.append(model(inp, positions=positions, doc_mask=DocumentMask.build(doc_ids))[0])
    assert torch.equal(outs[0][0, 11:], outs[1][0, 11:]) and not torch.allclose(outs[0][0, :11], outs[1][0, :11])


@pytest.mark.gpu
def test_document_attention_on_the_gpu_compiled_flex_and_sdpa_agree_forward_and_backward(no_tf32):
    torch.manual_seed(7)
    x = three_documents(np.random.default_rng(7)).cuda()
    _, doc_ids = document_layout(x, EOT)
    q, k, v = (torch.randn(2, 4, x.shape[1], 64, device="cuda") for _ in range(3))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    flex = document_attention(q, k, v, DocumentMask.build(doc_ids))  # compiled flex_attention, forward and backward
    grads = torch.autograd.grad(flex.square().sum(), (q, k, v))
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=DocumentMask.build(doc_ids, dense=True).dense)
    want = torch.autograd.grad(dense.square().sum(), (q, k, v))
    assert torch.allclose(flex, dense, atol=2e-3)
    assert all(torch.allclose(g, w, atol=2e-3, rtol=1e-3) for g, w in zip(grads, want, strict=True))


@pytest.mark.parametrize("n_kv_head", [None, 1], ids=["mha", "gqa"])
def test_the_gpt_on_packed_documents_equals_the_gpt_on_each_document_alone(n_kv_head):
    """The real model, not a stand-in: every document of a window (one-token documents, a row of end-of-text
    tokens only, a row that is one document) gives the logits it gives alone at the start of a window."""
    from llm.model import GPT, GPTConfig

    torch.manual_seed(9)
    cfg = GPTConfig(vocab_size=VOCAB, seq_len=16, n_layer=2, n_head=3, n_kv_head=n_kv_head, n_embd=24,
                    vocab_multiple=8)
    model = GPT(cfg, rope.build("torch", cfg.head_dim, 16, variant="full")).eval()
    x = torch.tensor([[5, 7, EOT, 3, 4, 9, EOT, EOT, 1, 2, 3, 4, 5, 6, 7, EOT],
                      [EOT] * 16,
                      list(range(16))])
    positions, doc_ids = document_layout(x, EOT)
    with torch.no_grad():
        packed = model(x, positions=positions, doc_mask=DocumentMask.build(doc_ids))[0]
        for b in range(len(x)):
            for d in doc_ids[b].unique():
                idx = torch.nonzero(doc_ids[b] == d).flatten()
                alone = model(x[b:b + 1, idx])[0][0]
                assert torch.allclose(packed[b, idx], alone, atol=1e-5, rtol=0), (b, idx.tolist())
