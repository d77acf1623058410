"""Text generation from a trained model, with a KV cache.

Modules: ``sampling`` (greedy / temperature / top-k / top-p, and their checks), ``decode`` (the loop:
prompt in, tokens out, with a static or dynamic cache or none), ``static`` (the static-cache decoder
whose step is captured as a CUDA graph), ``speed`` (first-token latency and decode tokens/s, what the
generation benchmark measures), ``text`` (prompts as document starts, streamed UTF-8), ``load`` (a run
dir opened: its config, newest checkpoint and model, with its RoPE or another kernel) and ``command``
(what ``python -m llm.generate`` does). Layers: ``sampling``, ``decode``, ``static``, ``speed`` and
``text`` sit beside ``llm.model`` (the trainer's samples use them); ``load`` and ``command`` use the
trainer's checkpoint code, like an entry point.
"""

from llm.generation.decode import Generated, generate, new_tokens_room
from llm.generation.sampling import GREEDY, Sampling, pick_next
from llm.generation.static import StaticDecoder
from llm.generation.text import TextStream, cut_at, encode_prompt, never_written

__all__ = ["GREEDY", "Generated", "Sampling", "StaticDecoder", "TextStream", "cut_at", "encode_prompt", "generate",
           "never_written", "new_tokens_room", "pick_next"]
