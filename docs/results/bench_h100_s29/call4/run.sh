[ -d /tmp/site/liger_kernel ] || bash .whl_slim/install.sh >/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
echo "=== overhead A/B: before (36b49cb) and after (a101c5b), alternating, same machine"
for r in 1 2 3; do
  (cd .devrun/pre && PYTHONPATH=/tmp/site:$PWD timeout 100 python -m scripts.bench_rope --overhead --variant full --ropes triton_v4 --no-compiled --no-liger --out $OUT/ab/before$r > $OUT/ab_before$r.log 2>&1)
  timeout 100 python -m scripts.bench_rope --overhead --variant full --ropes triton_v4 --no-compiled --no-liger --out $OUT/ab/after$r > $OUT/ab_after$r.log 2>&1
done
for f in $OUT/ab/*/overhead.csv; do echo $f; python - "$f" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("call-launch", " ".join(f"{float(r['call_minus_launch_us']):.1f}" for r in rows))
print("call      ", " ".join(f"{float(r['call_host_us']):.1f}" for r in rows))
PY
done
tail -3 $OUT/ab_after1.log
