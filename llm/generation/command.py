"""``python -m llm.generate``'s work: check the settings, open the run, stream the samples.

Everything a user can get wrong is checked in the order it costs nothing: the settings (sampling,
counts, device, cache, attention), then the run dir (its config and a checkpoint present), then the RoPE
override and the prompt's length against the model's context; only then are the weights loaded. Each
problem is one :class:`~llm.errors.ConfigError` line naming the key.

Decoding runs on the model's weights cast to the decode dtype (``dtype=auto``: bfloat16 on CUDA), as
inference engines run them, through a :class:`~llm.generation.static.StaticDecoder` by default
(``cache=static``: the decode step captured once as a CUDA graph on a GPU, ``capture=false`` to run it
eagerly), or the dynamic cache (``cache=dynamic``), or none (``cache=false``). ``attention=fused_rope``
attends cached steps and prompt chunks (``prefill_chunk=N``) through ``rope.attention_with_rope``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import torch

import rope
from llm.checks import positive_int
from llm.errors import ConfigError
from llm.generation.decode import Generated, cache_kind, fed_positions, generate, new_tokens_room
from llm.generation.load import (
    command_line_rope_keys,
    command_line_rope_preset,
    load_run_model,
    open_run,
    rope_for_generation,
    run_progress,
    run_tokenizer,
)
from llm.generation.sampling import Sampling
from llm.generation.static import StaticDecoder, cast_weights
from llm.generation.text import TextStream, cut_at, encode_prompt, never_written
from llm.kv_cache import ATTENTIONS
from llm.model import rope_cache_len
from llm.training.runtime import resolve_device

DTYPES = ("auto", "float32", "bfloat16")


@dataclass(frozen=True)
class Settings:
    """The checked settings of one ``llm.generate`` call (conf/generate.yaml)."""

    prompt: str
    max_new_tokens: int
    sampling: Sampling
    seed: int
    num_samples: int
    cache: str  # static | dynamic | none
    capture: bool
    attention: str
    prefill_chunk: int | None
    device: torch.device
    dtype: str

    @property
    def weights_dtype(self) -> torch.dtype:
        """The dtype decoding runs in: ``auto`` is bfloat16 on CUDA, float32 elsewhere."""
        bf16 = self.dtype == "bfloat16" or (self.dtype == "auto" and self.device.type == "cuda")
        return torch.bfloat16 if bf16 else torch.float32

    def notes(self) -> list[str]:
        """What greedy decoding makes of the other settings, one line each: not refusals (the command does what it
        says), but a user who set them expects them to act, and must not read the output as their effect."""
        if not self.sampling.greedy:
            return []
        notes = []
        cut = [f"{k}={v:g}" for k, v in (("top_k", self.sampling.top_k), ("top_p", self.sampling.top_p))
               if v is not None]
        if cut:  # argmax takes the most likely token, which every top-k/top-p cut keeps: the cut changes nothing
            notes.append(f"temperature=0 decodes greedily (argmax): {' and '.join(cut)} "
                         + ("is ignored" if len(cut) == 1 else "are ignored"))
        if self.num_samples > 1:  # argmax draws nothing from the seed's stream: every sample is the same text
            notes.append(f"temperature=0 decodes greedily: the {self.num_samples} samples are identical")
        return notes

    @property
    def captures(self) -> bool:
        """Whether the static cache's decode step is to be captured: asked for, and on a CUDA device (elsewhere the
        step runs eagerly, which the header says: :meth:`describe_cache`)."""
        return self.cache == "static" and self.capture and self.device.type == "cuda"

    def describe_cache(self) -> str:
        """The cache as it will decode, for the header: each setting asked for that does not act here says so."""
        if self.cache == "none":
            return "no cache (prefix recomputed per token)"
        if self.cache == "dynamic":
            how = "dynamic"
        elif self.captures:
            how = "static, decode step captured as a CUDA graph"
        elif self.capture:
            how = f"static, eager: capture=true needs a CUDA device, not {self.device.type}"
        else:
            how = "static, eager"
        if self.prefill_chunk is not None:  # read_settings allows it with the static cache only
            how += f"; prompt in chunks of {_tokens(self.prefill_chunk)}"
        return f"KV cache ({how}), attention {self.attention}"


def _number(v: object) -> object:
    """Hydra reads ``temperature=1`` as an int: fine; anything else is passed on for the check to name."""
    return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


def read_prompt(cfg: Mapping) -> str:
    """``prompt=`` text, or the contents of ``prompt_file=`` (not both)."""
    prompt, prompt_file = cfg["prompt"], cfg["prompt_file"]
    prompt = "" if prompt is None else str(prompt)
    if prompt_file in (None, ""):
        return prompt
    if prompt:
        raise ConfigError("prompt= and prompt_file= are both set; give one of them")
    path = Path(str(prompt_file))
    if not path.is_file():
        raise ConfigError(f"prompt_file={prompt_file} is not a file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"prompt_file={prompt_file} is not UTF-8 text") from None


def read_settings(cfg: Mapping) -> Settings:
    """Every setting of conf/generate.yaml checked, before the run is opened.

    ``cfg`` is generate's composed config, which holds every key of conf/generate.yaml (the config check refuses
    one removed with ``~``): each is read as given, so that file is the one place the defaults live."""
    sampling = Sampling(_number(cfg["temperature"]), cfg["top_k"], _number(cfg["top_p"]))
    seed = cfg["seed"]
    # torch seeds with an unsigned 64-bit integer: a larger one failed after the weights loaded, and a negative one
    # wrapped around to the same stream as seed + 2**64
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ConfigError(f"seed={seed!r} must be an integer in [0, 2**64 - 1]")
    cache = cfg["cache"]
    try:
        cache = "static" if cache is True else cache_kind(cache)
    except ValueError:
        raise ConfigError(f"cache={cache!r}; allowed: static (true), dynamic, none (false)") from None
    capture = cfg["capture"]
    if not isinstance(capture, bool):
        raise ConfigError(f"capture={capture!r} must be true or false")
    attention = cfg["attention"]
    if attention not in ATTENTIONS:
        raise ConfigError(f"attention={attention!r}; allowed: {', '.join(ATTENTIONS)}")
    if attention == "fused_rope" and cache == "none":
        raise ConfigError("attention=fused_rope attends over a KV cache: it needs cache=static or cache=dynamic")
    chunk = positive_int(cfg["prefill_chunk"], "prefill_chunk", allow_none=True,
                         must_be="a positive integer, or null for the whole prompt at once")
    if chunk is not None and cache != "static":
        raise ConfigError(f"prefill_chunk={chunk} feeds the prompt into a static cache: it needs cache=static")
    dtype = cfg["dtype"]
    if dtype not in DTYPES:
        raise ConfigError(f"dtype={dtype!r}; allowed: {', '.join(DTYPES)}")
    device = resolve_device(str(cfg["device"]))
    if attention == "fused_rope":
        reason = rope.attention_unavailable_reason(device)
        if reason:
            raise ConfigError(f"attention=fused_rope: {reason}")
    return Settings(read_prompt(cfg), positive_int(cfg["max_new_tokens"], "max_new_tokens"), sampling, seed,
                    positive_int(cfg["num_samples"], "num_samples"), cache, capture, attention, chunk, device, dtype)


class GenerationInterrupted(KeyboardInterrupt):
    """Ctrl-C (or a SIGTERM, :class:`llm.entry.Terminated`) while sample ``sample`` of ``of`` was decoding: its text
    so far is on stdout, so the command says which sample stopped (the interrupt is its ``__cause__``)."""

    def __init__(self, sample: int, of: int) -> None:
        super().__init__()
        self.sample, self.of = sample, of


def generate_from_config(cfg: Mapping, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> list[str]:
    """Stream ``num_samples`` continuations of the prompt to ``out`` (notes to ``err``); return them.

    Each sample is the prompt followed by what the model writes, up to ``max_new_tokens``, the
    end-of-text token, or the end of the model's context (the RoPE cache), whichever comes first.
    """
    s = read_settings(cfg)
    opened = open_run(cfg["run"], cfg["checkpoint"])
    # rope is absent unless the command line chose one (generate.yaml's `rope: null`): the run's then applies
    rope_cfg = rope_for_generation(opened.config.rope, cfg.get("rope"), s.device, opened.context_len,
                                   command_line_rope_keys(cfg), command_line_rope_preset(cfg))
    head_dim = opened.config.model.n_embd // opened.config.model.n_head
    if s.attention == "fused_rope" and head_dim > rope.ATTENTION_MAX_HEAD_DIM:  # before the weights load
        raise ConfigError(f"attention=fused_rope: the run's heads are {head_dim} wide; the fused kernel takes heads up "
                          f"to {rope.ATTENTION_MAX_HEAD_DIM}, as flash-attention kernels do; attention=sdpa takes any")
    enc = run_tokenizer(opened)
    ids = encode_prompt(enc, s.prompt)
    context = rope_cache_len(opened.config.model, rope_cfg)
    if len(ids) > context:
        raise ConfigError(f"prompt: {len(ids)} tokens (with the leading end-of-text token) exceed the model's context "
                          f"of {context} positions (the run's RoPE cache, rope.max_seq_len); shorten the prompt")
    n_new = min(s.max_new_tokens, new_tokens_room(len(ids), context))
    loaded = load_run_model(opened, rope_cfg, s.device, enc)
    r = loaded.rope
    label = rope.label(r["name"], None if r["name"] == "none" else r.get("variant"), r.get("compute_dtype"))
    model = cast_weights(loaded.model, s.weights_dtype)
    step = f"step {loaded.step}{run_progress(opened, loaded.checkpoint)}"
    # checkpoint= may be any file of the model's shape (another run's): the header names the weights decoded
    weights = step if cfg["checkpoint"] in (None, "") else f"{loaded.checkpoint} ({step})"
    err.write(f"{opened.run_dir}: {weights}, rope={label}, {s.device}, {s.describe_cache()}, "
              f"{str(s.weights_dtype)[6:]} weights, context {context} positions\n")
    for note in s.notes():
        err.write(f"[note: {note}]\n")
    decoder = None
    if s.cache == "static":
        decoder = StaticDecoder(model, fed_positions(len(ids), n_new), capture=s.captures, attention=s.attention,
                                prefill_chunk=s.prefill_chunk)
    generator = torch.Generator(device=s.device).manual_seed(s.seed)
    never = never_written(enc)
    prompt = torch.tensor([ids], device=s.device)
    texts: list[str] = []
    try:
        for i in range(s.num_samples):
            # stdout and stderr are often read apart: each sample's lines on stderr say which sample they are of
            which = f"sample {i + 1}/{s.num_samples}: " if s.num_samples > 1 else ""
            if s.num_samples > 1:
                out.write(f"--- sample {i + 1}/{s.num_samples} ---\n")
            out.write(s.prompt)
            out.flush()
            stream = TextStream(enc)

            def show(token: torch.Tensor, stream: TextStream = stream) -> None:
                t = int(token[0])
                if t != enc.eot_token:
                    out.write(stream.push(t))
                    out.flush()

            capturing = decoder is not None and not decoder.captured and decoder.note is None
            result = generate(model, prompt, n_new, s.sampling, generator=generator, use_cache=s.cache,
                              decoder=decoder, attention=s.attention, stop_token=enc.eot_token, vocab_size=enc.n_vocab,
                              never=never, on_token=show, timed=True)
            out.write(stream.flush() + "\n")
            out.flush()
            if decoder is not None and decoder.note and capturing:
                err.write(f"[{decoder.note}]\n")
            err.write(_speed_line(result, capturing and decoder.captured, which))
            tokens, ended = cut_at(result.tokens[0].tolist(), enc.eot_token)
            texts.append(enc.decode(tokens))
            if ended:
                err.write(f"[{which}end of text after {_tokens(len(tokens))}]\n")
            elif n_new < s.max_new_tokens:
                err.write(f"[{which}stopped after {_tokens(n_new)}: the sequence reached the model's context of "
                          f"{context} positions (the run's RoPE cache, rope.max_seq_len)]\n")
            else:
                err.write(f"[{which}stopped after max_new_tokens={n_new} tokens]\n")
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (llm.entry): the text so far stays, the command says so
        out.write("\n")  # the stopped sample's line ends where it stopped; the command's line follows on stderr
        out.flush()
        raise GenerationInterrupted(len(texts) + 1, s.num_samples) from e
    return texts


def _tokens(n: int) -> str:
    return f"{n} token" + ("" if n == 1 else "s")


def _speed_line(result: Generated, captured_now: bool, which: str = "") -> str:
    """How long the first token took (the prompt, and the capture of the decode step when it was made) and
    how fast the rest came; ``which``: the sample's label (``sample 2/8: ``) where there are several."""
    what = "the prompt and the decode step's capture" if captured_now else "the prompt"
    rate = result.decode_tokens_per_s
    tail = f", then {_rate(rate)} tokens/s" if rate else ""
    return f"[{which}first token after {1e3 * result.first_token_s:.1f} ms ({what}){tail}]\n"


def _rate(per_s: float) -> str:
    """Tokens per second as a reader needs them: whole numbers from 100 on, three significant digits below. Why: a
    slow decode (the Triton interpreter, a loaded CPU) of 0.4 tokens/s was printed as "0 tokens/s", as if nothing had
    been decoded after the first token."""
    return f"{per_s:,.0f}" if per_s >= 100 else f"{per_s:.3g}"
