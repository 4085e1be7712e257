/* alloc.c — counted allocations, arenas and fault injection. See alloc.h.
 * Host blocks carry a header (size, magic) in front of the user pointer so that
 * mf_free can account without a lookup table. */
#include "alloc.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define HDR_MAGIC 0x6d66616c6c6f6321ULL /* "mfalloc!" */

typedef struct {
  uint64_t magic;
  uint64_t bytes;
} host_hdr;

/* Counters are atomic: prep and the loader allocate from several threads. */
typedef struct {
  _Atomic int64_t current, peak, count;
} stats_atomic;
static stats_atomic g_stats[2];
static _Atomic int64_t g_fail_after = -1;
static _Atomic int64_t g_injected = 0;
static const mf_device_allocator *g_device = NULL;

size_t mf_align_up(size_t bytes) { return (bytes + MF_ALIGN - 1) & ~(size_t)(MF_ALIGN - 1); }

void mf_alloc_fail_after(int64_t n) { g_fail_after = n; }
int64_t mf_alloc_injected_failures(void) { return g_injected; }

/* 1 if this allocation must fail by injection (exactly one caller wins the 0). */
static int inject(void) {
  int64_t n = atomic_load(&g_fail_after);
  while (n >= 0) {
    if (atomic_compare_exchange_weak(&g_fail_after, &n, n - 1)) {
      if (n > 0) return 0;
      atomic_fetch_add(&g_injected, 1);
      return 1;
    }
  }
  return 0;
}

/* bytes (+ on allocation, − on free) and live count (+1 / −1) */
static void account(mf_device dev, int64_t delta, int64_t live) {
  stats_atomic *s = &g_stats[dev];
  int64_t cur = atomic_fetch_add(&s->current, delta) + delta;
  atomic_fetch_add(&s->count, live);
  int64_t pk = atomic_load(&s->peak);
  while (cur > pk && !atomic_compare_exchange_weak(&s->peak, &pk, cur)) {
  }
}

/* Sizes this close to SIZE_MAX would wrap when aligned (a negative int64 cast to size_t). */
#define MF_ALLOC_MAX (SIZE_MAX - 2 * (size_t)MF_ALIGN)

void *mf_malloc(size_t bytes, const char *what) {
  if (bytes > MF_ALLOC_MAX) {
    mf_error_set(MF_ERR_NOMEM, "allocation of %zu bytes for %s: impossible size", bytes, what);
    return NULL;
  }
  if (inject()) {
    mf_error_set(MF_ERR_NOMEM, "allocation of %zu bytes for %s failed (injected)", bytes, what);
    return NULL;
  }
  size_t total = MF_ALIGN + mf_align_up(bytes ? bytes : 1);
  uint8_t *raw = aligned_alloc(MF_ALIGN, total);
  if (!raw) {
    mf_error_set(MF_ERR_NOMEM, "allocation of %zu bytes for %s failed", bytes, what);
    return NULL;
  }
  host_hdr *h = (host_hdr *)(raw + MF_ALIGN - sizeof(host_hdr));
  h->magic = HDR_MAGIC;
  h->bytes = bytes;
  account(MF_HOST, (int64_t)bytes, 1);
  return raw + MF_ALIGN;
}

void *mf_calloc(size_t bytes, const char *what) {
  void *p = mf_malloc(bytes, what);
  if (p) memset(p, 0, bytes);
  return p;
}

void *mf_xmalloc(size_t bytes, const char *what) {
  void *p = mf_malloc(bytes, what);
  if (!p) MF_FATAL("%s", mf_error_message());
  return p;
}

void *mf_xcalloc(size_t bytes, const char *what) {
  void *p = mf_calloc(bytes, what);
  if (!p) MF_FATAL("%s", mf_error_message());
  return p;
}

void mf_free(void *p) {
  if (!p) return;
  uint8_t *user = p;
  host_hdr *h = (host_hdr *)(user - sizeof(host_hdr));
  MF_ASSERT(h->magic == HDR_MAGIC, "mf_free of a pointer not from mf_malloc (or freed twice)");
  h->magic = 0;
  account(MF_HOST, -(int64_t)h->bytes, -1);
  free(user - MF_ALIGN);
}

mf_status mf_grow(void **p, int64_t *cap, int64_t need, size_t elem, const char *what) {
  if (need <= *cap) return MF_OK;
  int64_t ncap = *cap > INT64_MAX / 2 ? INT64_MAX : 2 * *cap;
  if (ncap < need) ncap = need;
  if (elem == 0 || (uint64_t)ncap > MF_ALLOC_MAX / elem)
    return mf_error_set(MF_ERR_NOMEM, "growing %s to %lld elements of %zu bytes: impossible size",
                        what, (long long)ncap, elem);
  void *np = mf_malloc((size_t)ncap * elem, what);
  if (!np) return MF_ERR_NOMEM;
  if (*cap > 0) memcpy(np, *p, (size_t)*cap * elem);
  mf_free(*p);
  *p = np;
  *cap = ncap;
  return MF_OK;
}

void mf_alloc_set_device(const mf_device_allocator *a) { g_device = a; }

void *mf_dmalloc(size_t bytes, const char *what) {
  if (bytes > MF_ALLOC_MAX) {
    mf_error_set(MF_ERR_NOMEM, "device allocation of %zu bytes for %s: impossible size", bytes,
                 what);
    return NULL;
  }
  if (inject()) {
    mf_error_set(MF_ERR_NOMEM, "device allocation of %zu bytes for %s failed (injected)", bytes,
                 what);
    return NULL;
  }
  if (!g_device) {
    mf_error_set(MF_ERR_RUNTIME, "device allocation for %s: no GPU backend (CPU-only build, or "
                 "mf_cuda_init not called)", what);
    return NULL;
  }
  char err[256] = "";
  void *p = g_device->malloc(bytes ? bytes : 1, err, sizeof err);
  if (!p) {
    mf_error_set(MF_ERR_NOMEM, "device allocation of %zu bytes for %s failed: %s", bytes, what,
                 err);
    return NULL;
  }
  account(MF_DEVICE, (int64_t)bytes, 1);
  return p;
}

void mf_dfree(void *p, size_t bytes) {
  if (!p) return;
  MF_ASSERT(g_device != NULL, "mf_dfree without a device backend");
  g_device->free(p);
  account(MF_DEVICE, -(int64_t)bytes, -1);
}

mf_mem_stats_t mf_mem_stats(mf_device dev) {
  mf_mem_stats_t r = {atomic_load(&g_stats[dev].current), atomic_load(&g_stats[dev].peak),
                      atomic_load(&g_stats[dev].count)};
  return r;
}
void mf_mem_reset_peak(mf_device dev) {
  atomic_store(&g_stats[dev].peak, atomic_load(&g_stats[dev].current));
}

mf_status mf_arena_init(mf_arena *a, mf_device dev, size_t capacity, const char *name) {
  memset(a, 0, sizeof *a);
  snprintf(a->name, sizeof a->name, "%s", name);
  a->device = dev;
  a->capacity = mf_align_up(capacity);
  if (a->capacity == 0) return MF_OK;
  a->base = dev == MF_HOST ? mf_malloc(a->capacity, name) : mf_dmalloc(a->capacity, name);
  if (!a->base) {
    a->capacity = 0;
    return MF_ERR_NOMEM;
  }
  return MF_OK;
}

void *mf_arena_alloc(mf_arena *a, size_t bytes, const char *what) {
  size_t need = bytes > a->capacity - a->used ? SIZE_MAX : mf_align_up(bytes);
  if (inject()) {
    mf_error_set(MF_ERR_NOMEM, "arena '%s': slice of %zu bytes for %s failed (injected)", a->name,
                 bytes, what);
    return NULL;
  }
  if (need > a->capacity - a->used) {
    mf_error_set(MF_ERR_NOMEM, "arena '%s' full: %s needs %zu bytes, %zu of %zu free", a->name,
                 what, need, a->capacity - a->used, a->capacity);
    return NULL;
  }
  void *p = a->base + a->used;
  a->used += need;
  if (a->used > a->peak) a->peak = a->used;
  return p;
}

size_t mf_arena_mark(const mf_arena *a) { return a->used; }

void mf_arena_reset(mf_arena *a, size_t mark) {
  MF_ASSERT(mark <= a->used, "arena '%s': reset to %zu beyond used %zu", a->name, mark, a->used);
  a->used = mark;
}

void mf_arena_free(mf_arena *a) {
  if (a->base) {
    if (a->device == MF_HOST) mf_free(a->base);
    else mf_dfree(a->base, a->capacity);
  }
  a->base = NULL;
  a->capacity = a->used = 0;
}
