/* alloc.h — memory: counted host/device allocations, bump arenas, and a
 * fault-injection switch for tests.
 *
 * Every byte megafold allocates goes through mf_malloc/mf_dmalloc (directly or via an
 * arena), so mf_mem_stats() knows current and peak use per device. Device memory comes
 * from an allocator the CUDA backend registers (mf_cuda_init in src/ops/cuda/device.cu),
 * which keeps this library free of CUDA; without one, mf_dmalloc returns NULL with an
 * error message. mf_alloc_fail_after(n) makes the n-th next allocation fail,
 * so tests can walk every failure path (as Lua's ltests.c allocator does). The counters and
 * the injection switch are atomic: allocation is thread-safe. */
#ifndef MF_ALLOC_H
#define MF_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MF_HOST = 0, MF_DEVICE = 1 } mf_device;

#define MF_ALIGN 256 /* alignment of every allocation and arena slice */

/* Host: aligned, counted. NULL (and mf_error_message set) on failure. */
void *mf_malloc(size_t bytes, const char *what);
void *mf_calloc(size_t bytes, const char *what);
void mf_free(void *p);

/* Grows the mf_malloc'd array *p of *cap elements of elem bytes (NULL and 0 at first) to
 * hold at least need elements: nothing when need <= *cap; else a new block of
 * max(need, 2 * *cap) elements (exactly need the first time), the old *cap elements
 * copied into it and the old block freed; *p and *cap are updated. On failure
 * MF_ERR_NOMEM (mf_error_message set, naming what) and *p, *cap are left as they were. */
mf_status mf_grow(void **p, int64_t *cap, int64_t need, size_t elem, const char *what);

/* The device backend: malloc returns NULL and fills err on failure. */
typedef struct {
  void *(*malloc)(size_t bytes, char *err, size_t errlen);
  void (*free)(void *p);
} mf_device_allocator;
void mf_alloc_set_device(const mf_device_allocator *a); /* NULL: none */

/* Scratch that must exist: mf_malloc / mf_calloc, and a failure is fatal with the
 * allocator's message (what and how many bytes). Used by the CPU reference ops, whose
 * signatures have no error return. */
void *mf_xmalloc(size_t bytes, const char *what);
void *mf_xcalloc(size_t bytes, const char *what);

/* Device: counted; the size must be given back on free. */
void *mf_dmalloc(size_t bytes, const char *what);
void mf_dfree(void *p, size_t bytes);

typedef struct {
  int64_t current, peak, count; /* bytes in use, high-water mark, live allocations */
} mf_mem_stats_t;
mf_mem_stats_t mf_mem_stats(mf_device dev);
void mf_mem_reset_peak(mf_device dev);

/* Fault injection: after n more successful allocations, the next one fails
 * (n = 0: the very next one). n < 0 turns injection off. Applies to mf_malloc,
 * mf_calloc, mf_dmalloc and mf_arena_alloc. */
void mf_alloc_fail_after(int64_t n);
int64_t mf_alloc_injected_failures(void); /* how many failures were injected so far */

/* Bump arena over one allocation. Slices are MF_ALIGN-aligned. */
typedef struct {
  char name[32];
  mf_device device;
  uint8_t *base;
  size_t capacity, used, peak;
} mf_arena;

mf_status mf_arena_init(mf_arena *a, mf_device dev, size_t capacity, const char *name);
void *mf_arena_alloc(mf_arena *a, size_t bytes, const char *what); /* NULL + error when full */
size_t mf_arena_mark(const mf_arena *a);
void mf_arena_reset(mf_arena *a, size_t mark); /* frees everything allocated after mark */
void mf_arena_free(mf_arena *a);

/* Bytes rounded up to MF_ALIGN: what an arena slice of `bytes` costs. */
size_t mf_align_up(size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
