"""Session 34: per head dim, the mean and standard deviation of repeated head-dim sweeps, and how many of them read
under 93% of the copy in min(fwd, bwd).

    python docs/results/bench_h100_s34/scripts/sweep_stats.py docs/results/bench_h100_s34/call[23]/r/zero_*.log
"""
import re
import statistics
import sys

sweeps = []
for path in sys.argv[1:]:
    with open(path) as f:
        sweeps.append({int(m[1]): (float(m[2]), float(m[3]))
                       for m in re.finditer(r"D=(\d+) .*?triton_v4 ([0-9.]+)/([0-9.]+)%", f.read())})
print(f"{len(sweeps)} sweeps; readings under 93 in min(fwd, bwd), per sweep:",
      [sum(min(v) < 93 for v in s.values()) for s in sweeps])
for D in sorted(set().union(*sweeps)):
    runs = [s[D] for s in sweeps if D in s]
    fwd, bwd = [r[0] for r in runs], [r[1] for r in runs]
    sd = (lambda xs: statistics.stdev(xs) if len(xs) > 1 else float("nan"))
    under = sum(min(r) < 93 for r in runs)
    print(f"D={D}: fwd {statistics.mean(fwd):.2f} (sd {sd(fwd):.2f})  bwd {statistics.mean(bwd):.2f} "
          f"(sd {sd(bwd):.2f})  under 93: {under}/{len(runs)}" + ("  <<<" if under else ""))
