"""What the model writes during training: greedy continuations of fixed prompts (``train.sample_every``).

Why: a loss curve says the model improves, the text says what it has learnt; logged every N steps
(``samples.jsonl`` in the run dir, a wandb table), a dashboard shows it turning from noise into
code. Greedy decoding draws no random numbers and the model goes back to training mode after it,
so a run with samples trains exactly the model of a run without (a test checks the losses agree),
and a resume may switch sampling on or off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager

import torch

from llm.checks import positive_int
from llm.data import get_tokenizer
from llm.errors import ConfigError
from llm.generation import GREEDY, cut_at, encode_prompt, generate, never_written, new_tokens_room
from llm.model import GPT


def check_sample_config(tc: Mapping) -> None:
    """Validate ``train.sample_every`` / ``sample_tokens`` / ``sample_prompts`` (absent in old runs' configs)."""
    every = positive_int(tc.get("sample_every"), "train.sample_every", minimum=0, allow_none=True,
                         must_be="an integer >= 0 (0 or null: no samples)")
    positive_int(tc.get("sample_tokens", 32), "train.sample_tokens")
    prompts = tc.get("sample_prompts", ())
    if isinstance(prompts, str) or not isinstance(prompts, Sequence) or \
            not all(isinstance(p, str) for p in prompts):
        raise ConfigError(f"train.sample_prompts={prompts!r} must be a list of strings")
    if every and not prompts:
        raise ConfigError(f"train.sample_every={every} needs at least one prompt in train.sample_prompts")


class TrainingSamples:
    """The tokenized prompts of ``train.sample_prompts`` and the greedy decoding of them."""

    def __init__(self, prompts: Sequence[str], max_new_tokens: int, tokenizer_name: str, context_len: int) -> None:
        self.enc = get_tokenizer(tokenizer_name)
        self.max_new_tokens = max_new_tokens
        self.prompts = [(text, encode_prompt(self.enc, text)) for text in prompts]
        self.never = never_written(self.enc)  # ids no document holds: tiktoken cannot decode some of them
        for i, (_, ids) in enumerate(self.prompts):
            if len(ids) > context_len:  # a prompt filling the context still gets one token (the last is never fed)
                raise ConfigError(f"train.sample_prompts[{i}] is {len(ids)} tokens (with the leading end-of-text "
                                  f"token): more than the model's context of {context_len} positions")

    @torch.no_grad()
    def generate(self, model: GPT, device: torch.device, autocast: AbstractContextManager) -> list[dict]:
        """One record per prompt: the prompt, the greedy continuation (cut at the end-of-text token),
        its token count and whether it ended with that token."""
        records = []
        for text, ids in self.prompts:
            n = min(self.max_new_tokens, new_tokens_room(len(ids), model.context_len))
            with autocast:
                out = generate(model, torch.tensor([ids], device=device), n, GREEDY, stop_token=self.enc.eot_token,
                               vocab_size=self.enc.n_vocab, never=self.never)
            tokens, ended = cut_at(out.tokens[0].tolist(), self.enc.eot_token)
            records.append({"prompt": text, "text": self.enc.decode(tokens), "tokens": len(tokens),
                            "end_of_text": ended})
        return records
