/* crop.h — the per-step random transforms of one cached entry (spec §10.2, §3.3, §3.4):
 * the three token croppers (contiguous, spatial, spatial-interface) and the method choice,
 * then the application of a crop to a feature set: token-axis features sliced (also the
 * (N, N) ones), the atoms of the kept tokens kept with atom_to_token re-indexed, MSA
 * columns sliced and rows subsampled ([PX]: k ~ U{1..S}, query first), ref_pos augmented
 * per ref_space_uid, and everything padded to static shapes with masks.
 *
 * Every random draw comes from the Philox streams of the step (rng.h):
 *   crop   stream mf_rng_stream(step, MF_RNG_CROP, 0)
 *   MSA    stream mf_rng_stream(step, MF_RNG_MSA, 0)
 *   ref_pos stream mf_rng_stream(step, MF_RNG_AUGMENT, 0)
 * so a cropped example is a pure function of (entry, seed, step).
 * Not here: reading records (features.h, cache.h), threads and buffers (loader.h), the
 * ground-truth coordinate augmentation of the diffusion copies (§7.5, done on the GPU). */
#ifndef MF_DATA_CROP_H
#define MF_DATA_CROP_H

#include <stdint.h>

#include "core/core.h"
#include "data/features.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ croppers */

typedef enum {
  MF_CROP_CONTIGUOUS = 0,
  MF_CROP_SPATIAL = 1,
  MF_CROP_INTERFACE = 2, /* spatial-interface */
  MF_CROP_ALL = 3        /* crop size >= N: every token kept, no draw */
} mf_crop_method;

#define MF_CROP_INTERFACE_CUTOFF 15.0 /* Å between centre atoms of two chains */
#define MF_CROP_TIE_BREAK 1e-3        /* added per token index to the spatial distance */

/* The per-token inputs of the croppers. */
typedef struct {
  int64_t n;               /* N tokens */
  const int32_t *asym_id;  /* (N) chain instance of each token */
  const float *centre;     /* (N, 3) centre-atom coordinates in Å; unused by contiguous */
  const uint8_t *resolved; /* (N) 1 when the centre atom is resolved; NULL: all resolved */
} mf_crop_tokens;

/* Which cropper ran and around which reference token. */
typedef struct {
  mf_crop_method chosen; /* drawn from the weights */
  mf_crop_method used;   /* after fallbacks (interface → spatial → contiguous), or ALL */
  int64_t ref;           /* reference token of a spatial crop, -1 otherwise */
} mf_crop_info;

/* Each cropper writes the selected token indices, ascending, to out (capacity
 * min(N, crop_size)) and their count to *n_out; crop_size >= N gives every token.
 * Bad input (N < 0, crop_size < 1, missing arrays) is MF_ERR_CONFIG.
 * Draws at stream indices: 0 method, 1 spatial reference, 2 interface reference,
 * 2^32 + c chain shuffle, 2^33 + 2k / 2^33 + 2k + 1 chunk length / start of the k-th chain. */

/* AF-Multimer Alg 1: chains (distinct asym_id values, each a list of its tokens in order)
 * shuffled, then per chain a chunk length uniform in [min(len, max(0, crop − added −
 * remaining)), min(crop − added, len)] and a uniform start. Keeps exactly min(N, crop). */
mf_status mf_crop_contiguous(const mf_crop_tokens *t, int64_t crop_size, uint64_t seed,
                             uint64_t stream, int32_t *out, int64_t *n_out);
/* The crop_size tokens nearest (centre atoms, + index·1e-3, unresolved at +inf) to a
 * uniformly drawn resolved reference token. *ref = -1 and *n_out = 0 when no token is
 * resolved (or when crop_size >= N: then every token, no draw). */
mf_status mf_crop_spatial(const mf_crop_tokens *t, int64_t crop_size, uint64_t seed,
                          uint64_t stream, int32_t *out, int64_t *n_out, int64_t *ref);
/* As spatial, with the reference drawn among resolved tokens that have a resolved token of
 * another chain within 15 Å. *ref = -1 and *n_out = 0 when there is no such token. */
mf_status mf_crop_interface(const mf_crop_tokens *t, int64_t crop_size, uint64_t seed,
                            uint64_t stream, int32_t *out, int64_t *n_out, int64_t *ref);
/* Marks (N) the resolved tokens with a resolved token of another chain within cutoff Å
 * (a uniform grid, O(N) for compact structures); returns how many. -1 on NOMEM. */
int64_t mf_crop_interface_tokens(const mf_crop_tokens *t, double cutoff, uint8_t *is_iface);

/* Method from weights w[3] (contiguous, spatial, interface; >= 0, not all 0), draw 0. */
mf_crop_method mf_crop_choose(const double w[3], uint64_t seed, uint64_t stream);
/* Choose, crop, fall back interface → spatial (no interface) → contiguous (nothing
 * resolved). info may be NULL. */
mf_status mf_crop_select(const mf_crop_tokens *t, int64_t crop_size, const double w[3],
                         uint64_t seed, uint64_t stream, int32_t *out, int64_t *n_out,
                         mf_crop_info *info);

/* ------------------------------------------------------------------ random transforms */

/* Uniform random rotation R (3x3 row-major, orthonormal, det +1) from the unit quaternion
 * of 4 normals at stream indices base..base+3. */
void mf_crop_random_rotation(uint64_t seed, uint64_t stream, uint64_t base, float R[9]);

/* [PX] row subsampling of S rows: k ~ U{1..S}, capped at max_rows (> 0), row 0 (the
 * query) kept first, then k−1 distinct rows of 1..S−1 drawn without replacement, sorted
 * ascending. Writes k rows to rows (capacity min(S, max_rows)); returns k (0 when S = 0),
 * -1 when out of memory. */
int64_t mf_crop_msa_rows(int64_t S, int64_t max_rows, uint64_t seed, uint64_t stream,
                         int32_t *rows);

/* ------------------------------------------------------------------ feature sets */

/* How a feature is cropped: a role per dim ('T' token axis, 'A' atom axis, 'S' MSA-row
 * axis, '.' kept), derived from the shape strings of MF_FEATURES (featurize.h: "N" → T,
 * "Na" → A, "S" → S, a number → kept), so a feature added there is cropped with no edit
 * here; `remap` says its values are indices into the token or atom axis of the uncropped
 * entry (rewritten to the cropped one, -1 when the target was cropped away): a short list
 * here (atom_to_token → token; token_centre_atom, token_rep_atom → atom). Features not in
 * MF_FEATURES are per-entry and copied whole. */
typedef enum { MF_REMAP_NONE = 0, MF_REMAP_TOKEN, MF_REMAP_ATOM } mf_crop_remap;

/* Roles of `name` into roles (ndim chars + NUL, capacity MF_MAX_DIMS + 1), its contract
 * dtype, rank and dims (kept dims; 0 on axis dims) and remap; 0 when the name is not in
 * MF_FEATURES (then roles = "", remap none). Any out-pointer may be NULL. */
int mf_crop_axes(const char *name, char roles[MF_MAX_DIMS + 1], mf_crop_remap *remap,
                 mf_dtype *dtype, int *ndim, int64_t dims[MF_MAX_DIMS]);

/* The names the cropper reads (featurize.h, MF_FEATURES). */
#define MF_CROP_F_ASYM "asym_id"               /* (N) i32 */
#define MF_CROP_F_ATOM_TOKEN "atom_to_token"   /* (Na) i32 */
#define MF_CROP_F_CENTRE "token_centre_atom"   /* (N) i32 atom index, -1 if none */
#define MF_CROP_F_POS "coordinate"             /* (Na, 3) f32 ground truth, Å */
#define MF_CROP_F_RESOLVED "coordinate_mask"   /* (Na) resolved mask (u8; any numeric dtype) */
#define MF_CROP_F_MSA "msa"                    /* (S, N) */
#define MF_CROP_F_REF_POS "ref_pos"            /* (Na, 3) f32 */
#define MF_CROP_F_REF_MASK "ref_mask"          /* (Na) (u8; any numeric dtype) */
#define MF_CROP_F_REF_UID "ref_space_uid"      /* (Na) i32 */
/* Masks the padding adds (f32, 1 = real): (N_pad), (Na_pad), (S_pad). */
#define MF_CROP_F_TOKEN_PAD "token_pad_mask"
#define MF_CROP_F_ATOM_PAD "atom_pad_mask"
#define MF_CROP_F_MSA_PAD "msa_pad_mask"

typedef struct {
  int64_t crop_size;    /* tokens kept at most; also the padded token count */
  double weights[3];    /* contiguous / spatial / interface, default 0.2 / 0.4 / 0.4 */
  int64_t max_msa_rows; /* cap on sampled rows; also the padded row count (default 16384) */
  int64_t atoms_pad;    /* padded atom count; 0: 24 · crop_size (24 atom slots per token) */
  int augment;          /* rotate/translate ref_pos per ref_space_uid (default 1) */
} mf_crop_config;
void mf_crop_config_default(mf_crop_config *c); /* crop 384, the weights above */

/* The random choices for one example: kept tokens, atoms and MSA rows (all ascending in
 * the entry, query row first). */
typedef struct {
  int64_t N, Na, S;      /* sizes of the uncropped entry */
  int64_t n_tok, n_atom, n_msa;
  int32_t *tok;          /* (n_tok) entry token indices */
  int32_t *atom;         /* (n_atom) entry atom indices */
  int32_t *msa;          /* (n_msa) entry MSA rows */
  int32_t *tok_new;      /* (N) entry token → cropped index, -1 when dropped */
  int32_t *atom_new;     /* (Na) entry atom → cropped index, -1 when dropped */
  mf_crop_info info;
  uint64_t seed, step;
  int augment;
  int64_t cap[5];        /* capacities of tok, tok_new, atom, atom_new, msa (for remake) */
} mf_crop_plan;

/* Draws the plan of step `step` for entry `fs` (needs asym_id, atom_to_token, and for the
 * spatial croppers the centre index, positions and resolved mask; without them every
 * crop is contiguous). MF_ERR_FORMAT naming the entry when a feature it reads is missing
 * or inconsistent. Free with mf_crop_plan_free. */
mf_status mf_crop_plan_make(const mf_feature_set *fs, const mf_crop_config *cfg,
                            uint64_t seed, uint64_t step, mf_crop_plan *plan);
void mf_crop_plan_free(mf_crop_plan *plan);
/* As mf_crop_plan_make, reusing the buffers of *plan (a plan made before, or zeroed) when
 * they are large enough: a loader worker keeps one plan for all its steps. The same plan
 * bytes as mf_crop_plan_make. Free with mf_crop_plan_free. */
mf_status mf_crop_plan_remake(const mf_feature_set *fs, const mf_crop_config *cfg,
                              uint64_t seed, uint64_t step, mf_crop_plan *plan);

/* A static layout: every feature of the batch with its padded shape and byte offset in
 * one flat buffer (offsets MF_ALIGN-aligned), so a slot can be copied to the GPU at once. */
typedef struct {
  char name[MF_FEAT_NAME_MAX];
  mf_dtype dtype;
  int ndim;
  int64_t shape[MF_MAX_DIMS];
  size_t offset, nbytes;
  char roles[MF_MAX_DIMS + 1]; /* mf_crop_axes of the name ("" for the pad masks) */
  mf_crop_remap remap;
  int pad_mask; /* 1, 2, 3: the token, atom, MSA pad mask; 0 for a feature */
} mf_crop_slot_feature;
typedef struct {
  int n;
  mf_crop_slot_feature *f;
  size_t total;          /* bytes of the buffer */
  int64_t N, Na, S;      /* padded sizes */
} mf_crop_layout;

/* The layout under cfg of the MF_FEATURES contract (ref NULL: every feature of
 * featurize.h, in its order) or of the entry `ref` (its names, dtypes and kept dims, in
 * its order), with the three pad masks added. Every entry written into it must have those
 * names, dtypes and kept dims (other features of an entry are ignored). */
mf_status mf_crop_layout_make(const mf_feature_set *ref, const mf_crop_config *cfg,
                              mf_crop_layout *lay);
void mf_crop_layout_free(mf_crop_layout *lay);
/* The feature of lay named `name`, or NULL. */
const mf_crop_slot_feature *mf_crop_layout_find(const mf_crop_layout *lay, const char *name);

/* Writes the cropped, subsampled, augmented and padded example into buf (lay->total
 * bytes; every byte written: padding is 0, index features included, so read the masks).
 * ref_pos augmentation (when plan->augment), the [DM] convention (features.py
 * random_augmentation), chosen over [PX]'s U(-1, 1) translation and [BZ]'s one global
 * rotation: per ref_space_uid group of kept atoms, centre on the mean of its atoms with
 * ref_mask (all its atoms when none has), rotate by a uniform random rotation (unit
 * quaternion of 4 normals at AUGMENT-stream indices 8·uid + 0..3), translate by N(0, 1 Å²)
 * per axis (indices 8·uid + 4..6); atoms with ref_mask 0 keep their values. A group's
 * rotation and translation depend only on (seed, step, uid), not on what else was kept.
 * MF_ERR_FORMAT / MF_ERR_SHAPE naming the entry when fs does not fit the layout (missing
 * feature, other dtype or kept dim, more atoms than the padded count). */
mf_status mf_crop_write(const mf_feature_set *fs, const mf_crop_plan *plan,
                        const mf_crop_layout *lay, void *buf);
/* The same into a new feature set (initialised here): padded when lay is given, else
 * with the exact cropped sizes and no pad masks. */
mf_status mf_crop_apply(const mf_feature_set *fs, const mf_crop_plan *plan,
                        const mf_crop_layout *lay, mf_feature_set *out);

#ifdef __cplusplus
}
#endif

#endif
