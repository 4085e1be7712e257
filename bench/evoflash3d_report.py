"""evoflash3d_report.py — merges the rows of bench/evoflash3d.cu (ours) and
bench/evoflash3d_peers.py (PyTorch peers) from one GPU job into
bench/results/evoflash3d.json (DESIGN.md format) and prints the markdown tables for
BENCHMARKS.md, with the ratio of each peer's time to ours.

  python3 bench/evoflash3d_report.py OURS.json PEERS.json OUT.json "COMMAND" "GPU" > table.md
"""
import datetime, json, sys

ours_f, peers_f, out_f, command, gpu = sys.argv[1:6]
ours = json.load(open(ours_f))
try:
    peers = json.load(open(peers_f))
except Exception:  # noqa
    peers = []
ex2 = next((r for r in ours if r.get("variant") == "ex2_unit"), None)
rows = [r for r in ours if r.get("variant") == "megafold"] + peers
json.dump({"bench": "evoflash3d", "gpu": gpu, "date": datetime.date.today().isoformat(),
           "command": command, "ex2_per_s": ex2 and ex2["ex2_per_s"], "rows": rows},
          open(out_f, "w"), indent=1)


def get(variant, shape, N, ps):
    for r in rows:
        if r["variant"] == variant and r["shape"] == shape and r["N"] == N and r["pass"] == ps:
            return r
    return None


def cell(r):
    if r is None:
        return "—"
    if r.get("ms") is None:
        return "out of memory" if r.get("oom") else ("skipped" if r.get("skipped") else "error")
    return f"{r['ms']:.3g} ms, {r['extra_gib']:.2f} GiB"


peer_names = [p for p in ("eager", "eager_compiled", "sdpa", "flex", "trifast") if any(r["variant"] == p for r in rows)]
for shape, title in (("tri", "Triangle attention (H=4, D=32, R=N)"), ("single", "Single attention with pair bias (H=16, D=24, R=1)")):
    Ns = sorted({r["N"] for r in rows if r["shape"] == shape})
    if not Ns:
        continue
    print(f"\n### {title}\n")
    print("Ours (megafold EvoFlash-3D): time, effective TFLOP/s (4·R·H·N²·D fwd, 2.5× that bwd), memory beyond the inputs.\n")
    print("| N | fwd | bwd | fwd+bwd | TFLOP/s fwd / bwd | extra GiB | exp-unit bound fwd |")
    print("|---|---|---|---|---|---|---|")
    for N in Ns:
        f, b, fb = (get("megafold", shape, N, p) for p in ("fwd", "bwd", "fwdbwd"))
        if not f:
            continue
        R = f["R"]; H = f["H"]
        bound = (R * H * N * N) / ex2["ex2_per_s"] * 1e3 if ex2 else None
        bs = f"{bound:.3g} ms ({bound / f['ms'] * 100:.0f}%)" if bound else "—"
        print(f"| {N} | {f['ms']:.3g} ms | {b['ms']:.3g} ms | {fb['ms']:.3g} ms | {f['tflops']:.0f} / {b['tflops']:.0f} | {f['extra_gib']:.2f} | {bs} |")
    print(f"\nForward+backward, each peer against ours in the same run (ratio = peer time / our time):\n")
    print("| N | ours | " + " | ".join(peer_names) + " |")
    print("|---|---|" + "---|" * len(peer_names))
    for N in Ns:
        o = get("megafold", shape, N, "fwdbwd")
        cells = []
        for p in peer_names:
            r = get(p, shape, N, "fwdbwd")
            c = cell(r)
            if o and r and r.get("ms"):
                c += f" (**{r['ms'] / o['ms']:.2f}×**)"
            cells.append(c)
        print(f"| {N} | {cell(o)} | " + " | ".join(cells) + " |")
    print(f"\nForward alone and backward alone, ratio peer / ours:\n")
    print("| N | pass | ours | " + " | ".join(peer_names) + " |")
    print("|---|---|---|" + "---|" * len(peer_names))
    for N in Ns:
        for ps in ("fwd", "bwd"):
            o = get("megafold", shape, N, ps)
            cells = []
            for p in peer_names:
                r = get(p, shape, N, ps)
                cells.append(f"{r['ms']:.3g} ms ({r['ms'] / o['ms']:.2f}×)" if (o and r and r.get("ms")) else cell(r).split(",")[0])
            print(f"| {N} | {ps} | {o['ms']:.3g} ms | " + " | ".join(cells) + " |" if o else "")
if ex2:
    print(f"\nExponential unit measured in the same run: {ex2['ex2_per_s']:.3g} ex2/s.")
