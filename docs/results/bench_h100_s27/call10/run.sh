export PYTHONPATH=$PWD
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv > $OUT/r/gpu.txt
cat .devrun/commit.txt > $OUT/r/commit.txt
L=54:triton_v4,114:triton_v4,206:triton_v4,56:triton_v4,128:triton_v4
cp rope/_triton_kernels.py /tmp/orig.py
for v in orig shfl_cost; do
  [ $v = orig ] || cp .devrun/s27/hack/$v.py rope/_triton_kernels.py
  echo "== $v" >> $OUT/r/shfl.txt
  python .devrun/s27/gpu_chk.py 2>&1 | grep -v Warn | grep -v _warn_once >> $OUT/r/shfl.txt
  python .devrun/s27/spec_probe.py $L 2>&1 | grep -v Warn | grep -v _warn_once >> $OUT/r/shfl.txt
  cp /tmp/orig.py rope/_triton_kernels.py
done
cat $OUT/r/shfl.txt
