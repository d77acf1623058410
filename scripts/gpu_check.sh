#!/usr/bin/env bash
# One call on a CUDA machine: GPU tests, the kernel benchmark, the training-step benchmark and an MFU
# run of GPT-2 small. Everything lands in outputs/gpu_check/, or the folder $ROPELAB_GPU_CHECK_DIR names (where
# the script's own tests write, not over a real check's results): the benchmarks' rows in its kernel.csv and
# step.csv, not in bench/results/; with $OUT set to a folder, it also gets report.md (all tables) and
# gpu_check.tar.gz (every file).
#   bash scripts/gpu_check.sh [tests] [suite] [bench] [step] [mfu] [small] [presets]
#   (no argument: tests bench step mfu)
# The RoPE implementations come from the registry (rope.available()), never from a list here: the
# benchmarks default to all of them, and `small` trains every one but `none`.
set -uo pipefail
cd "$(dirname "$0")/.."
dest="${ROPELAB_GPU_CHECK_DIR:-outputs/gpu_check}"
export PYTHONUNBUFFERED=1 ROPELAB_CACHE="${ROPELAB_CACHE:-$PWD/outputs/cache}" WANDB_MODE=offline
parts=("$@"); [ ${#parts[@]} -eq 0 ] && parts=(tests bench step mfu)
known=" tests suite bench step mfu small presets "
for part in "${parts[@]}"; do  # every part checked before any work
  [[ $known == *" $part "* ]] || { echo "gpu_check.sh: unknown part '$part'; the parts are:${known% }" >&2; exit 2; }
done
# Without a GPU every part but the tests fails (and they skip the GPU tests), after minutes, with exit 0: refuse first.
python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null || {
  echo "gpu_check.sh: no CUDA GPU here (torch sees none): run it on a CUDA machine" >&2; exit 2; }
# $OUT gets the report and the tarball at the end: a folder it cannot write is said now, not after the parts ran
if [ -n "${OUT:-}" ] && { [ ! -d "$OUT" ] || [ ! -w "$OUT" ]; }; then
  echo "gpu_check.sh: \$OUT=$OUT is not a folder this user can write (report.md and gpu_check.tar.gz go there)" >&2
  exit 2
fi
mkdir -p "$dest"
report="$dest/report.md"
echo "# GPU check $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" > "$report"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader >> "$report"
python3 -c "import torch, triton; print(f'torch {torch.__version__}, triton {triton.__version__}')" >> "$report"
workers=(); python3 -c "import xdist" 2>/dev/null && workers=(-n auto)  # tests: a worker per core
section() { printf '\n## %s\n\n' "$1" >> "$report"; }
failed=()  # the parts that did not pass: named at the end, and the exit status 1
fail() { failed+=("$1"); printf '\n**%s did not pass** (see %s)\n' "$1" "$2" >> "$report"; }

for part in "${parts[@]}"; do
  case "$part" in
    tests)
      # the kernels' tests (the whole suite, `suite`, takes twice as long)
      section "GPU tests"
      python3 -m pytest -q -p no:cacheprovider ${workers[@]+"${workers[@]}"} tests/rope 2>&1 | tee "$dest/pytest_gpu.log" | tail -n 15 >> "$report"
      [ "${PIPESTATUS[0]}" = 0 ] || fail tests "$dest/pytest_gpu.log" ;;
    suite)
      # every test: on a GPU machine the GPU tests run and the interpreter-only CPU dry runs skip
      section "The whole test suite on this GPU machine"
      python3 -m pytest -q -p no:cacheprovider ${workers[@]+"${workers[@]}"} 2>&1 | tee "$dest/pytest_suite.log" | tail -n 15 >> "$report"
      [ "${PIPESTATUS[0]}" = 0 ] || fail suite "$dest/pytest_suite.log" ;;
    bench)
      section "Kernel benchmark (python -m bench.kernel)"
      python3 -m bench.kernel --out "$dest/kernel.csv" > "$dest/bench_kernel.log" 2>&1 ||
        { tail -n 20 "$dest/bench_kernel.log" >> "$report"; fail bench "$dest/bench_kernel.log"; } ;;
    step)
      section "Training step (python -m bench.step)"
      python3 -m bench.step --out "$dest/step.csv" > "$dest/bench_step.log" 2>&1 ||
        { tail -n 20 "$dest/bench_step.log" >> "$report"; fail step "$dest/bench_step.log"; } ;;
    mfu)
      section "MFU: python -m llm.train model=gpt2_small train.compile=true (B=32, T=1024, bf16)"
      python3 -m llm.train model=gpt2_small train.compile=true train.batch_size=32 train.max_steps=300 \
        train.eval_every=100 train.eval_batches=20 train.log_every=25 optim.lr=6e-4 logger=none \
        hydra.run.dir="$dest/mfu_run" 2>&1 | tee "$dest/mfu.log" | grep -v "it/s" | tail -n 8 >> "$report"
      [ "${PIPESTATUS[0]}" = 0 ] && [ -f "$dest/mfu_run/summary.json" ] || { fail mfu "$dest/mfu.log"; continue; }
      python3 - "$dest/mfu_run" >> "$report" <<'PY'
import json, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
keys = ["params", "tokens_per_s", "mfu", "train_time_s", "compile_warmup_s", "val_loss", "val_acc", "val_ppl",
        "peak_mem_gb", "step", "device"]
print("\n".join(f"- {k}: {s.get(k)}" for k in keys))
PY
      ;;
    small)
      section "Training throughput of model=small per RoPE implementation, eager, 200 steps"
      for r in $(python3 -c "import rope; print(' '.join(n for n in rope.available() if n != 'none'))"); do
        python3 -m llm.train model=small rope=$r train.batch_size=32 train.max_steps=200 train.eval_every=100 \
          train.eval_batches=20 logger=none hydra.run.dir="$dest/small_$r" > "$dest/small_$r.log" 2>&1 ||
          fail "small rope=$r" "$dest/small_$r.log"
        grep -v "it/s" "$dest/small_$r.log" | tail -n 2 >> "$report"
      done ;;
    presets)
      # the comparison presets end to end at a small size (100 steps, 2 seeds or 1, 2 lengths), through the
      # commands the full runs use: a broken path shows here in minutes, not after a long sweep
      section "Presets end to end, 100 steps (rope_variant, rope_quality, length_generalization, length_finetune)"
      few=(train.max_steps=100 train.eval_every=50 logger=none)
      cb=hydra.callbacks.length_generalization
      lengths=("$cb.lengths=[512,2048]" "$cb.tokens=65536")
      run() {  # name, then the llm.train arguments
        local name=$1; shift
        python3 -m llm.train -m "$@" hydra.sweep.dir="$dest/presets/$name" > "$dest/presets_$name.log" 2>&1
        local code=$?
        echo "- $name: exit $code, $(grep -c 'done: val_loss' "$dest/presets_$name.log") run(s) done" >> "$report"
        [ "$code" = 0 ] || fail "presets $name" "$dest/presets_$name.log"
      }
      run rope_variant +experiment=rope_variant hydra/launcher=gpus 'seed=range(2)' "${few[@]}"
      run rope_quality +experiment=rope_quality hydra/launcher=gpus 'seed=range(2)' "${few[@]}"
      run length +experiment=length_generalization hydra/launcher=gpus seed=0 rope=torch,none "${few[@]}" \
        "${lengths[@]}" "$cb.scalings=[none,yarn]"
      run finetune +experiment=length_finetune finetune.source="$(cd "$dest" && pwd)/presets/length" seed=0 rope=torch,none \
        train.max_steps=20 train.eval_every=10 logger=none "${lengths[@]}"
      python3 -m scripts.length_report "$dest/presets/length" "$dest/presets/finetune" \
        --out "$dest/presets/length_report" > "$dest/presets_length_report.log" 2>&1
      code=$?
      echo "- length_report: exit $code" >> "$report"
      [ "$code" = 0 ] || fail "presets length_report" "$dest/presets_length_report.log" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
if [ -f "$dest/kernel.csv" ] || [ -f "$dest/step.csv" ]; then
  section "Benchmark tables"
  python3 -m bench.tables --results "$dest" --print >> "$report"
fi
cat "$report"
if [ -n "${OUT:-}" ]; then
  cp "$report" "$OUT/report.md"
  tar --exclude='*.pt' --exclude='wandb' -czf "$OUT/gpu_check.tar.gz" -C "$(dirname "$dest")" "$(basename "$dest")"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu_check.sh: did not pass: $(IFS=,; echo "${failed[*]}") (report: $report)" >&2
  exit 1
fi
