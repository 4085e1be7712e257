"""pairformer_report.py — merges the rows of bench/pairformer.cu (ours) and
bench/pairformer_peers.py (PyTorch eager, eager + FlexAttention, torch.compile; the stack
with per-block checkpointing) into one results file in DESIGN.md's format and prints the
markdown for BENCHMARKS.md: the one-block table, the 48-block stack table, the largest-N
table, the matmul peak the MFU is taken against, and the issue's goals checked against the
numbers. Not a benchmark itself.

  python3 bench/pairformer_report.py ours.json peers.json[,peers2.json] out.json "<command>" "<gpu>"

A missing peers file is allowed (PEERS=0): the peer columns then read "—" (and a missing
ours file gives the peer columns alone).
"""
import datetime, json, os, sys

ours_p, peers_p, out_p, command, gpu = sys.argv[1:6]
ours = json.load(open(ours_p)) if os.path.exists(ours_p) else {"rows": []}
peers = {"rows": [], "max_n": {}}
for pp in peers_p.split(","):  # several peers files (runs split across jobs) merge
    if os.path.exists(pp):
        d = json.load(open(pp))
        peers["rows"] += d.get("rows", [])
        peers["max_n"].update(d.get("max_n") or {})
        peers.setdefault("torch", d.get("torch"))
peak = ours.get("matmul_peak_tflops") or 0
PEERS = ["eager", "eager_flex", "compile_eager", "compile_flex"]
NAME = {"eager": "eager", "eager_flex": "eager+Flex", "compile_eager": "compile",
        "compile_flex": "compile+Flex"}

rows = [dict(r) for r in ours.get("rows", [])]
for r in peers.get("rows", []):
    r = dict(r)
    if peak and r.get("tflops"):
        r["mfu"] = round(r["tflops"] / peak, 4)
    rows.append(r)
# One row per (variant, scope, N, pass, policy): a measured row beats an OOM or error row,
# which beats a "skipped" one (peers runs split across jobs may each list an item).
rank = lambda r: 0 if r.get("ms") is not None else (1 if r.get("oom") or r.get("error") else 2)
best = {}
for r in rows:
    key = (r["variant"], r.get("scope"), r["N"], r.get("pass"), r.get("policy"), r.get("sublayer"))
    if key not in best or rank(r) < rank(best[key]):
        best[key] = r
rows = [r for r in rows if best[(r["variant"], r.get("scope"), r["N"], r.get("pass"),
                                 r.get("policy"), r.get("sublayer"))] is r]
max_n = {"megafold": ours.get("max_n")} if ours.get("max_n") else {}
max_n.update(peers.get("max_n") or {})
res = {"bench": "pairformer", "gpu": gpu, "date": datetime.date.today().isoformat(),
       "command": command, "matmul_peak_tflops": peak,
       "matmul_peak_how": ours.get("matmul_peak_how"), "torch": peers.get("torch"),
       "rows": rows, "max_n": max_n}
json.dump(res, open(out_p, "w"), indent=1)


def find(variant, scope, N, p="fwdbwd", policy=None):
    for r in rows:
        if (r["variant"] == variant and r.get("scope") == scope and r["N"] == N and
                r.get("pass") == p and (policy is None or r.get("policy") == policy)):
            return r
    return None


def ms(r):
    if r is None:
        return "—"
    if r.get("oom"):
        return "OOM"
    if r.get("error"):
        return "error"
    if r.get("skipped"):
        return "skipped"
    return f"{r['ms']:.1f}" if r["ms"] >= 10 else f"{r['ms']:.2f}"


def gib(r):
    return f"{r['peak_gib']:.2f}" if r and r.get("peak_gib") is not None else "—"


def both(r):  # "ms / GiB" of a peer
    m = ms(r)
    return f"{m} / {r['peak_gib']:.1f}" if r and r.get("peak_gib") is not None else m


def ok(r):
    return r is not None and r.get("ms") is not None and not r.get("oom")


def ratio(a, b):  # how many times b's value is a's (b / a)
    return f"{b / a:.2f}×" if a and b else "—"


date = res["date"]
print(f"Pairformer trunk, {gpu}, {date}, `{command}`.")
print(f"One AF3 Pairformer block (c_s = 384, c_z = 128, 4×32 triangle heads, 16×24 single "
      f"heads, transition ×4), bf16, dropout on, no mask"
      + (f"; PyTorch {res['torch']}" if res.get("torch") else "") + ".")
print(f"bf16 matmul peak measured in the same job: **{peak:.0f} TFLOP/s** "
      f"({ours.get('matmul_peak_how') or 'cuBLAS GEMM'}). FLOPs from "
      "`../shared/docs/flop_count.py` (pairformer_block: matmul FLOPs only), training = 3 × "
      "forward; MFU = those FLOPs / time / matmul peak (recomputation not counted).")
print("Memory: ours = every byte our process allocates for the run (arena, bf16 compute copy, "
      "fp32 master weights and gradients, cuBLAS workspace, inputs, outputs, gradients); "
      "PyTorch = peak allocated beyond its weights and inputs (the baseline's measure), so "
      "the ratio is conservative for ours.\n")

# ---------------------------------------------------------------- block
bN = sorted({r["N"] for r in rows if r.get("scope") == "block"})
present = [v for v in PEERS if any(r["variant"] == v and r.get("scope") == "block" for r in rows)]
print("**One block, forward + backward** (median of the timed repetitions; ours also "
      "forward and backward alone)\n")
hdr = ["N", "ours fwd ms", "ours bwd ms", "ours fwd+bwd ms", "ours GiB", "TFLOP/s", "MFU"]
for v in present:
    hdr.append(f"{NAME[v]} ms / GiB")
hdr += ["× vs eager+Flex", "× vs compile", "memory vs eager+Flex"]
print("| " + " | ".join(hdr) + " |")
print("|" + "---|" * len(hdr))
for N in bN:
    o = find("megafold", "block", N)
    cells = [str(N), ms(find("megafold", "block", N, "fwd")), ms(find("megafold", "block", N, "bwd")),
             ms(o), gib(o), f"{o['tflops']:.0f}" if ok(o) else "—",
             f"{100 * o['mfu']:.0f}%" if ok(o) and o.get("mfu") else "—"]
    for v in present:
        cells.append(both(find(v, "block", N)))
    f, c = find("eager_flex", "block", N), find("compile_eager", "block", N)
    om = o["ms"] if ok(o) else None
    cells.append(ratio(om, f["ms"]) if ok(f) else ("OOM" if f and f.get("oom") else "—"))
    cells.append(ratio(om, c["ms"]) if ok(c) else ("OOM" if c and c.get("oom") else "—"))
    cells.append(f"{o['peak_gib'] / f['peak_gib']:.2f}" if ok(o) and ok(f) and f.get("peak_gib")
                 else "—")
    print("| " + " | ".join(cells) + " |")

# ---------------------------------------------------------------- stack
sN = sorted({r["N"] for r in rows if r.get("scope") == "stack48" and r.get("policy", "recompute") == "recompute"})
spresent = [v for v in PEERS if any(r["variant"] == v and r.get("scope") == "stack48" for r in rows)]
if sN:
    print("\n**48-block stack, forward + backward** (ours: policy recompute, every block's input "
          "kept and each block rerun before its backward; PyTorch: torch.utils.checkpoint per "
          "block; 1 warm-up then the timed repetitions; MFU counts model FLOPs, HFU also the "
          "recomputed forwards)\n")
    hdr = ["N", "ours fwd ms", "ours bwd ms", "ours fwd+bwd ms", "ours GiB", "MFU", "HFU"]
    for v in spresent:
        hdr.append(f"{NAME[v]} ms / GiB")
    hdr += ["× vs eager+Flex", "memory vs eager+Flex"]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for N in sN:
        o = find("megafold", "stack48", N, policy="recompute")
        cells = [str(N), ms(find("megafold", "stack48", N, "fwd", "recompute")),
                 ms(find("megafold", "stack48", N, "bwd", "recompute")), ms(o), gib(o),
                 f"{100 * o['mfu']:.0f}%" if ok(o) and o.get("mfu") else "—",
                 f"{100 * o['hfu']:.0f}%" if ok(o) and o.get("hfu") else "—"]
        for v in spresent:
            cells.append(both(find(v, "stack48", N)))
        f = find("eager_flex", "stack48", N)
        cells.append(ratio(o["ms"], f["ms"]) if ok(o) and ok(f) else "—")
        cells.append(f"{o['peak_gib'] / f['peak_gib']:.2f}" if ok(o) and ok(f) and f.get("peak_gib")
                     else "—")
        print("| " + " | ".join(cells) + " |")

# ---------------------------------------------------------------- largest N
if max_n:
    print("\n**Largest N whose 48-block stack forward + backward fits on one GPU**\n")
    print("| variant | checkpointing | largest N | how |")
    print("|---|---|---|---|")
    m = max_n.get("megafold")
    if m:
        how = (f"planner: free {m['free_gib']:.1f} GiB − weights/master/grads {m['fixed_gib']:.2f} "
               f"GiB − margin {m['margin_gib']:g} GiB, arena + in/out/grad tensors")
        print(f"| megafold | recompute (every block's input) | {m['recompute']['N']} | {how} |")
        ek, run = m["every_k"], m.get("run")
        runs = ""
        if run and run.get("policy") == "every-k":
            nb = run.get("blocks_run", 48)
            runs = (f"; the whole {run.get('blocks_allocated', 48)}-block stack **allocated** at "
                    f"N = {run['N']} (peak {run['peak_gib']:.1f} of {run['gpu_total_gib']:.1f} GiB) "
                    f"and fwd+bwd of its first {nb} blocks **ran** in it ({run['ms'] / 1000:.1f} s)"
                    if run.get("fit")
                    else f"; run at N = {run['N']} did **not** fit")
        print(f"| megafold | every-{ek['k']} (segments of {ek['k']}) | {ek['N']} | planner{runs} |")
        bk = m.get("best_k")
        if bk and bk["k"] != ek["k"]:
            print(f"| megafold | every-{bk['k']} (best k) | {bk['N']} | planner |")
    for v in PEERS:
        e = max_n.get(v)
        if not e:
            continue
        ext = f", extrapolated from N ≤ {max(e['fit_ns'])}" if e.get("extrapolated") else ""
        oom = f"; out of memory at N = {e['oom_at']}" if e.get("oom_at") else ""
        chk = ""
        for c in e.get("stack_measured", []):
            chk += f"; stack measured at N = {c['N']}: {c['measured_gib']:.1f} GiB (model {c['model_gib']:.1f})"
        if "calibrated_N" in e:
            print(f"| {NAME[v]} | per block (torch.utils.checkpoint) | ≈{e['calibrated_N']} "
                  f"(range {e['N']}–{e['optimistic_N']}) | estimated, calibrated on the measured "
                  f"stack: {e['w_eff']:.2f} one-block peaks + the other block inputs reproduce its "
                  f"peak; range: 4 peaks + 44 inputs to 1 + 47{ext}{oom}{chk} |")
        else:
            print(f"| {NAME[v]} | per block (torch.utils.checkpoint) | ≈{e['N']}–{e['optimistic_N']} "
                  f"| estimated: 4 one-block peaks + 44 block inputs (low end) or 1 + 47 (high end)"
                  f"{ext}{oom}{chk} |")
    if any(v in max_n for v in PEERS):
        e = next(max_n[v] for v in PEERS if v in max_n)
        print(f"\nPeer estimate model: {e['model']}; fitted on the measured one-block peaks; "
              "the high end uses 1 one-block peak + 47 block inputs. Where a checkpointed stack "
              "was measured, compare its peak with the model's: the 4-peak model overestimates "
              "PyTorch's peak, so the high end is the likelier one.")

# ---------------------------------------------------------------- goals
print("\n**Goals (issue 5)**\n")
o, f = find("megafold", "block", 768), find("eager_flex", "block", 768)
if ok(o) and ok(f):
    sp, mem = f["ms"] / o["ms"], o["peak_gib"] / f["peak_gib"]
    print(f"- block at N = 768: {sp:.2f}× faster than eager+Flex (goal ≥ 4×: "
          f"{'met' if sp >= 4 else 'NOT met'}), memory {mem:.2f}× of it (goal ≤ 0.5: "
          f"{'met' if mem <= 0.5 else 'NOT met'})")
else:
    print("- block at N = 768 vs eager+Flex: not measured")
mf = [(r["N"], r["mfu"]) for r in rows if r["variant"] == "megafold" and r.get("scope") == "block"
      and r.get("pass") == "fwdbwd" and r["N"] >= 768 and r.get("mfu")]
if mf:
    low = [f"{N}" for N, x in mf if x < 0.40]
    print("- MFU at N ≥ 768: " + ", ".join(f"{100 * x:.0f}% (N = {N})" for N, x in mf) +
          f" (goal ≥ 40%: {'met' if not low else 'NOT met at N = ' + ', '.join(low)})")
m = max_n.get("megafold")
if m:
    best = max(m["recompute"]["N"], m["every_k"]["N"], (m.get("best_k") or {}).get("N", 0))
    run = m.get("run")
    ran = (f"; the 48-block stack allocated at N = {run['N']} "
           + (f"fit ({run['peak_gib']:.1f} GiB), fwd+bwd of its first {run.get('blocks_run', 48)} "
              f"blocks ran in {run['ms'] / 1000:.1f} s" if run.get('fit') else "did NOT fit")
           if run else "; not run (MAX_N_RUN=0)")
    print(f"- largest trainable N, 48 blocks: {best} by the planner (goal ≥ 3584: "
          f"{'met' if best >= 3584 else 'NOT met'}){ran}")

subs = [r for r in rows if r.get("scope") == "sublayer" and r.get("ms") is not None]
if subs:
    names = list(dict.fromkeys(r["sublayer"] for r in subs))
    Ns = sorted({r["N"] for r in subs})
    print("\n**Where one block's time goes** (megafold, ms fwd / bwd per sub-layer, profiled "
          "with a synchronisation after each call)\n")
    print("| sub-layer | " + " | ".join(f"N = {N}" for N in Ns) + " |")
    print("|---|" + "---|" * len(Ns))
    for nm in names:
        cells = []
        for N in Ns:
            f = next((r["ms"] for r in subs if r["sublayer"] == nm and r["N"] == N and r["pass"] == "fwd"), None)
            b = next((r["ms"] for r in subs if r["sublayer"] == nm and r["N"] == N and r["pass"] == "bwd"), None)
            cells.append(f"{f:.2f} / {b:.2f}" if f is not None and b is not None else "—")
        print(f"| {nm} | " + " | ".join(cells) + " |")
