"""Causal attention confined to documents: the mask of document-aligned training (``data.packing=documents``).

A query at position q of a row may attend to the key at position kv when ``kv <= q`` and both belong to the
same document segment (``doc_ids[b, q] == doc_ids[b, kv]``, :mod:`llm.data.packing`). The mask is PyTorch's:
``flex_attention`` with a ``BlockMask`` from ``create_block_mask(and_masks(causal, same_document))``, whose
fused kernel skips the blocks no query may see (no hand-written masking kernel here).

Why a second path, SDPA with the same mask as a dense boolean (B, 1, T, T) tensor: ``flex_attention`` has no
attention dropout, and the models trained with ``model.dropout > 0`` (the seed004 recipe) drop attention
probabilities in training; using SDPA there keeps the two packings' models the same function. ``flex_attention``
also has no backward on the CPU (torch 2.13), and its CPU forward runs uncompiled, so attention off a GPU takes
the dense path, in training and evaluation. Evaluation and dropout-free training on a GPU use ``flex_attention``:
outside a compiled model it runs compiled (``torch.compile(flex_attention)``, as its documentation asks: the eager
form materializes the whole score matrix); inside a compiled model Dynamo compiles it with the model.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, and_masks, create_block_mask, flex_attention


def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return q_idx >= kv_idx


def document_mask_mod(doc_ids: Tensor) -> Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]:
    """The flex_attention mask_mod of document-causal attention over rows of segment ids ``doc_ids`` (B, T)."""

    def same_document(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return doc_ids[b, q_idx] == doc_ids[b, kv_idx]

    return and_masks(causal, same_document)


def document_block_mask(doc_ids: Tensor) -> BlockMask:
    """The ``BlockMask`` of document-causal attention for ``doc_ids`` (B, T), on their device (one for all heads)."""
    B, T = doc_ids.shape
    return create_block_mask(document_mask_mod(doc_ids), B, None, T, T, device=doc_ids.device)


def dense_document_mask(doc_ids: Tensor) -> Tensor:
    """The same mask as a boolean (B, 1, T, T) tensor (True: may attend), for SDPA's ``attn_mask``."""
    T = doc_ids.shape[1]
    lower = torch.ones(T, T, dtype=torch.bool, device=doc_ids.device).tril()
    return ((doc_ids[:, :, None] == doc_ids[:, None, :]) & lower)[:, None]


@dataclass
class DocumentMask:
    """What attention needs to stay inside documents: the segment ids, and the masks built from them once per
    batch (outside a compiled model: building a mask is not part of the step's graph)."""

    doc_ids: Tensor
    block_mask: BlockMask | None = None
    dense: Tensor | None = None

    @classmethod
    def build(cls, doc_ids: Tensor, *, dense: bool = False) -> DocumentMask:
        """The mask of ``doc_ids`` (B, T) the attention will take: the dense one for SDPA (see
        :func:`takes_dense`), else the block mask. The other is built on demand."""
        if dense:
            return cls(doc_ids, dense=dense_document_mask(doc_ids))
        return cls(doc_ids, block_mask=document_block_mask(doc_ids))


def takes_dense(device: torch.device, dropout_p: float = 0.0) -> bool:
    """Whether attention on ``device`` takes SDPA's dense mask: with attention dropout (flex_attention has none)
    and on any device but a GPU, forward only or not (flex_attention has no CPU backward, and its CPU forward runs
    uncompiled, materializing the scores with a warning)."""
    return dropout_p > 0 or device.type != "cuda"


@functools.cache
def _compiled_flex():
    return torch.compile(flex_attention, dynamic=False)


def document_attention(q: Tensor, k: Tensor, v: Tensor, mask: DocumentMask, dropout_p: float = 0.0,
                       enable_gqa: bool = False) -> Tensor:
    """Document-causal attention of q (B, H, T, D) over k, v (B, H_kv, T, D): SDPA with the dense mask where
    :func:`takes_dense`, else flex_attention with the block mask."""
    if takes_dense(q.device, dropout_p):
        dense = mask.dense if mask.dense is not None else dense_document_mask(mask.doc_ids)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=dense, dropout_p=dropout_p, enable_gqa=enable_gqa)
    block = mask.block_mask if mask.block_mask is not None else document_block_mask(mask.doc_ids)
    flex = _compiled_flex() if q.is_cuda and not torch.compiler.is_compiling() else flex_attention
    return flex(q, k, v, block_mask=block, enable_gqa=enable_gqa)
