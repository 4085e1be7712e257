/* parity.h — "parity bundles": one safetensors file of named tensors (F32 or U8, any shape)
 * plus string metadata, written atomically, that carries a Pairformer stack problem and one
 * producer's answer to it (the CPU double stack, the GPU bf16 stack) so that the PyTorch
 * reference (tools/reference/parity.py) can recompute it from the same weights and compare.
 * It is a writer only (the reader is Python), not a checkpoint (train/checkpoint.h) and not
 * a general safetensors library. It needs no JSON library: the GPU tests link it through the
 * CPU oracle (core + ops + model) without jansson.
 *
 * Bundle layout (the convention tools/reference/parity.py reads; every producer writes it):
 *   metadata  "format" = "megafold-parity", "config" = {"pairformer": {"L", "c_s", "c_z",
 *             "c_mul", "h_tri", "d_tri", "h_s", "d_s", "n_trans", "p_drop"}} as a JSON
 *             string (the checkpoint's), "N", "training" ("0"/"1"), "producer" ("cpu-f64",
 *             "gpu-bf16", ...): mf_parity_meta_std writes all five
 *   inputs    every parameter (F32, the table's names and stacked (L, ...) shapes),
 *             "in.s" (N, Cs), "in.z" (N, N, Cz), optional "in.mask" (N) U8,
 *             "dout.s" (N, Cs), "dout.z" (N, N, Cz) — the output gradients,
 *             when training: "drop.<l>.<k>" (N, Cz) F32, block l, sub-layer k = 0..3, the
 *             masks of mf_dropout_mask (0 or 1/(1−p); rows for k = 0..2, columns for k = 3)
 *             — mf_parity_add_dropout
 *   results   "out.s", "out.z", "grad.in.s", "grad.in.z", "grad.<param name>" (the
 *             parameter gradients, mf_parity_add_params with prefix "grad.")
 *
 * File: 8-byte little-endian header length n, n bytes of JSON (padded with spaces so the
 * data starts at a multiple of 8), then the data: the F32 tensors in the order added, then
 * the U8 tensors (so every F32 tensor is 4-byte aligned). Values given as mf_real are
 * rounded to float in the double build. The data is copied when added.
 *
 * Writing is atomic as for checkpoints: <path>.tmp.XXXXXX, fsync, rename, fsync of the
 * directory. Errors are returned (never fatal) with a message naming the tensor or file. */
#ifndef MF_MODEL_PARITY_H
#define MF_MODEL_PARITY_H

#include <stdint.h>

#include "core/core.h"
#include "model/params.h"
#include "model/stack.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_PARITY_MAX_DIMS 8

typedef struct mf_parity mf_parity; /* opaque */

/* A new empty bundle in *b (NULL on failure: MF_ERR_NOMEM). */
mf_status mf_parity_open(mf_parity **b);
void mf_parity_free(mf_parity *b);

/* Adds tensor `name` (unique, non-empty) of shape (ndim <= MF_PARITY_MAX_DIMS dims, each
 * >= 0). data holds the product of the dims values (rounded to F32 / copied as is).
 * MF_ERR_CONFIG for a bad or duplicate name or shape, MF_ERR_NOMEM. */
mf_status mf_parity_add_f32(mf_parity *b, const char *name, int ndim, const int64_t *shape,
                            const mf_real *data);
mf_status mf_parity_add_f32_raw(mf_parity *b, const char *name, int ndim, const int64_t *shape,
                                const float *data);
mf_status mf_parity_add_u8(mf_parity *b, const char *name, int ndim, const int64_t *shape,
                           const uint8_t *data);

/* Metadata key = value (strings, escaped as JSON); setting a key again replaces it. */
mf_status mf_parity_meta(mf_parity *b, const char *key, const char *value);

/* The five standard metadata entries: format, config (from t), N, training, producer. */
mf_status mf_parity_meta_std(mf_parity *b, const mf_params_table *t, int N, int training,
                             const char *producer);

/* Every table tensor of flat (t->total, laid out by t) as prefix + name with the table's
 * stacked shape: prefix "" for parameters, "grad." for parameter gradients. */
mf_status mf_parity_add_params(mf_parity *b, const char *prefix, const mf_params_table *t,
                               const mf_real *flat);
/* The same from a float buffer with the table's layout (GPU fp32 master weights or parameter
 * gradients copied to the host). */
mf_status mf_parity_add_params_f32(mf_parity *b, const char *prefix, const mf_params_table *t,
                                   const float *flat);

/* "drop.<l>.<k>" (N, Cz) for every block l < t->L and sub-layer k = 0..3: the masks the
 * stack uses with these keys (mf_dropout_mask with p = t->config.p_drop and the stream
 * mf_rng_stream(rng.step, MF_RNG_DROPOUT, 4·l + k), as model/pairformer.c). Adds nothing
 * when rng.training is 0. */
mf_status mf_parity_add_dropout(mf_parity *b, const mf_params_table *t, int N, mf_stack_rng rng);

/* Writes the bundle to path atomically. MF_ERR_IO naming the file and the system error,
 * MF_ERR_NOMEM; a previous file at path is untouched on any error before the rename. */
mf_status mf_parity_write(const mf_parity *b, const char *path);

#ifdef __cplusplus
}
#endif

#endif
