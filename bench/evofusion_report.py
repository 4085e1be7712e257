"""evofusion_report.py — merges the rows of bench/evofusion.cu (ours) and
bench/evofusion_peers.py (PyTorch eager, torch.compile) into one results file in
DESIGN.md's format and prints the markdown table for BENCHMARKS.md: per op, N and pass the
time of each variant, our speed-up over torch.compile, and the achieved bandwidth (the
op's unavoidable bytes over time) as a fraction of the copy bandwidth measured in the
same job. Not a benchmark itself.

  python3 bench/evofusion_report.py ours.json peers.json out.json "<command>" "<gpu>"
"""
import datetime, json, os, sys

ours_p, peers_p, out_p, command, gpu = sys.argv[1:6]
ours = json.load(open(ours_p))
peers = json.load(open(peers_p)) if os.path.exists(peers_p) else {"rows": []}
copy = ours.get("copy_gbps") or 0
bytes_of = {(r["op"], r["N"], r["pass"]): r.get("bytes") for r in ours["rows"]}
rows = []
for r in ours["rows"]:
    rows.append(dict(r))
for r in peers["rows"]:
    r = dict(r)
    b = bytes_of.get((r["op"], r["N"], r["pass"]))
    if b and r["op"] != "d2d_copy":
        r["bytes"] = b
        r["gbps"] = round(b / r["ms"] / 1e6, 1)
    rows.append(r)
res = {"bench": "evofusion", "gpu": gpu, "date": datetime.date.today().isoformat(),
       "command": command, "copy_gbps": copy, "torch": peers.get("torch"), "rows": rows}
json.dump(res, open(out_p, "w"), indent=1)

ms = {(r["variant"], r["op"], r["N"], r["pass"]): r["ms"] for r in rows}
keys = sorted({(r["op"], r["N"], r["pass"]) for r in ours["rows"] if r["op"] != "d2d_copy"},
              key=lambda k: (k[1], k[0], k[2]))
tcopy = [r for r in peers["rows"] if r["op"] == "d2d_copy"]
print(f"EvoFusion, {gpu}, {res['date']}, `{command}`; M = N² rows, c = 128, bf16.")
print(f"Copy bandwidth in the same job: {copy:.0f} GB/s (cudaMemcpy D2D, read + write)"
      + (f", {tcopy[0]['gbps']:.0f} GB/s through torch" if tcopy else "") + ".")
print("GB/s = the op's unavoidable activation bytes / time; % = of the copy bandwidth.\n")
print("| op | N | pass | megafold ms | eager ms | compile ms | × vs compile | × vs eager | megafold GB/s | % copy |")
print("|---|---|---|---|---|---|---|---|---|---|")
f = lambda v: f"{v:.3f}" if v is not None else "—"
for op, N, p in keys:
    o, e, c = ms.get(("megafold", op, N, p)), ms.get(("eager", op, N, p)), ms.get(("compile", op, N, p))
    b = bytes_of.get((op, N, p)) or 0
    gb = b / o / 1e6 if o else 0
    ratio = lambda a: f"{a / o:.2f}" if (a and o) else "—"
    print(f"| {op} | {N} | {p} | {f(o)} | {f(e)} | {f(c)} | {ratio(c)} | {ratio(e)} | "
          f"{gb:.0f} | {100 * gb / copy if copy else 0:.0f}% |")
