export PYTHONPATH=$PWD
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv > $OUT/r/gpu.txt
cat .devrun/commit.txt > $OUT/r/commit.txt
python .devrun/s27/spec_probe.py 54:triton_v4,54:triton_v4@tile=2048+warps=8,54:triton_v4@tile=512+warps=2,54:triton_v4@tile=4096+warps=16,54:triton_v4@tile=2048+warps=4,56:triton_v4,56:triton_v4@tile=2048+warps=8,114:triton_v4,114:triton_v4@tile=2048+warps=8,206:triton_v4,206:triton_v4@tile=2048+warps=8,128:triton_v4,128:triton_v4@tile=1024+warps=4,48:triton_v4,54:triton_v4 > $OUT/r/spec_probe.txt 2>&1
grep -v Warn $OUT/r/spec_probe.txt | grep -v _warn_once
