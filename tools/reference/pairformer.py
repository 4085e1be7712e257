"""pairformer.py — PyTorch reference of megafold's Pairformer block and L-block stack
(AF3 SI Alg 17, docs/af3-spec.md §6.4), written from the math in src/ops/*.h, for parity
checks of the CPU and GPU stacks on the same weights (tools/reference/parity.py).

It is plain autograd PyTorch (torch 1.13 and 2.x, CPU or CUDA, any float dtype; float64 is
the default of parity.py): no fused kernels, no memory savings, not a training model.

Conventions (those of the C code):
  * z (N, N, Cz), s (N, Cs), row-major; linear weights in PyTorch (out, in) layout, no
    biases except the single attention's b_q; H·D axes head-major (row h·D + d).
  * LayerNorm over the last axis, eps 1e-5, population variance.
  * Masks exclude keys EXACTLY (zero weight, zero gradient), and a query row with no valid
    key gives 0 (not NaN, not the uniform average -1e9 masking would give).
  * The pair mask is pm_ij = m_i·m_j; the triangle multiplication multiplies A and B by it.
  * Dropout masks (N, Cz) of mf_dropout_mask (0 or 1/(1−p)): row-wise for sub-layers 0..2,
    out[i, j, c] = x[i, j, c]·mask[j, c] (shared over the first axis i); column-wise for
    sub-layer 3, out[i, j, c] = x[i, j, c]·mask[i, c] (shared over j).

Parameters: the table of src/model/params.c, names "pairformer.<sub>.<field>", every tensor
stacked (L, ...). load_params reads them from a parity bundle or a checkpoint (safetensors;
the `safetensors` package when importable, else a small built-in reader).
"""

import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bundle import config_of, param_specs, read_safetensors_header  # noqa: E402,F401

LN_EPS = 1e-5

# ----------------------------------------------------------------------------- loading

_DTYPES = {"F32": (torch.float32, 4), "F64": (torch.float64, 8), "U8": (torch.uint8, 1),
           "BOOL": (torch.bool, 1), "I32": (torch.int32, 4), "I64": (torch.int64, 8),
           "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2)}


def load_safetensors(path):
    """({name: CPU tensor in the file's dtype}, metadata)."""
    try:
        from safetensors.torch import load_file
        from safetensors import safe_open
        with safe_open(path, framework="pt") as f:
            meta = f.metadata() or {}
        return load_file(path), meta
    except ImportError:
        pass
    h, meta, start = read_safetensors_header(path)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read()
    out = {}
    for name, e in h.items():
        dt, size = _DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        shape = tuple(e["shape"])
        numel = math.prod(shape) if shape else 1
        if end - b != numel * size or end > len(data):
            raise ValueError("%s: tensor %s: bad data_offsets %s" % (path, name, e["data_offsets"]))
        buf = bytearray(data[b:end])
        t = torch.frombuffer(buf, dtype=dt) if numel else torch.empty(0, dtype=dt)
        out[name] = t.reshape(shape).clone()
    return out, meta


def load_params(path_or_tensors, cfg=None, dtype=torch.float64, device="cpu"):
    """The stacked parameters {table name: (L, ...) tensor} of a parity bundle or a checkpoint
    (a path), or of an already loaded {name: tensor} dict (then cfg is required), converted
    to dtype on device and checked against the table (names and shapes)."""
    if isinstance(path_or_tensors, str):
        tensors, meta = load_safetensors(path_or_tensors)
        cfg = config_of(meta)
    else:
        tensors = path_or_tensors
    L = cfg["L"]
    out = {}
    for name, shape in param_specs(cfg):
        if name not in tensors:
            raise KeyError("parameter %s is missing" % name)
        t = tensors[name]
        if tuple(t.shape) != (L,) + tuple(shape):
            raise ValueError("parameter %s has shape %s, expected %s"
                             % (name, tuple(t.shape), (L,) + tuple(shape)))
        out[name] = t.to(device=device, dtype=dtype)
    return out


def block_params(stacked, l):
    """Block l's parameters as {sub: {field: tensor}} (views, so autograd reaches the
    stacked tensors)."""
    out = {}
    for name, t in stacked.items():
        _, sub, field = name.split(".")
        out.setdefault(sub, {})[field] = t[l]
    return out


# ----------------------------------------------------------------------------- ops

def layer_norm(x, g, b):
    return F.layer_norm(x, (x.shape[-1],), g, b, LN_EPS)


def masked_softmax(logits, valid):
    """softmax over the last axis of the keys where valid (broadcastable bool); invalid keys
    get exactly 0 and no gradient; a row with no valid key gives all zeros."""
    neg = torch.full_like(logits, -math.inf)
    lg = torch.where(valid, logits, neg)
    mx = lg.amax(dim=-1, keepdim=True).detach()
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    e = torch.exp(lg - mx)
    den = e.sum(dim=-1, keepdim=True)
    return e / torch.where(den > 0, den, torch.ones_like(den))


def trimul(z, pm, p, outgoing):
    """Triangle multiplicative update (Alg 12 outgoing / 13 incoming): the update Δz.
    z (N, N, C), pm (N, N) bool or None, p: {field: tensor}."""
    x = layer_norm(z, p["ln_in_g"], p["ln_in_b"])
    a = torch.sigmoid(x @ p["w_ag"].t()) * (x @ p["w_ap"].t())
    b = torch.sigmoid(x @ p["w_bg"].t()) * (x @ p["w_bp"].t())
    if pm is not None:
        m = pm.unsqueeze(-1).to(z.dtype)
        a = a * m
        b = b * m
    if outgoing:
        t = torch.einsum("ikc,jkc->ijc", a, b)
    else:
        t = torch.einsum("kic,kjc->ijc", a, b)
    return torch.sigmoid(x @ p["w_g"].t()) * (layer_norm(t, p["ln_out_g"], p["ln_out_b"]) @ p["w_z"].t())


def triatt_starting(z, pm, p, H, D):
    """Triangle attention around the starting node (Alg 14): the update Δz.
    logit[i, h, j, k] = q_ij·k_ik/sqrt(D) + b_jk^h over keys k with pm[i, k]."""
    N = z.shape[0]
    x = layer_norm(z, p["ln_g"], p["ln_b"])
    q = (x @ p["w_q"].t()).reshape(N, N, H, D)
    k = (x @ p["w_k"].t()).reshape(N, N, H, D)
    v = (x @ p["w_v"].t()).reshape(N, N, H, D)
    g = (x @ p["w_g"].t()).reshape(N, N, H, D)
    bias = (x @ p["w_b"].t()).permute(2, 0, 1)                    # (H, j, k)
    logits = torch.einsum("ijhd,ikhd->ihjk", q, k) / math.sqrt(D) + bias.unsqueeze(0)
    if pm is None:
        valid = torch.ones(N, 1, 1, N, dtype=torch.bool, device=z.device)
    else:
        valid = pm.reshape(N, 1, 1, N)                            # key k of row i
    a = masked_softmax(logits, valid)
    o = torch.einsum("ihjk,ikhd->ijhd", a, v)
    return (torch.sigmoid(g) * o).reshape(N, N, H * D) @ p["w_o"].t()


def triatt(z, pm, p, H, D, starting):
    """Triangle attention (Alg 14 starting / Alg 15 ending node). The ending node is the
    starting node on the transposed z and pm, transposed back."""
    if starting:
        return triatt_starting(z, pm, p, H, D)
    pmt = None if pm is None else pm.t()
    return triatt_starting(z.transpose(0, 1), pmt, p, H, D).transpose(0, 1)


def transition(x, p):
    """SwiGLU transition (Alg 11): (silu(LN(x)·W_aᵀ) ⊙ LN(x)·W_bᵀ)·W_oᵀ."""
    xh = layer_norm(x, p["ln_g"], p["ln_b"])
    return (F.silu(xh @ p["w_a"].t()) * (xh @ p["w_b"].t())) @ p["w_o"].t()


def attention_pair_bias(s, z, mask, p, H, D):
    """Single attention with pair bias, trunk variant (Alg 24): the update Δs.
    s (N, Cs), z (N, N, Cz), mask (N) bool or None (key mask)."""
    N = s.shape[0]
    a = layer_norm(s, p["ln_s_g"], p["ln_s_b"])
    q = (a @ p["w_q"].t() + p["b_q"]).reshape(N, H, D)
    k = (a @ p["w_k"].t()).reshape(N, H, D)
    v = (a @ p["w_v"].t()).reshape(N, H, D)
    g = (a @ p["w_g"].t()).reshape(N, H, D)
    bias = (layer_norm(z, p["ln_z_g"], p["ln_z_b"]) @ p["w_z"].t()).permute(2, 0, 1)  # (H, i, j)
    logits = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(D) + bias
    if mask is None:
        valid = torch.ones(1, 1, N, dtype=torch.bool, device=s.device)
    else:
        valid = mask.reshape(1, 1, N)
    w = masked_softmax(logits, valid)
    o = torch.einsum("hij,jhd->ihd", w, v)
    return (torch.sigmoid(g) * o).reshape(N, H * D) @ p["w_o"].t()


def pair_mask(mask):
    return None if mask is None else (mask.unsqueeze(0) & mask.unsqueeze(1))


def pairformer_block(s, z, mask, p, cfg, drop=None):
    """One block in the order of src/model/pairformer.h. mask (N) bool or None; p: the
    block's {sub: {field: tensor}}; drop: None (no dropout) or 4 masks (N, Cz).
    Returns (s_out, z_out)."""
    pm = pair_mask(mask)
    ht, dt, hs, ds = cfg["h_tri"], cfg["d_tri"], cfg["h_s"], cfg["d_s"]

    def dropped(u, k):
        if drop is None:
            return u
        return u * (drop[k].unsqueeze(1) if k == 3 else drop[k].unsqueeze(0))

    z = z + dropped(trimul(z, pm, p["tri_out"], True), 0)
    z = z + dropped(trimul(z, pm, p["tri_in"], False), 1)
    z = z + dropped(triatt(z, pm, p["att_start"], ht, dt, True), 2)
    z = z + dropped(triatt(z, pm, p["att_end"], ht, dt, False), 3)
    z = z + transition(z, p["pair_trans"])
    s = s + attention_pair_bias(s, z, mask, p["single_att"], hs, ds)
    s = s + transition(s, p["single_trans"])
    return s, z


def pairformer_stack(s, z, mask, stacked, cfg, drops=None):
    """The L-block stack. stacked: {table name: (L, ...)}; drops: None or drops[l][k]."""
    for l in range(cfg["L"]):
        s, z = pairformer_block(s, z, mask, block_params(stacked, l), cfg,
                                None if drops is None else drops[l])
    return s, z
