"""Document attention off a GPU takes SDPA's dense mask, forward only too: flex_attention's CPU forward runs
uncompiled (it materializes the scores and warns), so a CPU evaluation of a ``data.packing=documents`` run
must not reach it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import llm.doc_attention as doc_attention
from llm.doc_attention import DocumentMask, dense_document_mask, document_attention, takes_dense


def test_the_path_is_dense_off_a_gpu_and_flex_on_one_without_dropout():
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert takes_dense(cpu) and takes_dense(torch.device("meta"))
    assert not takes_dense(gpu)
    assert takes_dense(gpu, 0.1)  # attention dropout: flex_attention has none


def test_a_cpu_forward_without_gradient_never_calls_flex_attention(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("flex_attention called on the CPU")

    monkeypatch.setattr(doc_attention, "flex_attention", refuse)
    torch.manual_seed(0)
    doc_ids = torch.tensor([[0] * 5 + [1] * 9 + [2] * 3, [0] * 11 + [1] * 6])
    q, k, v = (torch.randn(2, 3, 17, 8) for _ in range(3))
    with torch.no_grad():
        out = document_attention(q, k, v, DocumentMask.build(doc_ids))
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=dense_document_mask(doc_ids))
    assert torch.equal(out, want)
