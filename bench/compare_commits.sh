#!/usr/bin/env bash
# One GPU run times this checkout's RoPE code against another commit's (default d8fcb20, the code before the
# Triton entry became rope/triton/): kernels and training steps, appended to bench/results/{kernel,step}.csv,
# then printed side by side (python -m bench.compare).
#
#   bash bench/compare_commits.sh prepare [COMMIT]       here, in a checkout with git history: .baseline/rope at
#                                                        COMMIT
#   bash bench/compare_commits.sh run [all|kernel|step]  on a GPU machine (about 6 minutes; one part: the kernels
#                                                        or the training steps alone)
#   bash bench/compare_commits.sh summary                anywhere the CSVs are: the comparison again, every row
#
# A GPU machine needs this checkout with its .baseline folder (git history is not needed there: `prepare` writes
# both commits' names into .baseline, git-ignored, and `run` passes them to the benchmarks) and the project's
# dependencies, Liger-Kernel included (pip install -e '.[liger]'). Logs and the summary go to outputs/compare/ (a
# previous run's are moved to outputs/compare-<its time>/ first); with $OUT set to a folder, `run` also leaves there
# the two CSVs, docs/benchmarks.md rewritten from them, summary.txt and logs.tgz.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bash bench/compare_commits.sh prepare [COMMIT] | run [all|kernel|step] | summary"
dir=.baseline
kernel_cases=(--head-dims 64,80,96,128,160,192,256 --variants partial,full
              --cases plain,interleaved,rotary_half,positions,cu_seqlens --reps 10)
liger_sweep=(--head-dims even --variants full --impls triton_v4,liger --reps 10)
gqa_cases=(--heads 32/8 --head-dims 64,80,96,128,160,192,256 --variants full --cases plain --reps 10)
steps=(--model gpt2_small,seed004 --modes eager,compile --impls torch,triton_v4 --warmup 3 --rounds 8 --steps 3)

case "${1:-}" in
  prepare)
    # a name git does not know is one line naming it, not git's "Needed a single revision"
    base=$(git rev-parse --quiet --verify --short "${2:-d8fcb20}^{commit}" 2>/dev/null) || {
      echo "compare_commits.sh prepare: '${2:-d8fcb20}' is no commit of this checkout's git history" >&2; exit 2; }
    head=$(git rev-parse --short HEAD)
    [ -z "$(git status --porcelain -- rope)" ] || head="$head-dirty"
    rm -rf "$dir" && mkdir -p "$dir"
    git archive "$base" rope | tar -x -C "$dir"
    echo "$base" > "$dir/.commit"
    echo "$head" > "$dir/head.commit"
    echo "$dir/rope is $base's; this checkout's rope is $head. The GPU machine needs $dir beside this checkout."
    ;;
  run)
    [ -f "$dir/.commit" ] && [ -f "$dir/head.commit" ] || {
      echo "compare_commits.sh: no $dir/.commit: run 'bash bench/compare_commits.sh prepare' where git history is" >&2
      exit 2; }
    parts=${2:-all}
    case "$parts" in all|kernel|step) ;; *) echo "compare_commits.sh run [all|kernel|step], got '$parts'" >&2; exit 2;; esac
    # without a GPU every benchmark below would refuse, each in its own log: said once, before anything starts
    python -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null || {
      echo "compare_commits.sh run: no CUDA GPU here (torch.cuda.is_available() is False); run it on a GPU machine" >&2
      exit 2; }
    # $OUT gets the rows, logs and tables at the end: a folder it cannot write is said now, not after the timing
    if [ -n "${OUT:-}" ] && { [ ! -d "$OUT" ] || [ ! -w "$OUT" ]; }; then
      echo "compare_commits.sh run: \$OUT=$OUT is not a folder this user can write (the rows and logs go there)" >&2
      exit 2
    fi
    want() { [ "$parts" = all ] || [ "$parts" = "$1" ]; }
    base=$(cat "$dir/.commit") head=$(cat "$dir/head.commit")
    work=outputs/compare logs=outputs/compare/logs
    # a previous run's logs and summary are kept, moved aside under the time of their last change
    if [ -e "$work" ]; then
      aside="$work-$(date -u -r "$work" +%Y%m%dT%H%M%SZ)"
      [ ! -e "$aside" ] || aside="$aside-$$"
      mv "$work" "$aside" && echo "the previous run's $work is now $aside"
    fi
    mkdir -p "$logs"
    export PYTHONUNBUFFERED=1
    t0=$SECONDS
    say() { echo "[$((SECONDS - t0)) s] $*"; }
    # what a run cut short (a time limit) still leaves in $OUT: the rows so far and the logs
    keep() {
      [ -n "${OUT:-}" ] || return 0
      cp bench/results/kernel.csv bench/results/step.csv "$OUT/"
      tar -czf "$OUT/logs.tgz" -C "$work" logs
    }
    # 1. compile everything side by side, timing nothing: Triton's and Inductor's on-disk caches fill up, so the
    #    timed runs below, one at a time, spend their time measuring
    say "compiling both commits' ${parts/all/kernels and training steps} side by side"
    pids=()
    if want kernel; then
      python -m bench.kernel "${kernel_cases[@]}" --impls triton_v4 --rope-path "$dir" --warm-only --jobs 5 \
        > "$logs/warm_kernel_base.log" 2>&1 & pids+=($!)
      python -m bench.kernel "${kernel_cases[@]}" --impls triton_v4,liger --warm-only --jobs 5 \
        > "$logs/warm_kernel_head.log" 2>&1 & pids+=($!)
      python -m bench.kernel "${liger_sweep[@]}" --warm-only --jobs 5 > "$logs/warm_sweep.log" 2>&1 & pids+=($!)
      python -m bench.kernel "${gqa_cases[@]}" --impls triton_v4 --rope-path "$dir" --warm-only --jobs 2 \
        > "$logs/warm_gqa_base.log" 2>&1 & pids+=($!)
      python -m bench.kernel "${gqa_cases[@]}" --impls triton_v4,liger --warm-only --jobs 2 \
        > "$logs/warm_gqa_head.log" 2>&1 & pids+=($!)
    fi
    if want step; then
      python -m bench.step "${steps[@]}" --rope-path "$dir" --warm-only > "$logs/warm_step_base.log" 2>&1 &
      pids+=($!)
      python -m bench.step "${steps[@]}" --warm-only > "$logs/warm_step_head.log" 2>&1 & pids+=($!)
    fi
    for pid in "${pids[@]}"; do wait "$pid" || say "a compile run failed (its log is in $logs); the timed runs go on"; done
    # 2. time, one process at a time
    timed() {
      local name=$1; shift
      say "$name"
      "$@" > "$logs/$name.log" 2>&1 || { say "$name failed:"; tail -n 5 "$logs/$name.log"; }
      keep
    }
    if want kernel; then
      timed kernel_base python -m bench.kernel "${kernel_cases[@]}" --impls triton_v4 --rope-path "$dir" --commit "$base"
      timed kernel_head python -m bench.kernel "${kernel_cases[@]}" --impls triton_v4,liger --commit "$head"
      timed liger_sweep python -m bench.kernel "${liger_sweep[@]}" --commit "$head"
      timed gqa_base python -m bench.kernel "${gqa_cases[@]}" --impls triton_v4 --rope-path "$dir" --commit "$base"
      timed gqa_head python -m bench.kernel "${gqa_cases[@]}" --impls triton_v4,liger --commit "$head"
    fi
    if want step; then
      timed step_base python -m bench.step "${steps[@]}" --rope-path "$dir" --commit "$base"
      timed step_head python -m bench.step "${steps[@]}" --commit "$head"
    fi
    say "done"
    python -m bench.compare --base "$base" --head "$head" > "$work/summary.txt"
    python -m bench.compare --base "$base" --head "$head" --flags-only
    if [ -n "${OUT:-}" ]; then
      python -m bench.tables > /dev/null
      cp docs/benchmarks.md "$work/summary.txt" "$OUT/"
    fi
    ;;
  summary)
    # without prepare's two names the comparison would run on empty commits: one line, exit 2
    [ -f "$dir/.commit" ] && [ -f "$dir/head.commit" ] || {
      echo "compare_commits.sh summary: no $dir/.commit: run 'bash bench/compare_commits.sh prepare' first" >&2
      exit 2; }
    python -m bench.compare --base "$(cat "$dir/.commit")" --head "$(cat "$dir/head.commit")"
    ;;
  -h|--help|help)
    echo "$usage"
    ;;
  *)
    echo "$usage" >&2
    exit 2
    ;;
esac
