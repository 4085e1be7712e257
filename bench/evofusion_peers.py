"""evofusion_peers.py — the PyTorch peers of bench/evofusion.cu: the same five ops written
the way PyTorch AF3 code writes them (following ../shared/bench/pairformer_baseline.py),
in bf16, timed as PyTorch eager and as torch.compile of the same module, forward and
backward separately (median of CUDA-event timed repetitions after warm-up; the backward
is timed alone, after an untimed forward), plus a device-to-device copy (tensor.copy_)
as the bandwidth ceiling seen from PyTorch. Not a correctness test.

  python3 bench/evofusion_peers.py --ns 384,768 --json peers.json

Ops (pair tensor z (N, N, 128), M = N² rows):
  ln_linear     Linear(LayerNorm(z)), 128 → 128, no bias
  gated_linear  sigmoid(Linear_g(x)) * Linear_p(x), x = LayerNorm(z), 128 → 128
  transition    Linear_o(silu(Linear_a(x)) * Linear_b(x)), x = LayerNorm(z), 4× hidden
  trimul_out    the outgoing triangle multiplication (TriMul of the baseline file)
  resdrop_row   z + x * rowwise-dropout mask (p = 0.25, mask (1, N, 128) broadcast)
"""
import argparse, json, os, time
import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F

for _k in ("recompile_limit", "cache_size_limit"):
    if hasattr(torch._dynamo.config, _k):
        setattr(torch._dynamo.config, _k, 64)

ap = argparse.ArgumentParser()
ap.add_argument("--ns", default="384,768")
ap.add_argument("--json", default=None)
ap.add_argument("--reps", type=int, default=20)
ap.add_argument("--ops", default="trimul_out,transition,ln_linear,gated_linear,resdrop_row")
ap.add_argument("--budget-s", type=float, default=float(os.environ.get("PEERS_BUDGET_S", "180")))
args = ap.parse_args()
dev, DT, C = "cuda", torch.bfloat16, 128


class LnLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.lin = nn.LayerNorm(C), nn.Linear(C, C, bias=False)

    def forward(self, z):
        return self.lin(self.ln(z))


class GatedLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(C)
        self.p, self.g = nn.Linear(C, C, bias=False), nn.Linear(C, C, bias=False)

    def forward(self, z):
        x = self.ln(z)
        return torch.sigmoid(self.g(x)) * self.p(x)


class Transition(nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.ln = nn.LayerNorm(C)
        self.a, self.b = nn.Linear(C, n * C, bias=False), nn.Linear(C, n * C, bias=False)
        self.o = nn.Linear(n * C, C, bias=False)

    def forward(self, z):
        x = self.ln(z)
        return self.o(F.silu(self.a(x)) * self.b(x))


class TriMulOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_in, self.ln_out = nn.LayerNorm(C), nn.LayerNorm(C)
        self.pa, self.ga, self.pb, self.gb = (nn.Linear(C, C, bias=False) for _ in range(4))
        self.g, self.o = nn.Linear(C, C, bias=False), nn.Linear(C, C, bias=False)

    def forward(self, z):
        z = self.ln_in(z)
        a = torch.sigmoid(self.ga(z)) * self.pa(z)
        b = torch.sigmoid(self.gb(z)) * self.pb(z)
        x = torch.einsum("ikc,jkc->ijc", a, b)
        return torch.sigmoid(self.g(z)) * self.o(self.ln_out(x))


class ResDrop(nn.Module):
    """z + x ⊙ mask, mask (1, N, C) shared over rows: DropoutRowwise on the pair update."""

    def __init__(self, p=0.25):
        super().__init__()
        self.p = p

    def forward(self, z, x):
        keep = (torch.rand((1,) + x.shape[1:], device=x.device) >= self.p).to(x.dtype)
        return z + x * keep * (1.0 / (1.0 - self.p))


MODS = {"ln_linear": LnLinear, "gated_linear": GatedLinear, "transition": Transition,
        "trimul_out": TriMulOut, "resdrop_row": ResDrop}


def median_ms(fn, pre=None, reps=20):
    for _ in range(3):
        if pre: pre()
        fn()
    # then at least 25 ms of the op (triton.testing.do_bench's warm-up; bench/evofusion.cu
    # does the same), so that clocks and caches settle after the previous op
    if pre: pre()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record(); fn(); e1.record()
    torch.cuda.synchronize()
    for _ in range(min(int(25.0 / max(e0.elapsed_time(e1), 1e-3)) + 1, 100000)):
        if pre: pre()
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        if pre: pre()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); fn(); e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1))
    ts.sort()
    return ts[len(ts) // 2]


def bench(op, variant, N):
    torch.cuda.empty_cache()
    mod = MODS[op]().to(dev, DT)
    fn = torch.compile(mod, dynamic=False) if variant == "compile" else mod
    g = torch.Generator(device=dev).manual_seed(N)
    z = (torch.randn(N, N, C, device=dev, dtype=DT, generator=g) * 1.5 + 0.3).requires_grad_(True)
    x = torch.randn(N, N, C, device=dev, dtype=DT, generator=g).requires_grad_(True)
    dout = torch.randn(N, N, C, device=dev, dtype=DT, generator=g)
    inputs = (z, x) if op == "resdrop_row" else (z,)
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    out = fn(*inputs); out.backward(dout)  # compile happens here
    compile_s = time.time() - t0
    fwd = median_ms(lambda: fn(*inputs), reps=args.reps)
    state = {}

    def pre():
        for t in inputs:
            t.grad = None
        for p_ in mod.parameters():
            p_.grad = None
        state["out"] = fn(*inputs)

    bwd = median_ms(lambda: state["out"].backward(dout), pre=pre, reps=args.reps)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30
    del state, out
    return fwd, bwd, peak, compile_s


def main():
    rows = []
    t_start = time.time()
    a = torch.empty(2**30, device=dev, dtype=DT); b = torch.empty_like(a)
    a.normal_()
    cms = median_ms(lambda: b.copy_(a), reps=args.reps)
    copy_gbps = 2 * a.numel() * 2 / cms / 1e6
    print(f"torch d2d copy  {cms:.3f} ms for 2 GiB: {copy_gbps:.0f} GB/s (read + write)", flush=True)
    rows.append({"variant": "torch", "op": "d2d_copy", "N": 0, "pass": "copy", "ms": cms,
                 "gbps": copy_gbps, "peak_gib": 0})
    del a, b
    for N in [int(s) for s in args.ns.split(",")]:
        for op in args.ops.split(","):
            for variant in ("eager", "compile"):
                if variant == "compile" and time.time() - t_start > args.budget_s:
                    print(f"skip {op} {variant} N={N}: peers budget spent", flush=True)
                    continue
                try:
                    fwd, bwd, peak, cs = bench(op, variant, N)
                except torch.OutOfMemoryError:
                    print(f"{op} {variant} N={N}: OOM", flush=True)
                    continue
                except Exception as e:  # keep going: one failing peer must not lose the rest
                    print(f"{op} {variant} N={N}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                    continue
                print(f"{op:13s} {variant:8s} N={N:4d} fwd {fwd:8.3f} ms  bwd {bwd:8.3f} ms  "
                      f"peak {peak:6.2f} GiB  (first call {cs:.1f} s)", flush=True)
                for pas, ms in (("fwd", fwd), ("bwd", bwd)):
                    rows.append({"variant": variant, "op": op, "N": N, "M": N * N, "pass": pas,
                                 "ms": ms, "peak_gib": peak})
                if args.json:  # after every op: a job stopped at its time limit keeps the rest
                    with open(args.json, "w") as f:
                        json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
