"""evoflash3d_peers.py — the PyTorch peers of bench/evoflash3d.cu, timed the same way:
forward, backward and forward+backward (median of events) and peak memory beyond the
inputs, for triangle attention (H=4, D=32, R=N) and single attention with pair bias
(H=16, D=24, R=1), bf16, no mask. The peer functions themselves (eager with materialised
logits, torch.compile of it, SDPA with a broadcast bias, FlexAttention with a bias
score_mod) come from the shared baselines file, imported from the path in $BASELINES
(default ../shared/bench/tri_attn_baselines.py). Variant "trifast" (triangle shapes only)
runs the trifast package (PyPI: Triton kernels for triangle attention, its default
autotuning configurations) where it is installed, on its own layout: q, k, v
(1, H, R, N, D), bias (1, H, N, N), an all-valid mask (1, R, N). Not a correctness test.

  python3 bench/evoflash3d_peers.py --tri 256,512 --single 1024 --json peers.json
"""
import argparse, importlib.util, json, math, os, sys, time
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--tri", default="256,384,512,768,1024,1536,2048")
ap.add_argument("--single", default="256,512,1024,2048,4096")
ap.add_argument("--json", default=None)
ap.add_argument("--variants", default="naive,naive_compiled,sdpa,flex")
ap.add_argument("--budget-s", type=float, default=float(os.environ.get("PEERS_BUDGET_S", "330")))
args = ap.parse_args()

path = os.environ.get("BASELINES", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "bench", "tri_attn_baselines.py"))
spec = importlib.util.spec_from_file_location("tri_attn_baselines", path)
base = importlib.util.module_from_spec(spec)
spec.loader.exec_module(base)
fns = {"naive": base.naive, "naive_compiled": base.compiled_naive, "sdpa": base.sdpa}
if base.flex_fn is not None:
    fns["flex"] = base.flex
names = {"naive": "eager", "naive_compiled": "eager_compiled", "sdpa": "sdpa", "flex": "flex", "trifast": "trifast"}
try:  # optional peer; the GPU machine gets it as a wheel (BENCHMARKS.md says how)
    import trifast
except Exception as e:  # noqa
    trifast = None
    print(f"trifast not available: {type(e).__name__}: {e}", flush=True)
dev = "cuda"
DT = torch.bfloat16


def make(Bq, H, N, D, seed):
    g = torch.Generator(device=dev).manual_seed(seed)
    q, k, v = (torch.randn(Bq, H, N, D, device=dev, dtype=DT, generator=g) for _ in range(3))
    b = torch.randn(H, N, N, device=dev, dtype=DT, generator=g)
    for t in (q, k, v, b):
        t.requires_grad_(True)
    do = torch.randn(Bq, H, N, D, device=dev, dtype=DT, generator=g)
    return q, k, v, b, do


def make_trifast(R, H, N, D, seed):
    """trifast's layout: q, k, v, dO (1, H, R, N, D), bias (1, H, N, N); the all-valid mask
    (1, R, N) (True = masked out) travels as the bias tensor's attribute."""
    g = torch.Generator(device=dev).manual_seed(seed)
    q, k, v = (torch.randn(1, H, R, N, D, device=dev, dtype=DT, generator=g) for _ in range(3))
    b = torch.randn(1, H, N, N, device=dev, dtype=DT, generator=g)
    for t in (q, k, v, b):
        t.requires_grad_(True)
    do = torch.randn(1, H, R, N, D, device=dev, dtype=DT, generator=g)
    b.tf_mask = torch.zeros(1, R, N, device=dev, dtype=torch.bool)
    return q, k, v, b, do


def run_trifast(q, k, v, b):
    return trifast.triangle_attention(q, k, v, b, b.tf_mask)


def bench(fn, Bq, H, N, D, maker=make):
    torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    base_mem = torch.cuda.memory_allocated()
    try:
        q, k, v, b, do = maker(Bq, H, N, D, N)
        inputs = torch.cuda.memory_allocated() - base_mem
        for _ in range(2):  # warm-up (compiles)
            o = fn(q, k, v, b); g = torch.autograd.grad(o, (q, k, v, b), do); del o, g
        torch.cuda.synchronize()
        reps = 5
        # fwd: the forward as training runs it (graph kept)
        ts = []
        for _ in range(reps):
            e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
            e0.record(); o = fn(q, k, v, b); e1.record(); torch.cuda.synchronize(); del o
            ts.append(e0.elapsed_time(e1))
        t_f = sorted(ts)[reps // 2]
        ts = []
        for _ in range(reps):
            o = fn(q, k, v, b); torch.cuda.synchronize()
            e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
            e0.record(); g = torch.autograd.grad(o, (q, k, v, b), do); e1.record(); torch.cuda.synchronize()
            del o, g
            ts.append(e0.elapsed_time(e1))
        t_b = sorted(ts)[reps // 2]
        torch.cuda.reset_peak_memory_stats()
        ts = []
        for _ in range(reps):
            e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
            e0.record(); o = fn(q, k, v, b); g = torch.autograd.grad(o, (q, k, v, b), do)
            e1.record(); torch.cuda.synchronize(); del o, g
            ts.append(e0.elapsed_time(e1))
        t_fb = sorted(ts)[reps // 2]
        peak = torch.cuda.max_memory_allocated() - base_mem
        del q, k, v, b, do
        return {"fwd": t_f, "bwd": t_b, "fwdbwd": t_fb, "peak_gib": peak / 2**30,
                "extra_gib": (peak - inputs) / 2**30}
    except torch.OutOfMemoryError:
        return {"oom": True}
    except Exception as e:  # noqa
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    finally:
        torch.cuda.empty_cache()


def main():
    print("torch", torch.__version__, "gpu", torch.cuda.get_device_name(), flush=True)
    shapes = [("tri", int(n), 4, 32) for n in args.tri.split(",") if n] + \
             [("single", int(n), 16, 24) for n in args.single.split(",") if n]
    rows, dead = [], set()
    t0 = time.time()
    for shape, N, H, D in shapes:
        R = N if shape == "tri" else 1
        for name in args.variants.split(","):
            if name == "trifast":
                if trifast is None or shape != "tri":
                    continue
            elif name not in fns:
                continue
            key = (shape, name)
            if key in dead:
                r = {"skipped": "smaller size failed"}
            elif time.time() - t0 > args.budget_s:
                r = {"skipped": "time budget"}
            else:
                r = bench(run_trifast, R, H, N, D, make_trifast) if name == "trifast" else bench(fns[name], R, H, N, D)
                if r.get("oom") or r.get("error"):
                    dead.add(key)
            f1 = 4.0 * R * H * N * N * D
            for ps, mul in (("fwd", 1.0), ("bwd", 2.5), ("fwdbwd", 3.5)):
                row = {"variant": names[name], "shape": shape, "N": N, "R": R, "H": H, "D": D, "pass": ps}
                if "fwd" in r:
                    row.update(ms=round(r[ps], 4), peak_gib=round(r["peak_gib"], 4),
                               extra_gib=round(r["extra_gib"], 4), tflops=round(mul * f1 / r[ps] / 1e9, 2))
                else:
                    row.update(ms=None, **{k: v for k, v in r.items()})
                rows.append(row)
            print(f"{shape:6s} N={N:5d} {names[name]:15s} {json.dumps(r)}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
