# ruff: noqa  (a record of what ran on the H100, kept as it ran)
"""Why Inductor launches our user-defined kernels with Triton's Python launcher instead of its static one."""
import logging, sys

import torch
import torch._inductor.config as ic

logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
logging.getLogger("torch._inductor.runtime.triton_heuristics").setLevel(logging.INFO)
import triton
import rope
from rope import triton_rope as tr

print("triton", triton.__version__, "torch", torch.__version__)
try:
    k = triton.knobs.runtime
    print("hooks:", type(k.launch_enter_hook), getattr(k.launch_enter_hook, "calls", None),
          type(k.launch_exit_hook), getattr(k.launch_exit_hook, "calls", None))
except Exception as e:
    print("knobs?", e)
# eager: the compiled kernel's metadata
r = rope.build("triton_v4", head_dim=48, max_seq_len=512).cuda()
q = torch.randn(24, 512, 8, 48, device="cuda", dtype=torch.bfloat16)
r(q, q.clone())
try:
 for name in ("rope_kernel", "copy_heads_kernel"):
  fn = getattr(tr._kernels, name)
  for dev, caches in getattr(fn, "device_caches", {}).items():
        for key, ck in caches[0].items():
            md = ck.metadata
            print(name, {f: getattr(md, f, "-") for f in ("num_ctas", "global_scratch_size", "profile_scratch_size",
                                                          "launch_pdl", "launch_cooperative_grid", "shared", "num_warps")})
            break
except Exception as e:
    print("metadata?", e)
ic.strict_static_triton_launcher = True
from omegaconf import OmegaConf
from scripts import bench_step as bs
from llm.model import build_model, compile_model
cfg = OmegaConf.load(bs.CONF / "model" / "seed004.yaml")
model = build_model(cfg, bs.rope_config("triton_v4"), 1000).cuda()
print("options", model.rotary.inductor_options)
cm = compile_model(model)
batch = torch.randint(0, 1000, (4, cfg.seq_len), device="cuda")
try:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = cm(batch, batch)[1]
    loss.backward()
    torch.cuda.synchronize()
    print("compiled step ran with the strict static launcher")
except Exception as e:
    print("STRICT:", type(e).__name__, str(e)[:2000])
