"""How fast the project's model decodes: the first token's latency and the tokens per second after it, per decoding
mode and attention (GPU).

    python -m bench.generate                          # small and gpt2_small, batches 1 and 16, prompts 128 to 16384
    python -m bench.generate --model small --batches 1 --prompts 128,2048 --modes captured,eager
    python -m bench.generate --impls torch,triton_v4 --attentions sdpa
    python -m bench.generate --smoke                  # CPU, the tiny model, seconds

A command line over :func:`llm.generation.speed.decode_speed_table`, which says what each mode and attention is and
how a point is timed. Per ``conf/model`` preset and RoPE implementation: the model with random weights (weights do
not change the time), its RoPE cache (``rope.max_seq_len``) as long as the longest prompt plus the new tokens, its
weights cast to bf16 on a GPU as ``llm.generate`` runs them (float32 with ``--smoke``); then every (batch, prompt
length, mode, attention) is measured and appended as one row to ``bench/results/generate.csv`` as soon as it is
measured. ``none`` (no cache: the whole prefix recomputed per token) decodes ``--new-tokens-without-cache`` tokens.
A point that does not fit the GPU's memory is a row with the note ``out of memory``.
"""

from __future__ import annotations

import argparse

import torch

from bench import harness
from llm.cli import OneLineParser

NAME = "generate"
COLUMNS = (*harness.ENV_COLUMNS, "model", "implementation", "batch", "prompt_len", "new_tokens", "mode", "attention",
           "first_token_ms", "decode_tok_s", "step_ms", "captured", "note")
#: The columns of this benchmark's rows from before :func:`~llm.generation.speed.decode_speed_table` (one eager
#: decode step over the dynamic cache timed alone, the RoPE calls in it, tokens per second with and without the
#: cache counting the prompt): the results file keeps them for those rows; they are empty in every new row.
EARLIER_COLUMNS = ("shape", "time_us", "rope_us", "rope_share_pct", "step_vs_none_pct", "tok_s_cache",
                   "tok_s_no_cache")
HEADER = (*COLUMNS, *EARLIER_COLUMNS)


def positive_ints(text: str, option: str, parser: argparse.ArgumentParser) -> list[int]:
    try:
        values = [int(x) for x in harness.split_list(text, option)]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        parser.error(f"{option} takes comma-separated positive integers, got {text!r}")
    return values


def choices(values: list[str], option: str, allowed: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
    unknown = [v for v in values if v not in allowed]
    if not values or unknown:
        parser.error(f"{option} takes comma-separated values of {', '.join(allowed)}, got {','.join(values)!r}")


def check_none_mode(args: argparse.Namespace) -> None:
    """Mode ``none`` (no cache) attends with SDPA only: asked without ``sdpa`` in ``--attentions``, or with only
    ``none`` in ``--modes`` and ``fused_rope`` asked for, its rows would not be the ones asked for. One line, exit 2."""
    if "none" in args.modes and "sdpa" not in args.attentions:
        args.parser.error(f"--modes none decodes without a cache, which attends with sdpa only: add sdpa to "
                          f"--attentions {','.join(args.attentions)} or leave none out of --modes")
    if args.attentions_given and "fused_rope" in args.attentions and set(args.modes) == {"none"}:
        args.parser.error("--attentions fused_rope: mode none (no cache) attends with sdpa only; add a mode with a "
                          "cache to --modes (captured, eager, dynamic) or leave fused_rope out")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, checked before any work (the modes and attentions once ``rope`` is imported: :func:`main`)."""
    p = OneLineParser(prog="python -m bench.generate", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="comma-separated conf/model presets (default small,gpt2_small; "
                                                 "--smoke: tiny)")
    p.add_argument("--impls", default=None, help="comma-separated RoPE implementations (default triton_v4; "
                                                 "--smoke: torch)")
    p.add_argument("--batches", default=None, help="comma-separated batch sizes (default 1,16; --smoke: 1,2)")
    p.add_argument("--prompts", default=None, help="comma-separated prompt lengths (default 128,2048,16384; "
                                                   "--smoke: 4,8)")
    p.add_argument("--new-tokens", type=int, default=None, help="tokens decoded after the prompt (default 128; "
                                                                "--smoke: 3)")
    p.add_argument("--new-tokens-without-cache", type=int, default=None,
                   help="the same for mode none, which recomputes the prefix per token (default 8; --smoke: 2)")
    p.add_argument("--modes", default="captured,eager,dynamic,none",
                   help="comma-separated, of captured, eager, dynamic, none (default all)")
    p.add_argument("--attentions", default=None,
                   help="comma-separated, of sdpa, fused_rope (default both; mode none: sdpa only)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per point, after an untimed one; medians "
                                                             "(default 3; --smoke: 1)")
    p.add_argument("--vocab", type=int, default=None, help="default 50257, GPT-2's (--smoke: 256)")
    harness.add_common_args(p, NAME)
    args = p.parse_args(argv)
    smoke = args.smoke
    # an option given with an empty list is refused: it must not fall back to the default
    args.models = harness.split_list(args.model, "--model") or (["tiny"] if smoke else ["small", "gpt2_small"])
    args.impls = list(dict.fromkeys(harness.split_list(args.impls, "--impls"))) or \
        (["torch"] if smoke else ["triton_v4"])
    args.batches = positive_ints(("1,2" if smoke else "1,16") if args.batches is None else args.batches, "--batches", p)
    args.prompts = positive_ints(("4,8" if smoke else "128,2048,16384") if args.prompts is None else args.prompts,
                                 "--prompts", p)
    # an --attentions given is the user's: mode none (sdpa only) must not stand for it silently (main)
    args.attentions_given = args.attentions is not None
    args.modes = harness.split_list(args.modes, "--modes")
    args.attentions = harness.split_list("sdpa,fused_rope" if args.attentions is None else args.attentions,
                                         "--attentions")
    args.new_tokens = args.new_tokens if args.new_tokens is not None else 3 if smoke else 128
    if args.new_tokens_without_cache is None:
        args.new_tokens_without_cache = 2 if smoke else 8
    args.repeats = args.repeats if args.repeats is not None else 1 if smoke else 3
    args.vocab = (256 if smoke else 50257) if args.vocab is None else args.vocab  # a value given is checked
    if min(args.new_tokens, args.new_tokens_without_cache) < 2:
        p.error("--new-tokens and --new-tokens-without-cache must be at least 2 (a first token, then decoding)")
    if args.repeats < 1 or args.vocab < 2:
        p.error("--repeats must be at least 1 and --vocab at least 2")
    args.model_cfgs = {name: harness.model_config(name, p) for name in args.models}
    if smoke:  # one small layer for whichever presets are asked for: seconds on a CPU
        for model_cfg in args.model_cfgs.values():
            model_cfg.update(n_layer=1, n_embd=32, n_head=2)
    args.parser = p
    return args


def fused_unavailable(device: torch.device) -> str | None:
    """Why ``attention=fused_rope`` (``rope.attention_with_rope``) cannot run here, or None."""
    try:
        from rope.fused_attention import unavailable_reason
    except ImportError:  # an older commit's rope code (--rope-path)
        return "the rope code imported has no rope.fused_attention"
    return unavailable_reason(device)


def build(model_cfg, name: str, args: argparse.Namespace):
    """The preset with RoPE ``name``, random weights (the same for every implementation: RoPE has no parameters),
    a RoPE cache for the longest prompt plus the new tokens, bf16 weights on a GPU."""
    from llm.generation.static import cast_weights
    from llm.model import build_model

    rope_cfg = harness.rope_config(name)
    rope_cfg.max_seq_len = max(args.prompts) + max(args.new_tokens, args.new_tokens_without_cache)
    torch.manual_seed(0)
    model = build_model(model_cfg, rope_cfg, args.vocab).to(args.device).eval()
    return cast_weights(model, torch.bfloat16 if args.device.type == "cuda" else torch.float32)


def point_line(head: dict, point) -> str:
    """A measured point's progress line, true to its CSV row: a ``captured`` point whose step was not captured says
    so, and its note (why not, or why the point was not measured) is shown with the rate or in its place."""
    measured_eagerly = point.mode == "captured" and not point.captured and point.decode_tok_s
    mode = f"{point.mode} (not captured)" if measured_eagerly else point.mode
    rate = f"{point.decode_tok_s:,.0f} tok/s, first token {point.first_token_ms:.1f} ms" if point.decode_tok_s else ""
    note = point.note or ""
    said = f"{rate} ({note})" if rate and note else rate or note
    return (f"{head['model']} {head['implementation']} B={point.batch} prompt {point.prompt_len} {mode} "
            f"{point.attention}: {said}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = harness.Progress()
    args.device = harness.pick_device(args.smoke, "bench.generate")
    rope_root = harness.import_rope(args.rope_path)  # before llm, which imports rope
    from llm.generation.speed import MODES, decode_speed_table
    from llm.kv_cache import ATTENTIONS

    choices(args.modes, "--modes", MODES, args.parser)
    choices(args.attentions, "--attentions", ATTENTIONS, args.parser)
    check_none_mode(args)
    names = harness.registered(args.impls, args.device, args.parser, log)
    if not names:
        args.parser.error(f"--impls {','.join(args.impls)}: none of them runs on {args.device.type} here")
    attentions = list(args.attentions)
    if "fused_rope" in attentions and (reason := fused_unavailable(args.device)):
        log(f"attention fused_rope left out: {reason}")
        attentions.remove("fused_rope")
        if not attentions:
            harness._refuse(f"bench.generate: nothing to measure: --attentions fused_rope cannot run here ({reason})")
    results = harness.ResultsCsv(harness.out_path(args, NAME), HEADER)
    env = harness.environment(args.device, rope_root, args.commit)
    log(f"{env['gpu']}, rope code {env['commit']}: {', '.join(args.models)} x {', '.join(names)}, batches "
        f"{args.batches}, prompts {args.prompts}, modes {', '.join(args.modes)}, attentions {', '.join(attentions)}")
    if args.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    for model_name, model_cfg in args.model_cfgs.items():
        for name in names:
            model = build(model_cfg, name, args)
            head = {**env, "model": model_name, "implementation": name}

            def record(point, head: dict = head) -> None:  # each point kept as it comes: a run cut short keeps them
                results.append([{**head, **point.row()}])
                log(point_line(head, point))

            with torch.no_grad():
                decode_speed_table(model, batches=args.batches, prompt_lens=args.prompts, new_tokens=args.new_tokens,
                                   modes=args.modes, attentions=attentions, repeats=args.repeats,
                                   new_tokens_without_cache=args.new_tokens_without_cache, on_point=record)
            del model
            if args.device.type == "cuda":
                torch.cuda.empty_cache()
    log(f"rows appended to {results.path}")
    return 0


if __name__ == "__main__":
    harness.run_main(main, "bench.generate")
