"""pairformer_peers.py — the PyTorch peers of bench/pairformer.cu: one AF3 Pairformer block
forward+backward, as PyTorch eager (materialised triangle attention), eager with
FlexAttention for the triangle attention core, and torch.compile of each, timed by the
shared baseline's own bench() (../shared/bench/pairformer_baseline.py, imported from the
path in $BASELINE: median of 5 CUDA-event timed fwd+bwd after 2 warm-ups; peak = max
allocated during the timed runs minus what was allocated before the warm-ups, i.e. beyond
the bf16 weights and the inputs); and the 48-block stack with per-block checkpointing
(torch.utils.checkpoint, non-reentrant) built from the same PairformerBlock, timed the same
way (1 warm-up, median of --stack-reps). Writes rows in DESIGN.md's format
({"variant", "scope": "block" | "stack48", "N", "pass": "fwdbwd", "ms", "peak_gib",
"tflops"}, or "oom": true, or "error") and a "max_n" section. Not a correctness test.

  BASELINE=../shared/bench/pairformer_baseline.py \
  python3 bench/pairformer_peers.py --ns 256,...,2048 --stack-ns 384,768 --json peers.json
  python3 bench/pairformer_peers.py --estimate-from peers.json --json peers.json   (no GPU:
      the largest-N estimates again, e.g. with another --work-blocks)
Environment: PEER_NS, PEER_COMPILE_NS, STACK_NS, PEER_VARIANTS, PEER_STACK_VARIANTS (empty:
no stacks), PEERS_BUDGET_S, BASELINE.

Order of work, each item skipped once --budget-s (env PEERS_BUDGET_S) seconds have passed
(a variant is not run at larger N after it ran out of memory at a smaller one):
  1. block: eager_flex, then eager, at --ns
  2. stack48: eager_flex, eager at --stack-ns (--stack-variants)
  3. block: compile_eager at --compile-ns (compiling costs about a minute per N)
  4. block: compile_flex at --compile-ns
torch.compile variants compile static shapes (automatic_dynamic_shapes off), so every N is
its own compile and its time is not that of a dynamic-shape kernel.

Largest N of each peer's 48-block stack (ESTIMATED, "estimated": true). Per-block
checkpointing keeps every block's input; the backward reruns one block at a time. The model
(the issue's): the stack's peak ≈ W one-block working peaks + (L − W) further block inputs
+ the stack's bf16 weights and weight gradients,
    peak48(N) = W·P1(N) + (L − W)·(N²·128 + N·384)·2 + L·3,070,848·2·2   bytes, W = 4,
where P1(N) is the measured one-block peak fitted as a·N² + b·N³ (least squares in relative
error, a, b ≥ 0; the cubic term is the materialised N·H·N² attention logits) and
extrapolated beyond the largest measured N. The largest N is the largest with peak48(N) <=
the GPU memory free at the start of this process minus --margin-gib (2, as ours), and below
any N at which one block or the measured stack already ran out of memory. "optimistic_N"
is the same with W = 1.
Where the stack itself was measured, its peak and the model's value are both recorded, and
"calibrated_N" uses the W (clamped to [1, L]) that reproduces the measured peak at the
largest measured N ("w_eff"): the likeliest of the three.
"""
import argparse, gc, importlib.util, json, os, time

ap = argparse.ArgumentParser()
ap.add_argument("--ns", default=os.environ.get("PEER_NS", "256,384,512,768,1024,1536,2048"))
ap.add_argument("--compile-ns", default=os.environ.get("PEER_COMPILE_NS", "384,768"))
ap.add_argument("--stack-ns", default=os.environ.get("STACK_NS", "384,768"))
ap.add_argument("--stack-variants", default=os.environ.get("PEER_STACK_VARIANTS", "eager_flex,eager"))
ap.add_argument("--stack-reps", type=int, default=1)
ap.add_argument("--variants", default=os.environ.get("PEER_VARIANTS", "eager_flex,eager,compile_eager,compile_flex"))
ap.add_argument("--budget-s", type=float, default=float(os.environ.get("PEERS_BUDGET_S", "420")))
ap.add_argument("--L", type=int, default=48)
ap.add_argument("--work-blocks", type=int, default=4)
ap.add_argument("--margin-gib", type=float, default=2.0)
ap.add_argument("--json", default=None)
ap.add_argument("--estimate-from", default=None,
                help="no GPU: recompute the max_n section from an earlier peers JSON")
args = ap.parse_args()

GIB = 2 ** 30
P_BLOCK = 3070848          # parameters of one block (model/pairformer.h)
CZ, CS = 128, 384          # as the baseline (checked when it is loaded)
ints = lambda s: [int(x) for x in s.split(",") if x.strip()]
t0 = time.time()
rows, oom_at = [], {}      # oom_at[(scope, variant)] = smallest N that ran out of memory
if args.estimate_from:
    res = json.load(open(args.estimate_from))
    rows = res["rows"]
    for r in rows:
        if r.get("oom"):
            k = (r["scope"], r["variant"])
            oom_at[k] = min(oom_at.get(k, r["N"]), r["N"])
    free0 = res["free_gib"] * GIB
else:
    import torch
    import torch._dynamo
    path = os.environ.get("BASELINE", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "bench", "pairformer_baseline.py"))
    spec = importlib.util.spec_from_file_location("pairformer_baseline", path)
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    assert (base.CZ, base.CS) == (CZ, CS), "baseline channels differ from the AF3 defaults"
    if hasattr(torch._dynamo.config, "automatic_dynamic_shapes"):
        torch._dynamo.config.automatic_dynamic_shapes = False
    free0 = torch.cuda.mem_get_info()[0]  # before this process allocates anything of its own
    res = {"bench": "pairformer_peers", "gpu": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "baseline": os.path.basename(path),
           "free_gib": free0 / GIB, "rows": rows}


def save():
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


def over_budget():
    return time.time() - t0 > args.budget_s


def record(scope, v, N, r, **extra):
    row = {"variant": v, "scope": scope, "L": 1 if scope == "block" else args.L, "N": N,
           "pass": "fwdbwd", **extra}
    row.update({k: (round(x, 4) if isinstance(x, float) else x) for k, x in r.items()})
    if r.get("oom"):
        key = (scope, v)
        oom_at[key] = min(oom_at.get(key, N), N)
    rows.append(row)
    print(f"{scope:7s} {v:13s} N={N:5d} {json.dumps(r)}  [{time.time() - t0:.0f} s]", flush=True)
    save()


def skip(scope, v, N):
    """True (and a row saying why) when this item is not run."""
    why = None
    if over_budget():
        why = "budget"
    elif (scope, v) in oom_at and N >= oom_at[(scope, v)]:
        why = f"oom at N={oom_at[(scope, v)]}"
    if why:
        rows.append({"variant": v, "scope": scope, "N": N, "pass": "fwdbwd", "skipped": why})
        print(f"{scope:7s} {v:13s} N={N:5d} skipped ({why})", flush=True)
        save()
    return why is not None


def block(v, N):
    if skip("block", v, N):
        return
    tc = time.time()
    r = base.bench(v, N)
    gc.collect(); torch.cuda.empty_cache()
    record("block", v, N, r, wall_s=round(time.time() - tc, 1))


def bench_stack(v, N, L, reps):
    """The baseline's timing protocol on an L-block stack, each block under
    torch.utils.checkpoint (non-reentrant): 1 warm-up, median of reps fwd+bwd."""
    from torch.utils.checkpoint import checkpoint
    torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    blocks = fns = s = z = None
    try:
        blocks = [base.PairformerBlock(use_flex=v.endswith("flex")).to(base.dev, base.DT) for _ in range(L)]
        fns = [torch.compile(b) if v.startswith("compile") else b for b in blocks]
        g = torch.Generator(device=base.dev).manual_seed(N)
        s = torch.randn(N, base.CS, device=base.dev, dtype=base.DT, generator=g, requires_grad=True)
        z = torch.randn(N, N, base.CZ, device=base.dev, dtype=base.DT, generator=g, requires_grad=True)
        mem0 = torch.cuda.memory_allocated()

        def step():
            si, zi = s, z
            for f in fns:
                si, zi = checkpoint(f, si, zi, use_reentrant=False)
            (si.float().sum() + zi.float().sum()).backward()

        step()
        torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
        ts = []
        for _ in range(reps):
            e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
            e0.record(); step(); e1.record()
            torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1))
        ts.sort()
        ms = ts[len(ts) // 2]
        return {"ms": ms, "peak_gib": (torch.cuda.max_memory_allocated() - mem0) / GIB,
                "tflops": L * base.block_flops(N) / ms / 1e9}
    except torch.OutOfMemoryError:
        return {"oom": True}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    finally:
        blocks = fns = s = z = None
        gc.collect(); torch.cuda.empty_cache()


def stack(v, N):
    if skip("stack48", v, N):
        return
    tc = time.time()
    r = bench_stack(v, N, args.L, args.stack_reps)
    record("stack48", v, N, r, checkpoint="per-block", reps=args.stack_reps,
           wall_s=round(time.time() - tc, 1))


# ---------------------------------------------------------------- the work, by priority
variants = [v for v in args.variants.split(",") if v]
PEERS_ALL = ["eager", "eager_flex", "compile_eager", "compile_flex"]
if not args.estimate_from:
    for v in ("eager_flex", "eager"):
        if v in variants:
            for N in ints(args.ns):
                block(v, N)
    for v in [x for x in args.stack_variants.split(",") if x]:
        for N in ints(args.stack_ns):
            stack(v, N)
    if "compile_eager" in variants:
        for N in ints(args.compile_ns):
            block("compile_eager", N)
    if "compile_flex" in variants:
        for N in ints(args.compile_ns):
            block("compile_flex", N)


# ---------------------------------------------------------------- largest N (estimated)
def fit(points):
    """a, b >= 0 minimising sum(((a N² + b N³) - p) / p)²; points [(N, p_bytes)]."""
    if len(points) == 1:
        N, p = points[0]
        return p / N ** 2, 0.0
    x1 = [N ** 2 / p for N, p in points]
    x2 = [N ** 3 / p for N, p in points]
    s11 = sum(x * x for x in x1); s22 = sum(x * x for x in x2); s12 = sum(a * b for a, b in zip(x1, x2))
    y1, y2 = sum(x1), sum(x2)
    det = s11 * s22 - s12 * s12
    if det > 0:
        a, b = (y1 * s22 - y2 * s12) / det, (y2 * s11 - y1 * s12) / det
        if a >= 0 and b >= 0:
            return a, b
    # one term only: the better of pure quadratic and pure cubic
    a, b = y1 / s11, y2 / s22
    err = lambda f: sum((f(N) / p - 1) ** 2 for N, p in points)
    return (a, 0.0) if err(lambda N: a * N ** 2) <= err(lambda N: b * N ** 3) else (0.0, b)


def stack_peak(N, a, b, W, L):
    inp = (N * N * CZ + N * CS) * 2
    return W * (a * N ** 2 + b * N ** 3) + (L - W) * inp + L * P_BLOCK * 2 * 2


def largest(a, b, W, L, cap, limit):
    lo, hi = 0, 1 << 17
    if limit:
        hi = min(hi, limit - 1)
    while lo < hi:  # largest N in [0, hi] with stack_peak(N) <= cap
        mid = (lo + hi + 1) // 2
        if stack_peak(mid, a, b, W, L) <= cap:
            lo = mid
        else:
            hi = mid - 1
    return lo


cap = free0 - args.margin_gib * GIB
model = (f"peak48(N) = {args.work_blocks}·P1(N) + {args.L - args.work_blocks}·(N²·128 + N·384)·2 "
         f"+ {args.L}·{P_BLOCK}·4 bytes <= free - {args.margin_gib:g} GiB; P1 = fitted one-block "
         "peak a·N² + b·N³")
maxn = {}
for v in (PEERS_ALL if args.estimate_from else variants):
    pts = [(r["N"], r["peak_gib"] * GIB) for r in rows
           if r["variant"] == v and r["scope"] == "block" and "peak_gib" in r and r["peak_gib"] > 0]
    if not pts:
        continue
    a, b = fit(pts)
    lims = [n for n in (oom_at.get(("block", v)), oom_at.get(("stack48", v))) if n]
    lim = min(lims) if lims else None
    n = largest(a, b, args.work_blocks, args.L, cap, lim)
    e = {"N": n, "estimated": True, "model": model, "a": a, "b": b,
         "fit_ns": sorted(N for N, _ in pts), "extrapolated": n > max(N for N, _ in pts),
         "optimistic_N": largest(a, b, 1, args.L, cap, lim), "cap_gib": cap / GIB,
         "oom_at": lim}
    checks = [{"N": r["N"], "measured_gib": r["peak_gib"],
               "model_gib": (stack_peak(r["N"], a, b, args.work_blocks, args.L)
                             - args.L * P_BLOCK * 2) / GIB}  # measured excludes the weights
              for r in rows if r["variant"] == v and r["scope"] == "stack48" and "peak_gib" in r]
    if checks:
        e["stack_measured"] = checks
        # calibrated: the number of one-block working peaks W that reproduces the measured
        # stack peak at its largest N (measured = W·P1 + (L − W)·inputs, weights excluded),
        # clamped to [1, L], then the largest N with that W
        c = max(checks, key=lambda r: r["N"])
        Nc, inp = c["N"], (c["N"] ** 2 * CZ + c["N"] * CS) * 2
        p1 = a * Nc ** 2 + b * Nc ** 3
        if p1 > inp:
            w_eff = min(max((c["measured_gib"] * GIB - args.L * inp) / (p1 - inp), 1.0), float(args.L))
            e["w_eff"] = round(w_eff, 3)
            e["calibrated_N"] = largest(a, b, w_eff, args.L, cap, lim)
    maxn[v] = e
    cal = (f", calibrated on the measured stack {e['calibrated_N']} (W = {e['w_eff']})"
           if "calibrated_N" in e else "")
    print(f"largest N (estimated) {v:13s} {n:5d} (optimistic {e['optimistic_N']}{cal}), fit on N = "
          f"{e['fit_ns']}, a = {a:.4g} B/N², b = {b:.4g} B/N³", flush=True)
res["max_n"] = maxn
res["wall_s"] = round(time.time() - t0, 1)
save()
