"""What a RoPE implementation costs in a training step of the project's model (GPU).

    python -m bench.step                                        # gpt2_small and seed004, eager and compiled
    python -m bench.step --model seed004 --impls none,torch,triton_v4 --modes compile --rounds 100 --steps 2
    python -m bench.step --impls torch,triton_v4 --rope-path .baseline     # an older commit's RoPE code
    python -m bench.step --model seed004 --impls torch --packings random,documents   # data.packing=documents' cost
    python -m bench.step --smoke                                # CPU, the tiny model, seconds

One step = forward, backward and the optimizer step (``conf/optim``, fused AdamW by default) under bf16 autocast,
on random tokens, of a ``conf/model`` preset (gpt2_small: B 32, GPT-2's 50257-token vocabulary; seed004: B 24 and
cl100k's 100277, as its recipe trains) built with each RoPE implementation; ``compile`` compiles it as training
does (``llm.model.compile_model``). Step times drift by several % over a process and have a heavy tail, more than
the differences looked for, so every implementation's model is built and warmed up first and the steps are then
timed in ``--rounds`` rounds of ``--steps`` steps, the implementations' order rotating each round (one untimed
step before each one's timed ones). Against ``rope=torch`` of the same run: the ratio of the medians of all steps,
with a 95% bootstrap interval that resamples whole rounds (``llm.report.stats.median_ratio_interval``). Comparing
two commits of the RoPE code (``--rope-path``): compare their ``vs_torch_pct``, each paired within its own run.
One row per (model, mode, implementation) is appended to ``bench/results/step.csv``.

``--packings random,documents`` times each implementation also as ``data.packing=documents`` trains
(:mod:`llm.data.packing`): the same tokens with an end-of-text token starting a new document on average every
``--doc-tokens`` tokens, positions restarting at each document, and the document mask built every step (as the
trainer builds it per micro-batch) for attention that stays inside a document (:mod:`llm.doc_attention`:
``flex_attention``'s block mask, or SDPA with the dense mask where the model drops attention probabilities, which
``flex_attention`` cannot). Its row is ``<implementation>+documents``, the attention path in its shape; with
``--impls torch`` its ``vs_torch_pct`` is the packing's step-time overhead against random windows (today's
packing) at the same model. ``--dropout 0`` gives a preset with dropout (seed004) the ``flex_attention`` path.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections.abc import Callable

import torch

from bench import harness
from llm.cli import OneLineParser
from llm.data.config import PACKINGS

NAME = "step"
COLUMNS = (*harness.ENV_COLUMNS, "model", "shape", "implementation", "mode", "time_us", "min_us", "steps", "rounds",
           "vs_torch_pct", "vs_torch_lo", "vs_torch_hi", "params_m")
MODES = ("eager", "compile")
#: The batch and vocabulary each preset is timed at unless told otherwise (seed004: its recipe's).
PRESETS = {"gpt2_small": (32, 50257), "seed004": (24, 100277)}
DEFAULT_PRESET = (32, 100277)
#: What an implementation's name gets for the document-aligned packing (``torch+documents``).
DOCUMENTS = "+documents"
#: Mean document length (tokens) of the timed document-aligned windows: about the code corpus's mean Python file,
#: so most windows of 512 hold one document and some two (what ``data=code_corpus`` trains on).
DEFAULT_DOC_TOKENS = 4096


def split_entry(entry: str) -> tuple[str, str]:
    """``torch+documents`` -> (``torch``, ``documents``); ``torch`` -> (``torch``, ``random``)."""
    return (entry.removesuffix(DOCUMENTS), "documents") if entry.endswith(DOCUMENTS) else (entry, "random")


def document_inputs(tokens: torch.Tensor, vocab: int, doc_tokens: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``tokens`` (B, T) laid out as documents of ``doc_tokens`` tokens on average: the end-of-text token (here the
    vocabulary's last id, nowhere else in the returned tokens) at random places, then each token's position in its
    document and its document's index, as :func:`llm.data.packing.document_layout` gives them to training."""
    from llm.data.packing import document_layout

    eot = vocab - 1
    x = tokens.cpu().masked_fill(tokens.cpu() == eot, 0)
    starts = torch.rand(x.shape, generator=torch.Generator().manual_seed(1)) < 1.0 / doc_tokens
    x[starts] = eot
    positions, doc_ids = document_layout(x, eot)
    return x.to(tokens.device), positions.to(tokens.device), doc_ids.to(tokens.device)


def attention_path(device: torch.device, dropout: float) -> str:
    """How a document-aligned step attends on ``device`` with attention ``dropout`` (:mod:`llm.doc_attention`)."""
    from llm.doc_attention import takes_dense

    return "sdpa dense mask" if takes_dense(device, dropout) else "flex_attention"


def make_step(model_cfg, name: str, mode: str, args: argparse.Namespace, batch: int, vocab: int,
              phase: Callable[[str], contextlib.AbstractContextManager] | None = None
              ) -> tuple[Callable[[], None], float]:
    """One training step of ``model_cfg`` with RoPE ``name`` in ``mode`` as a callable, and its parameters (M).
    ``phase(name)`` wraps its forward, backward and optimizer parts (``bench.profile`` names them for the profiler).
    """
    from omegaconf import OmegaConf

    from llm.doc_attention import DocumentMask, takes_dense
    from llm.model import build_model, compile_model
    from llm.optim import build_optimizers

    impl, packing = split_entry(name)
    torch.manual_seed(0)
    model = build_model(model_cfg, harness.rope_config(impl), vocab).to(args.device)
    optim_cfg = OmegaConf.to_container(OmegaConf.load(harness.ROOT / "conf" / "optim" / f"{args.optim}.yaml"))
    optimizers = build_optimizers(model, optim_cfg, args.device)
    if mode == "eager":
        step_model = model
    elif args.device.type == "cuda":
        step_model = compile_model(model)
    else:  # --smoke: Inductor's C++ build would take the seconds the smoke run has
        step_model = torch.compile(model, backend="aot_eager")
    tokens = torch.randint(0, vocab, (batch, model_cfg.seq_len), device=args.device)
    layout: dict[str, torch.Tensor] = {}
    if packing == "documents":
        tokens, layout["positions"], layout["doc_ids"] = document_inputs(
            tokens, vocab, getattr(args, "doc_tokens", DEFAULT_DOC_TOKENS))
    dense = takes_dense(args.device, float(model_cfg.get("dropout", 0.0)))

    phase = phase or (lambda _: contextlib.nullcontext())

    def documents() -> dict:
        """What the trainer passes the model under data.packing=documents, the mask built anew (as every step)."""
        if not layout:
            return {}
        return {"positions": layout["positions"], "doc_mask": DocumentMask.build(layout["doc_ids"], dense=dense)}

    def step() -> None:
        with phase("forward"), torch.autocast(args.device.type, dtype=torch.bfloat16,
                                              enabled=args.device.type == "cuda"):
            _, loss = step_model(tokens, tokens, **documents())
        with phase("backward"):
            loss.backward()
        with phase("optimizer"):
            for opt in optimizers:
                opt.step()
                opt.zero_grad(set_to_none=True)

    return step, model.num_params() / 1e6


def step_times(step: Callable[[], None], count: int, device: torch.device) -> list[float]:
    """Microseconds of each of ``count`` steps after one untimed step: CUDA events around each on a GPU (a step is
    long enough for the host to keep ahead), wall-clock on the CPU."""
    import time

    step()
    harness.synchronize(device)
    times = []
    for _ in range(count):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(1e3 * start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step()
            times.append(1e6 * (time.perf_counter() - t0))
    return times


def build_steps(model_name: str, mode: str, names: list[str], args: argparse.Namespace, log: Callable[[str], None],
                phase: Callable[[str], contextlib.AbstractContextManager] | None = None
                ) -> tuple[dict[str, Callable[[], None]], dict[str, float], str]:
    """Every implementation's step of one (model, mode), built and warmed up (``args.warmup`` steps), all alive at
    once; one that fails is logged and left out. Returns the steps, their parameter counts (M) and the shape."""
    model_cfg = harness.model_config(model_name, args.parser)
    if args.smoke:  # one small layer: the Triton entries' launches run in the interpreter, tens of ms each
        model_cfg.update(n_layer=1, n_embd=32, n_head=2, seq_len=8)
    if getattr(args, "dropout", None) is not None:
        model_cfg.update(dropout=args.dropout)
    batch, vocab = PRESETS.get(model_name, DEFAULT_PRESET)
    batch, vocab = args.batch or batch, args.vocab or vocab
    steps, params = {}, {}
    for i, name in enumerate(names, 1):
        try:
            steps[name], params[name] = make_step(model_cfg, name, mode, args, batch, vocab, phase)
            for _ in range(args.warmup):
                steps[name]()
            harness.synchronize(args.device)
            log(f"{model_name} {mode} {name}: built and warmed up ({i}/{len(names)})")  # a compile takes minutes
        except Exception as exc:  # one implementation failing (under compile, say) must not lose the others
            _problem(log, f"{model_name} {mode} {name} failed: {_first_line(exc)}")
            steps.pop(name, None)
    log(f"{model_name} {mode}: built and warmed up {', '.join(steps) or 'nothing'}")
    shape = f"B{batch}xT{model_cfg.seq_len} vocab {vocab}"
    if getattr(args, "dropout", None) is not None:
        shape += f" dropout {args.dropout:g}"
    return steps, params, shape


def row_shape(shape: str, name: str, args: argparse.Namespace, dropout: float) -> str:
    """The shape column of ``name``'s row: a document-aligned step adds its documents' mean length and its
    attention path, which decide its cost."""
    if split_entry(name)[1] != "documents":
        return shape
    return f"{shape} documents~{args.doc_tokens} {attention_path(args.device, dropout)}"


def rotated(names: list[str], r: int) -> list[str]:
    """``names`` in round ``r``'s order: from the (r mod n)-th on, so that each leads a round in turn and a drift
    over the run falls on all alike."""
    k = r % len(names)
    return names[k:] + names[:k]


def measure(model_name: str, mode: str, names: list[str], args: argparse.Namespace, env: dict,
            log: Callable[[str], None]) -> list[dict]:
    """Rows of every implementation of one (model, mode), timed in interleaved rounds (nothing with ``--warm-only``)."""
    from llm.report.stats import median_ratio_interval

    steps, params, shape = build_steps(model_name, mode, names, args, log)
    if args.warm_only or not steps:
        return []
    dropout = args.dropout if args.dropout is not None else \
        float(harness.model_config(model_name, args.parser).get("dropout", 0.0))
    order = list(steps)
    times: dict[str, list[list[float]]] = {n: [] for n in order}
    for r in range(args.rounds):
        for name in rotated(order, r):
            if name not in order:  # failed earlier in this round
                continue
            try:
                times[name].append(step_times(steps[name], args.steps, args.device))
            except Exception as exc:  # one implementation failing in a later step must not lose the others' rounds
                _problem(log, f"{model_name} {mode} {name} failed in timed round {r + 1}: {_first_line(exc)}; "
                              "left out")
                order.remove(name)
                del times[name], steps[name]
    rows = []
    for name in order:
        flat = [t for rnd in times[name] for t in rnd]
        row = {**env, "model": model_name, "shape": row_shape(shape, name, args, dropout),
               "implementation": name, "mode": mode, "time_us": statistics.median(flat), "min_us": min(flat),
               "steps": len(flat), "rounds": args.rounds, "params_m": params[name],
               "vs_torch_pct": None, "vs_torch_lo": None, "vs_torch_hi": None}
        if "torch" in times and name != "torch":
            row["vs_torch_pct"], row["vs_torch_lo"], row["vs_torch_hi"] = \
                median_ratio_interval(times[name], times["torch"])
        rows.append(row)
        vs = "" if row["vs_torch_pct"] is None else f"  vs torch {row['vs_torch_pct']:+.2f}%"
        log(f"{model_name} {mode} {name}: median {row['time_us'] / 1e3:.2f} ms{vs}")
    return rows


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"


def _problem(log: Callable[[str], None], message: str) -> None:
    """``message`` as a problem where ``log`` counts them (:class:`bench.harness.Progress`), else a line."""
    getattr(log, "problem", log)(message)


def allow_compiled_models(count: int) -> None:
    """Room in Dynamo's cache for ``count`` compiled models alive at once (one per implementation)."""
    for key in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, key):
            setattr(torch._dynamo.config, key, max(getattr(torch._dynamo.config, key), 8 + count))


def check_model_options(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--batch``, ``--vocab`` (``--smoke``'s defaults set) and ``--optim``, checked before any work: a size given
    is never replaced by the preset's, nor an optimizer left to fail every model later (``bench.profile`` too)."""
    if args.smoke:
        args.batch = 2 if args.batch is None else args.batch
        args.vocab = 256 if args.vocab is None else args.vocab
    if args.batch is not None and args.batch < 1 or args.vocab is not None and args.vocab < 2:
        p.error(f"--batch must be at least 1 and --vocab at least 2, got {args.batch} and {args.vocab}")
    if not (harness.ROOT / "conf" / "optim" / f"{args.optim}.yaml").is_file():
        p.error(f"--optim {args.optim}: no conf/optim/{args.optim}.yaml; the presets: "
                f"{', '.join(sorted(f.stem for f in (harness.ROOT / 'conf' / 'optim').glob('*.yaml')))}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="python -m bench.step", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="conf/model presets, comma-separated (default gpt2_small,seed004; "
                                                 "--smoke: tiny)")
    p.add_argument("--impls", default=None,
                   help="comma-separated registry names (default: every registered one that runs here; --smoke: "
                        "none,torch,triton_v4)")
    p.add_argument("--modes", default=None,
                   help="comma-separated, of eager, compile (default eager,compile; --smoke: eager)")
    p.add_argument("--packings", default="random",
                   help="data.packing layouts timed, comma-separated: random (today's, the default), documents "
                        "(positions restarting at each document, the document mask: rows <impl>+documents)")
    p.add_argument("--doc-tokens", type=int, default=None,
                   help=f"mean document length in tokens of the documents packing (default {DEFAULT_DOC_TOKENS}; "
                        "--smoke: 4)")
    p.add_argument("--dropout", type=float, default=None,
                   help="model.dropout for every model (default: the preset's; 0 gives documents flex_attention)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default: the preset's, 32; seed004 24)")
    p.add_argument("--vocab", type=int, default=None,
                   help="vocabulary (default: 50257 for gpt2_small, cl100k's 100277 otherwise)")
    p.add_argument("--optim", default="adamw", help="a conf/optim preset")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps after the build (default 5; --smoke 1)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of interleaved timing (default 10; --smoke 2)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per round and implementation (default 4; "
                                                           "--smoke 1)")
    p.add_argument("--warm-only", action="store_true",
                   help="build, compile and warm up every model, time nothing: fills the compile caches a later run "
                        "reads (bench/compare_commits.sh runs these side by side)")
    harness.add_common_args(p, NAME)
    args = p.parse_args(argv)
    smoke = args.smoke
    # an option given with an empty list is refused: it must not fall back to the default
    args.models = harness.split_list(args.model, "--model") or (["tiny"] if smoke else ["gpt2_small", "seed004"])
    args.modes = harness.split_list(args.modes, "--modes") or (["eager"] if smoke else ["eager", "compile"])
    harness.split_list(args.impls, "--impls")
    args.impls = ("none,torch,triton_v4" if smoke else None) if args.impls is None else args.impls
    args.warmup = 1 if smoke and args.warmup is None else 5 if args.warmup is None else args.warmup
    # a value given is checked, never replaced: only an option left out takes its default
    args.rounds = (2 if smoke else 10) if args.rounds is None else args.rounds
    args.steps = (1 if smoke else 4) if args.steps is None else args.steps
    args.doc_tokens = args.doc_tokens if args.doc_tokens is not None else (4 if smoke else DEFAULT_DOC_TOKENS)
    check_model_options(p, args)
    bad = [m for m in args.modes if m not in MODES]
    if bad or not args.modes:
        p.error(f"--modes takes {', '.join(MODES)} (comma-separated), got {', '.join(bad) or 'none'}")
    args.packings = harness.split_list(args.packings, "--packings")
    bad = [k for k in args.packings if k not in PACKINGS]
    if bad or not args.packings:
        p.error(f"--packings takes {', '.join(PACKINGS)} (comma-separated), got {', '.join(bad) or 'none'}")
    if args.doc_tokens < 1:
        p.error(f"--doc-tokens must be at least 1, got {args.doc_tokens}")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        p.error(f"--dropout must be in [0, 1), got {args.dropout}")
    if args.warmup < 0 or min(args.rounds, args.steps) < 1:
        p.error("--rounds and --steps must be at least 1, --warmup at least 0")
    for model in args.models:
        harness.model_config(model, p)
    args.parser = p
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = harness.Progress()
    args.device = harness.pick_device(args.smoke, "bench.step")
    rope_root = harness.import_rope(args.rope_path)
    import rope

    asked = list(dict.fromkeys(harness.split_list(args.impls, "--impls"))) or rope.available()  # each once
    impls = harness.registered(asked, args.device, args.parser, log)
    if not impls:  # each left out with its reason above
        harness._refuse("bench.step: nothing to measure: every implementation of --impls was left out (the lines "
                        "above say why)")
    names = [impl + ("" if packing == "random" else DOCUMENTS) for packing in args.packings for impl in impls]
    results = None if args.warm_only else harness.ResultsCsv(harness.out_path(args, NAME), COLUMNS)
    env = harness.environment(args.device, rope_root, args.commit)
    log(f"{env['gpu']}, rope code {env['commit']} ({rope_root}): {', '.join(args.models)} x "
        f"{', '.join(args.modes)} x {', '.join(names)}{harness.plugin_versions(impls)}")
    if args.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    if "compile" in args.modes:  # (importing Dynamo takes seconds: only where something compiles)
        allow_compiled_models(len(names))
    for model_name in args.models:
        for mode in args.modes:
            rows = measure(model_name, mode, names, args, env, log)
            if results is not None:
                results.append(rows)
            if mode == "compile":
                torch._dynamo.reset()
            if args.device.type == "cuda":
                torch.cuda.empty_cache()
    return log.exit_code("bench.step")


if __name__ == "__main__":
    harness.run_main(main, "bench.step")
