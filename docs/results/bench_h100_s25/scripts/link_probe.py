# ruff: noqa
"""Session 25: how torch.profiler's device events link to CPU events on this torch (profile_step's phase
attribution read 0 GPU time in every phase on the H100)."""
import collections, torch
from torch.autograd import DeviceType
from torch.profiler import profile, ProfilerActivity, record_function
lin = torch.nn.Linear(512, 512).cuda()
f = torch.compile(lambda x: torch.relu(lin(x)) * 2)
x = torch.randn(64, 512, device="cuda", requires_grad=True)
for _ in range(3):
    f(x).sum().backward()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    with record_function("phase_fwd"):
        y = f(x).sum()
    with record_function("phase_bwd"):
        y.backward()
    torch.cuda.synchronize()
ev = list(prof.events())
cpu = [e for e in ev if e.device_type == DeviceType.CPU]
dev = [e for e in ev if e.device_type != DeviceType.CPU]
print("cpu", len(cpu), "dev", len(dev), "annotations on dev", sum(bool(e.is_user_annotation) for e in dev))
ids = collections.Counter(e.id for e in cpu)
print("cpu ids: distinct", len(ids), "most common", ids.most_common(3))
for e in dev:
    src = [c for c in cpu if c.id == e.id]
    print(f"  dev {e.name[:50]:50s} ann={e.is_user_annotation} id={e.id} start={e.time_range.start:.1f}"
          f" -> {[(c.name[:30], round(c.time_range.start, 1), c.thread) for c in src][:4]}")
for c in cpu:
    if c.kernels:
        print(f"  cpu {c.name[:40]:40s} id={c.id} kernels={[k.name[:30] for k in c.kernels]}")
for c in cpu:
    if c.name.startswith("phase_"):
        print("  window", c.name, round(c.time_range.start, 1), round(c.time_range.end, 1))
