#!/usr/bin/env python3
"""parity.py — checks a parity bundle (src/model/parity.h) against the PyTorch reference.

    python3 tools/reference/parity.py BUNDLE [--device cpu|cuda] [--dtype float64|float32]
                                             [--tol X] [--check-only] [--forward-only]

Loads the bundle's parameters, inputs, output gradients and (when training) dropout masks,
runs the reference stack (tools/reference/pairformer.py) forward and backward with autograd,
and compares the producer's results — out.s, out.z, grad.in.s, grad.in.z and every
grad.<parameter> — with relative error ‖a − b‖/‖b‖ (a the producer, b the reference; where
‖b‖ <= 1e-6 of the largest ‖b‖ of the bundle — a gradient that is 0 in exact arithmetic, or
all-masked — the error is ‖a − b‖ over that largest norm instead). One line per tensor,
then "parity: N passed, M failed"; exit 1 on any failure.

Default tolerance by producer: cpu-* 1e-5 (the bundle stores F32, the results agree to F32
rounding); gpu-f32 1e-4; gpu-bf16 and anything else 3e-2. --tol overrides.

--check-only checks the file's structure only (header, metadata, every expected tensor with
its dtype and shape, data offsets), with the standard library alone: no torch needed.
--forward-only compares out.* only (dout.*, grad.* need not be present).
"""

import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bundle import check_structure  # noqa: E402


def default_tol(producer):
    if producer.startswith("cpu-"):
        return 1e-5
    if producer in ("gpu-f32", "gpu-fp32"):
        return 1e-4
    return 3e-2


# ----------------------------------------------------------------------------- comparison

def run(args):
    import torch
    import pairformer as ref

    errs, info = check_structure(args.bundle, args.forward_only)
    if errs:
        for e in errs:
            print("FAIL structure: %s" % e)
        print("parity: 0 passed, %d failed" % len(errs))
        return 1
    cfg, N, training, producer = info["cfg"], info["N"], info["training"], info["producer"]
    dtype = getattr(torch, args.dtype)
    dev = torch.device(args.device)
    tol = args.tol if args.tol is not None else default_tol(producer)
    tensors, _ = ref.load_safetensors(args.bundle)

    def get(name):
        return tensors[name].to(device=dev, dtype=dtype)

    params = ref.load_params(tensors, cfg, dtype, dev)
    for t in params.values():
        t.requires_grad_(True)
    s = get("in.s").requires_grad_(True)
    z = get("in.z").requires_grad_(True)
    mask = tensors["in.mask"].to(dev) != 0 if "in.mask" in tensors else None
    drops = None
    if training:
        keep = 1.0 / (1.0 - cfg["p_drop"])
        # the masks are 0 or 1/(1-p): use the exact scale, whatever rounding the file holds
        drops = [[(get("drop.%d.%d" % (l, k)) != 0).to(dtype) * keep for k in range(4)]
                 for l in range(cfg["L"])]

    s_out, z_out = ref.pairformer_stack(s, z, mask, params, cfg, drops)
    results = [("out.s", s_out), ("out.z", z_out)]
    if not args.forward_only:
        torch.autograd.backward([s_out, z_out], [get("dout.s"), get("dout.z")])
        results += [("grad.in.s", s.grad), ("grad.in.z", z.grad)]
        results += [("grad." + name, params[name].grad) for name, _ in ref.param_specs(cfg)]

    print("parity: %s (producer %s, N=%d, L=%d, training=%d, mask=%d) vs reference %s on %s, "
          "tol %.1e" % (os.path.basename(args.bundle), producer, N, cfg["L"], training,
                        mask is not None, args.dtype, args.device, tol))
    for name in info["extra"]:
        print("note: tensor %s is not compared" % name)
    # a reference tensor ~1e-6 of the largest (a gradient that is zero in exact arithmetic,
    # e.g. the single attention's ln_z_b: a per-head constant bias the softmax ignores) is
    # compared against the largest norm instead: its value is rounding noise on both sides
    rows = []
    for name, b in results:
        a = get(name)
        b = torch.zeros_like(a) if b is None else b.detach()
        rows.append((name, a, b, b.norm().item()))
    big = max(nb for _, _, _, nb in rows)
    passed = failed = 0
    worst = 0.0
    for name, a, b, nb in rows:
        d = (a - b).norm().item()
        tiny = nb <= 1e-6 * big
        err = d / (big if tiny else nb) if big > 0 else d
        ok = math.isfinite(err) and err <= tol
        worst = max(worst, err) if math.isfinite(err) else math.inf
        passed += ok
        failed += not ok
        print("%s %-34s rel %.3e%s  |ref| %.3e  max|diff| %.3e"
              % ("ok  " if ok else "FAIL", name, err, " (ref ~0: vs the largest |ref|)" if tiny else "",
                 nb, (a - b).abs().max().item() if a.numel() else 0.0))
    print("worst relative error %.3e (tol %.1e)" % (worst, tol))
    print("parity: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--tol", type=float, default=None)
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--forward-only", action="store_true")
    args = ap.parse_args()
    if args.check_only:
        errs, info = check_structure(args.bundle, args.forward_only)
        for e in errs:
            print("FAIL structure: %s" % e)
        if not errs:
            print("structure: %s ok (producer %s, N=%d, L=%d, training=%d, %d extra tensors)"
                  % (os.path.basename(args.bundle), info["producer"], info["N"],
                     info["cfg"]["L"], info["training"], len(info["extra"])))
        print("parity-structure: %d passed, %d failed" % (0 if errs else 1, len(errs)))
        return 1 if errs else 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
