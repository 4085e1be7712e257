/* textfile.c — whole-file reads with transparent gzip (zlib inflate over the file's bytes).
 * See textfile.h. Not a streaming reader; not a parser. */
#define _POSIX_C_SOURCE 200809L /* fileno, fstat */
#include "data/textfile.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

static int is_gzip(const unsigned char *b, size_t n) { return n >= 2 && b[0] == 0x1f && b[1] == 0x8b; }

static mf_status inflate_all(const unsigned char *in, size_t n, const char *what, char **data,
                             size_t *len) {
  /* ISIZE (last 4 bytes, little endian) is the size of the last member mod 2^32: a hint. */
  size_t hint = n >= 18 ? (size_t)in[n - 4] | (size_t)in[n - 3] << 8 | (size_t)in[n - 2] << 16 |
                              (size_t)in[n - 1] << 24
                        : 0;
  if (hint < n) hint = n * 4;
  if (n < SIZE_MAX / 1032 && hint > n * 1032) hint = n * 1032; /* deflate's maximum ratio */
  /* one buffer of hint + 1 bytes (the NUL); it doubles when the text turns out longer */
  if (hint >= (size_t)INT64_MAX) return mf_error_set(MF_ERR_NOMEM, "%s: text too large", what);
  char *out = NULL;
  int64_t cap = 0;
  size_t used = 0;
  mf_status st = mf_grow((void **)&out, &cap, (int64_t)hint + 1, 1, what);
  if (st != MF_OK) return st;

  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, 15 + 16) != Z_OK) {
    mf_free(out);
    return mf_error_set(MF_ERR_RUNTIME, "%s: zlib inflateInit2 failed", what);
  }
  size_t pos = 0; /* input bytes consumed */
  int member = 1;
  for (;;) {
    zs.avail_in = 0;
    for (;;) {
      if (zs.avail_in == 0 && pos < n) { /* (re)fill: the input may exceed one uInt */
        size_t left = n - pos;
        zs.next_in = (Bytef *)(in + pos);
        zs.avail_in = left > UINT_MAX ? UINT_MAX : (uInt)left;
      }
      if ((size_t)cap - 1 - used == 0) {
        st = mf_grow((void **)&out, &cap, (int64_t)used + 2, 1, what); /* doubles */
        if (st != MF_OK) goto fail;
      }
      size_t room = (size_t)cap - 1 - used;
      zs.next_out = (Bytef *)(out + used);
      zs.avail_out = room > UINT_MAX ? UINT_MAX : (uInt)room;
      uInt before_out = zs.avail_out, before_in = zs.avail_in;
      int ret = inflate(&zs, Z_NO_FLUSH);
      used += before_out - zs.avail_out;
      pos += before_in - zs.avail_in;
      if (ret == Z_STREAM_END) break;
      if (ret == Z_OK) continue;
      if (ret == Z_BUF_ERROR && zs.avail_in == 0 && pos == n) {
        st = mf_error_set(MF_ERR_FORMAT,
                          "%s: truncated gzip data (member %d cut off after %zu compressed bytes, "
                          "%zu bytes inflated)",
                          what, member, n, used);
        goto fail;
      }
      st = mf_error_set(MF_ERR_FORMAT, "%s: corrupt gzip data in member %d at compressed byte "
                        "%zu: %s", what, member, pos, zs.msg ? zs.msg : "inflate error");
      goto fail;
    }
    /* member done: another member, zero padding, or garbage */
    size_t k = pos;
    while (k < n && in[k] == 0) k++;
    if (k == n) break;
    if (!is_gzip(in + pos, n - pos)) {
      st = mf_error_set(MF_ERR_FORMAT, "%s: %zu bytes of trailing garbage after gzip member %d",
                        what, n - pos, member);
      goto fail;
    }
    inflateReset(&zs);
    member++;
  }
  inflateEnd(&zs);
  out[used] = '\0';
  *data = out;
  *len = used;
  return MF_OK;
fail:
  inflateEnd(&zs);
  mf_free(out);
  return st;
}

mf_status mf_textfile_from_bytes(const void *bytes, size_t n, const char *what, char **data,
                                 size_t *len) {
  *data = NULL;
  *len = 0;
  if (is_gzip(bytes, n)) return inflate_all(bytes, n, what, data, len);
  char *out = mf_malloc(n + 1, what);
  if (!out) return MF_ERR_NOMEM;
  if (n) memcpy(out, bytes, n);
  out[n] = '\0';
  *data = out;
  *len = n;
  return MF_OK;
}

mf_status mf_textfile_read(const char *path, char **data, size_t *len) {
  *data = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return mf_error_set(MF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  /* One buffer of the file's size + 1 (64 KiB when unknown: a pipe); it grows (doubling)
   * only when the file turned out longer than fstat said. */
  struct stat sb;
  size_t size0 = 1 << 16;
  if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0) {
    if ((uintmax_t)sb.st_size >= SIZE_MAX - 1) {
      fclose(f);
      return mf_error_set(MF_ERR_NOMEM, "%s: file too large", path);
    }
    size0 = (size_t)sb.st_size;
  }
  char *raw = NULL;
  int64_t cap = 0;
  size_t used = 0;
  mf_status st = mf_grow((void **)&raw, &cap, (int64_t)size0 + 1, 1, path);
  while (st == MF_OK) {
    if (used + 1 >= (size_t)cap) { /* full: at the end of the file, or is there more? */
      int c = fgetc(f);
      if (c == EOF) {
        if (ferror(f)) st = mf_error_set(MF_ERR_IO, "%s: read error: %s", path, strerror(errno));
        break;
      }
      st = mf_grow((void **)&raw, &cap, (int64_t)used + 2, 1, path); /* doubles */
      if (st != MF_OK) break;
      raw[used++] = (char)c;
      continue;
    }
    size_t got = fread(raw + used, 1, (size_t)cap - 1 - used, f);
    used += got;
    if (got == 0) {
      if (ferror(f)) st = mf_error_set(MF_ERR_IO, "%s: read error: %s", path, strerror(errno));
      break;
    }
  }
  fclose(f);
  if (st != MF_OK) {
    mf_free(raw);
    return st;
  }
  if (!is_gzip((unsigned char *)raw, used)) { /* plain: hand over the buffer itself */
    raw[used] = '\0';
    *data = raw;
    *len = used;
    return MF_OK;
  }
  st = inflate_all((unsigned char *)raw, used, path, data, len);
  mf_free(raw);
  return st;
}

int mf_textfile_find_nul(const char *data, size_t n, size_t *offset) {
  const char *p = memchr(data, '\0', n);
  if (!p) return 0;
  if (offset) *offset = (size_t)(p - data);
  return 1;
}
