"""bundle.py — the parity bundle's layout (src/model/parity.h) on the Python side, with the
standard library alone (no torch, no numpy): the parameter table's names and shapes (as
src/model/params.c builds them), the safetensors header reader, and the structure check
that tools/reference/parity.py --check-only and tests/cli/test_parity.sh run.
Not the reference math (pairformer.py) and not a tensor loader.
"""

import json
import math
import os
import struct

# ----------------------------------------------------------------------------- the table

def param_specs(cfg):
    """[(name, per-block shape)] in bind order, as src/model/params.c builds the table.
    cfg: the "pairformer" object of the bundle/checkpoint config."""
    cz, cs, ch = cfg["c_z"], cfg["c_s"], cfg["c_mul"]
    hdt, ht = cfg["h_tri"] * cfg["d_tri"], cfg["h_tri"]
    hds, hs = cfg["h_s"] * cfg["d_s"], cfg["h_s"]
    n = cfg["n_trans"]
    out = []

    def add(sub, fields):
        out.extend(("pairformer.%s.%s" % (sub, f), shape) for f, shape in fields)

    for sub in ("tri_out", "tri_in"):
        add(sub, [("ln_in_g", (cz,)), ("ln_in_b", (cz,)), ("w_ap", (ch, cz)), ("w_ag", (ch, cz)),
                  ("w_bp", (ch, cz)), ("w_bg", (ch, cz)), ("w_g", (cz, cz)),
                  ("ln_out_g", (ch,)), ("ln_out_b", (ch,)), ("w_z", (cz, ch))])
    for sub in ("att_start", "att_end"):
        add(sub, [("ln_g", (cz,)), ("ln_b", (cz,)), ("w_q", (hdt, cz)), ("w_k", (hdt, cz)),
                  ("w_v", (hdt, cz)), ("w_b", (ht, cz)), ("w_g", (hdt, cz)), ("w_o", (cz, hdt))])
    add("pair_trans", [("ln_g", (cz,)), ("ln_b", (cz,)), ("w_a", (n * cz, cz)),
                       ("w_b", (n * cz, cz)), ("w_o", (cz, n * cz))])
    add("single_att", [("ln_s_g", (cs,)), ("ln_s_b", (cs,)), ("w_q", (hds, cs)), ("b_q", (hds,)),
                       ("w_k", (hds, cs)), ("w_v", (hds, cs)), ("w_g", (hds, cs)),
                       ("ln_z_g", (cz,)), ("ln_z_b", (cz,)), ("w_z", (hs, cz)),
                       ("w_o", (cs, hds))])
    add("single_trans", [("ln_g", (cs,)), ("ln_b", (cs,)), ("w_a", (n * cs, cs)),
                         ("w_b", (n * cs, cs)), ("w_o", (cs, n * cs))])
    return out


# ----------------------------------------------------------------------------- safetensors

def read_safetensors_header(path):
    """(header dict without __metadata__, metadata dict, data start offset). Stdlib only."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError("%s: too short for a safetensors header length" % path)
        (n,) = struct.unpack("<Q", raw)
        hdr = f.read(n)
        if len(hdr) != n:
            raise ValueError("%s: truncated header (%d of %d bytes)" % (path, len(hdr), n))
    h = json.loads(hdr.decode("utf-8"))
    meta = h.pop("__metadata__", {}) or {}
    return h, meta, 8 + n


def config_of(meta):
    """The "pairformer" config object of a bundle's or checkpoint's metadata."""
    return json.loads(meta["config"])["pairformer"]


# ----------------------------------------------------------------------------- structure

def expected_tensors(cfg, N, training, has_mask, forward_only):
    """[(name, dtype, shape, required)] of a bundle."""
    L, cs, cz = cfg["L"], cfg["c_s"], cfg["c_z"]
    out = []
    for name, shape in param_specs(cfg):
        out.append((name, "F32", (L,) + tuple(shape), True))
    out += [("in.s", "F32", (N, cs), True), ("in.z", "F32", (N, N, cz), True)]
    if has_mask:
        out.append(("in.mask", "U8", (N,), True))
    if training:
        out += [("drop.%d.%d" % (l, k), "F32", (N, cz), True) for l in range(L) for k in range(4)]
    out += [("out.s", "F32", (N, cs), True), ("out.z", "F32", (N, N, cz), True)]
    if not forward_only:
        out += [("dout.s", "F32", (N, cs), True), ("dout.z", "F32", (N, N, cz), True),
                ("grad.in.s", "F32", (N, cs), True), ("grad.in.z", "F32", (N, N, cz), True)]
        out += [("grad." + name, "F32", (L,) + tuple(shape), True)
                for name, shape in param_specs(cfg)]
    return out


def check_structure(path, forward_only=False):
    """(errors list, info dict). Standard library only."""
    errs = []
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            return ["file shorter than 8 bytes"], {}
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8:
            return ["header length %d exceeds the file (%d bytes)" % (n, size)], {}
        hdr = f.read(n)
    try:
        h = json.loads(hdr.decode("utf-8"))
    except ValueError as e:
        return ["header is not JSON: %s" % e], {}
    if (8 + n) % 8:
        errs.append("data does not start at a multiple of 8 (header length %d)" % n)
    meta = h.pop("__metadata__", None)
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        return errs + ["__metadata__ missing or not all strings"], {}
    if meta.get("format") != "megafold-parity":
        errs.append("metadata format is %r, expected 'megafold-parity'" % meta.get("format"))
    try:
        cfg = json.loads(meta["config"])["pairformer"]
        N = int(meta["N"])
        training = meta["training"]
        producer = meta["producer"]
    except (KeyError, ValueError, TypeError) as e:
        return errs + ["metadata config/N/training/producer missing or malformed: %r" % (e,)], {}
    if training not in ("0", "1"):
        errs.append("metadata training is %r, expected '0' or '1'" % training)
    training = training == "1"
    info = {"cfg": cfg, "N": N, "training": training, "producer": producer, "meta": meta}
    # offsets: contiguous, covering the data exactly
    sizes = {"F32": 4, "U8": 1, "F64": 8, "BF16": 2, "F16": 2, "I32": 4, "I64": 8, "BOOL": 1}
    spans = []
    for name, e in h.items():
        try:
            b, end = e["data_offsets"]
            numel = math.prod(e["shape"]) if e["shape"] else 1
            if end - b != numel * sizes[e["dtype"]]:
                errs.append("%s: data_offsets span %d bytes, %s %s needs %d"
                            % (name, end - b, e["dtype"], e["shape"], numel * sizes[e["dtype"]]))
            spans.append((b, end, name))
        except (KeyError, TypeError, ValueError):
            errs.append("%s: malformed entry %r" % (name, e))
    pos = 0
    for b, end, name in sorted(spans):
        if b != pos:
            errs.append("%s: begins at %d, expected %d (hole or overlap)" % (name, b, pos))
        pos = end
    if pos != size - 8 - n:
        errs.append("tensors cover %d data bytes, the file has %d" % (pos, size - 8 - n))
    # expected tensors
    want = expected_tensors(cfg, N, training, "in.mask" in h, forward_only)
    names = set()
    for name, dt, shape, _ in want:
        names.add(name)
        e = h.get(name)
        if e is None:
            errs.append("tensor %s is missing" % name)
        elif e.get("dtype") != dt or tuple(e.get("shape", ())) != shape:
            errs.append("tensor %s is %s %s, expected %s %s"
                        % (name, e.get("dtype"), e.get("shape"), dt, list(shape)))
    info["extra"] = sorted(set(h) - names)
    return errs, info
