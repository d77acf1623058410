export PYTHONPATH=$PWD
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv > $OUT/r/gpu.txt
cat .devrun/commit.txt > $OUT/r/commit.txt
L=54:triton_v4,86:triton_v4,114:triton_v4,150:triton_v4,206:triton_v4,230:triton_v4,128:triton_v4
cp rope/_triton_kernels.py /tmp/orig_k.py; cp rope/triton_rope.py /tmp/orig_r.py
for v in orig planes orig2 planes2; do
  case $v in planes*) cp .devrun/s27/hack/planes_kernels.py rope/_triton_kernels.py; cp .devrun/s27/hack/planes_rope.py rope/triton_rope.py;; esac
  echo "== $v" >> $OUT/r/planes.txt
  case $v in orig|planes) python .devrun/s27/gpu_chk.py 2>&1 | grep -v Warn | grep -v _warn_once >> $OUT/r/planes.txt;; esac
  python .devrun/s27/spec_probe.py $L 2>&1 | grep -v Warn | grep -v _warn_once >> $OUT/r/planes.txt
  cp /tmp/orig_k.py rope/_triton_kernels.py; cp /tmp/orig_r.py rope/triton_rope.py
done
cat $OUT/r/planes.txt
