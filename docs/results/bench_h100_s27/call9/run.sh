export PYTHONPATH=$PWD
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv > $OUT/r/gpu.txt
cat .devrun/commit.txt > $OUT/r/commit.txt
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts.sum.pct_of_peak_sustained_elapsed,smsp__sass_inst_executed_op_global_ld.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
cp rope/_triton_kernels.py /tmp/orig.py
for v in orig no_partner; do
  [ $v = orig ] || cp .devrun/s27/hack/$v.py rope/_triton_kernels.py
  timeout 200 $NCU --metrics $M --csv -k regex:rope python .devrun/s27/ncu_one.py 54,114,206,128 > $OUT/r/ncu_$v.csv 2> $OUT/r/ncu_$v.err
  cp /tmp/orig.py rope/_triton_kernels.py
  tail -3 $OUT/r/ncu_$v.err
  python - $OUT/r/ncu_$v.csv $v <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
mi, vi, idi = hdr.index("Metric Name"), hdr.index("Metric Value"), hdr.index("ID")
by = {}
for r in rows:
    by.setdefault(int(r[idi]), {})[r[mi]] = r[vi]
for i in sorted(by):
    print(sys.argv[2], i, " ".join(f"{k}={v}" for k, v in by[i].items()))
PY
done
