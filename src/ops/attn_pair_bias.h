/* attn_pair_bias.h — the trunk's single attention with pair bias (AF3 SI Alg 24 in trunk
 * mode; docs/af3-spec.md §4.5, §6.4.3), as one forward/backward pair over the single
 * track s (N, Cs) and the pair track z (N, N, Cz):
 *
 *   â = LN_full(s)                                        (N, Cs)
 *   q = â·W_qᵀ + b_q,  k = â·W_kᵀ,  v = â·W_vᵀ,  g = â·W_gᵀ (N, H·D) → heads (H, N, D)
 *   b[h,i,j] = (LN_full_z(z_ij)·W_zᵀ)[h]                   (H, N, N)
 *   o = attention(q, k, v; bias b, key mask m, scale 1/sqrt(D), gate σ(g))  (src/ops/attention.h)
 *   Δs = concat_h(o)·W_oᵀ                                  (N, Cs), no bias
 *
 * Masked tokens (m_j = 0) are excluded as keys, exactly (not -1e9); padded query rows
 * are computed like any other and left to later masks. If every token is masked the
 * update is 0. The function returns the update: the caller adds the residual s += Δs.
 * Not the conditioned (AdaLN, diffusion/atom) variant, and not a GPU path.
 * CPU reference in src/ops/cpu/attn_pair_bias.c, built from mf_layernorm_*,
 * mf_linear_* and mf_attention_*. Usually H·D = Cs (16 × 24 = 384); any H·D works.
 *
 * Gradient contract: ds and dz ASSIGN; every parameter gradient ACCUMULATES (+=).
 * ds, dz, the gradient struct and any of its members may be NULL to skip that gradient.
 */
#ifndef MF_OPS_ATTN_PAIR_BIAS_H
#define MF_OPS_ATTN_PAIR_BIAS_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parameters of one module, PyTorch (out, in) layout. The same struct holds their
 * gradients in the backward. */
typedef struct {
  mf_real *ln_s_g, *ln_s_b; /* (Cs) LayerNorm of s: γ, β */
  mf_real *w_q;             /* (H·D, Cs) */
  mf_real *b_q;             /* (H·D) the only bias */
  mf_real *w_k, *w_v, *w_g; /* (H·D, Cs) each */
  mf_real *ln_z_g, *ln_z_b; /* (Cz) LayerNorm of z: γ, β */
  mf_real *w_z;             /* (H, Cz) pair bias projection */
  mf_real *w_o;             /* (Cs, H·D) output projection */
} mf_apb_weights;

/* Size in mf_reals of the workspace the forward fills and the backward reads:
 * 2N + N·Cs + 4·H·N·D + H·N² + H·N + N·H·D (LN(s) statistics and output, q, k, v, gate
 * in head layout, the pair bias, lse, the gated attention output). LN_z(z) is not kept
 * (N²·Cz); the backward recomputes it. */
int64_t mf_apb_saved_size(int N, int Cs, int Cz, int H, int D);

/* out (N, Cs) = Δs; saved (mf_apb_saved_size(...)) filled for the backward;
 * s (N, Cs); z (N, N, Cz); mask (N) uint8, nonzero = valid, or NULL (all valid). */
void mf_apb_forward(mf_real *out, mf_real *saved, const mf_real *s, const mf_real *z,
                    const uint8_t *mask, const mf_apb_weights *w, int N, int Cs, int Cz, int H,
                    int D);

/* ds (N, Cs) and dz (N, N, Cz) ASSIGN; dw: parameter gradients, ACCUMULATE;
 * dout (N, Cs) = dL/dΔs; saved from mf_apb_forward with the same s, z, mask, w. */
void mf_apb_backward(mf_real *ds, mf_real *dz, const mf_apb_weights *dw, const mf_real *dout,
                     const mf_real *saved, const mf_real *s, const mf_real *z,
                     const uint8_t *mask, const mf_apb_weights *w, int N, int Cs, int Cz, int H,
                     int D);

#ifdef __cplusplus
}
#endif

#endif
