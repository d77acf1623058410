"""Text generation from a trained model, with a KV cache.

Modules: ``sampling`` (greedy / temperature / top-k / top-p, and their checks), ``decode`` (the loop:
prompt in, tokens out, with or without the cache), ``text`` (prompts as document starts, streamed
UTF-8), ``load`` (a run dir opened: its config, newest checkpoint and model, with its RoPE or another
kernel) and ``command`` (what ``python -m llm.generate`` does). Layers: ``sampling``, ``decode`` and
``text`` sit beside ``llm.model`` (the trainer's samples use them); ``load`` and ``command`` use the
trainer's checkpoint code, like an entry point.
"""

from llm.generation.decode import Generated, generate
from llm.generation.sampling import GREEDY, Sampling, pick_next
from llm.generation.text import TextStream, cut_at, encode_prompt

__all__ = ["GREEDY", "Generated", "Sampling", "TextStream", "cut_at", "encode_prompt", "generate", "pick_next"]
