/* cif.c — the STAR/CIF 1.1 tokenizer and reader behind cif.h: loads a file whole
 * (through mf_textfile_*, which inflates gzip by its magic bytes), then one pass over the text
 * records every value as an (offset, length) span; tags and loops become items that
 * point into that value table. Not here: the meaning of any category (structure.c).
 *
 * Why hand-written: there is no well-kept C library for mmCIF in Debian that fits.
 * gemmi is C++ (used here only by the tests, through python3-gemmi); libcifpp
 * (libcifpp-dev) is C++ too; librcsb-core-wrapper0 is the C++ RCSB library; libcif1 /
 * libcif-dev (COMCIFS CIF API 0.4.2) is C but builds an SQLite-backed object model
 * with ICU strings, far slower than a span tokenizer and heavy for a training loader.
 * (Checked with `apt-cache search mmcif` and `apt-cache search cif` on 2026-11-29.)
 *
 * Grammar (CIF 1.1 as used by the PDB): whitespace is space, tab, CR, LF; '#' starts a
 * comment at a token boundary; ';' at the start of a line opens a text field closed by
 * "\n;"; a value in '...' or "..." ends at the same quote followed by whitespace (so
 * 'O5'' is the value O5' and "N'" is N'), and cannot span lines; '?' and '.' unquoted
 * are the unknown and inapplicable values; data_, loop_, save_, global_, stop_ are
 * reserved words (case-insensitive). Other control bytes are taken as binary data. */
#define _POSIX_C_SOURCE 200809L /* strncasecmp */
#include "data/cif.h"
#include "data/textfile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"

typedef struct {
  uint32_t off, len;
} span;

typedef struct {
  span tag;
  int64_t first, n;
  int32_t stride;
} item;

typedef struct {
  span name;
  int32_t first_item, n_items;
} block;

struct mf_cif_doc {
  char name[256];
  char *buf; /* text, NUL at buf[n] */
  size_t n;
  span *vals;
  int64_t n_vals, cap_vals;
  item *items;
  int32_t n_items, cap_items;
  block *blocks;
  int32_t n_blocks, cap_blocks;
};

#define MAX_TEXT ((size_t)UINT32_MAX - 1)

/* ------------------------------------------------------------------ messages */

static int64_t line_at(const char *buf, const char *at) {
  int64_t line = 1;
  for (const char *q = buf; q < at;) {
    const char *nl = memchr(q, '\n', (size_t)(at - q));
    if (!nl) break;
    line++;
    q = nl + 1;
  }
  return line;
}

/* Short printable excerpt of [p, p+len) for messages. */
static void excerpt(const char *p, int64_t len, char *out, size_t cap) {
  size_t k = 0;
  for (int64_t i = 0; i < len && k + 4 < cap; i++) {
    unsigned char c = (unsigned char)p[i];
    out[k++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  if (len > 0 && (size_t)len > k && k + 4 <= cap) {
    out[k++] = '.';
    out[k++] = '.';
    out[k++] = '.';
  }
  out[k] = '\0';
}

/* ------------------------------------------------------------------ lexer */

enum { T_EOF, T_TAG, T_VALUE, T_LOOP, T_DATA, T_SAVE, T_GLOBAL, T_STOP, T_ERR };

typedef struct {
  mf_cif_doc *d;
  const char *buf, *end, *p;
  const char *ts; /* token start (value: first content byte) */
  uint32_t tlen;
} lexer;

static inline int is_ws(unsigned char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static int lex_error(lexer *L, const char *at, const char *fmt, const char *arg) {
  char what[300];
  snprintf(what, sizeof what, fmt, arg);
  mf_error_set(MF_ERR_FORMAT, "%s:%lld: %s", L->d->name, (long long)line_at(L->buf, at), what);
  return T_ERR;
}

static int binary_error(lexer *L, const char *at) {
  char b[8];
  snprintf(b, sizeof b, "0x%02x", (unsigned char)*at);
  return lex_error(L, at, "binary data (byte %s): not a text CIF file", b);
}

static int next_token(lexer *L) {
  const char *p = L->p;
  for (;;) {
    while (is_ws((unsigned char)*p)) p++;
    if (*p != '#') break;
    const char *nl = memchr(p, '\n', (size_t)(L->end - p));
    p = nl ? nl + 1 : L->end;
  }
  if (p >= L->end) {
    L->p = L->end;
    return T_EOF;
  }
  unsigned char c = (unsigned char)*p;
  if (c == ';' && (p == L->buf || p[-1] == '\n')) {
    const char *t = p + 1;
    for (;;) {
      const char *nl = memchr(t, '\n', (size_t)(L->end - t));
      if (!nl) return lex_error(L, p, "unterminated text field: expected a line starting with ';'%s", "");
      for (const char *q = t; q < nl; q++)
        if ((unsigned char)*q < 0x20 && *q != '\t' && *q != '\r') return binary_error(L, q);
      if (nl[1] == ';') {
        const char *e = nl > p + 1 && nl[-1] == '\r' ? nl - 1 : nl;
        L->ts = p + 1;
        L->tlen = (uint32_t)(e - (p + 1));
        p = nl + 2;
        if (p < L->end && !is_ws((unsigned char)*p))
          return lex_error(L, p, "expected whitespace after the ';' closing a text field%s", "");
        L->p = p;
        return T_VALUE;
      }
      t = nl + 1;
    }
  }
  if (c == '\'' || c == '"') {
    const char *t = p + 1;
    for (;;) {
      unsigned char q = (unsigned char)*t;
      if (q == c) {
        unsigned char n1 = (unsigned char)t[1];
        if (is_ws(n1) || t + 1 >= L->end) break;
      } else if (q == '\n' || q == '\r' || t >= L->end) {
        return lex_error(L, p, "unterminated quoted value: expected a closing %s followed by "
                         "whitespace on the same line", c == '\'' ? "'" : "\"");
      } else if (q < 0x20 && q != '\t') {
        return binary_error(L, t);
      } else if (q == 0x7f) {
        return binary_error(L, t);
      }
      t++;
    }
    L->ts = p + 1;
    L->tlen = (uint32_t)(t - (p + 1));
    L->p = t + 1;
    return T_VALUE;
  }
  const char *s = p;
  while ((unsigned char)*p > 0x20 && *p != 0x7f) p++;
  if (p < L->end && !is_ws((unsigned char)*p)) return binary_error(L, p);
  L->ts = s;
  L->tlen = (uint32_t)(p - s);
  L->p = p;
  size_t len = (size_t)(p - s);
  switch (s[0]) {
    case '_': return T_TAG;
    case 'd': case 'D':
      if (len >= 5 && strncasecmp(s, "data_", 5) == 0) return T_DATA;
      break;
    case 'l': case 'L':
      if (len == 5 && strncasecmp(s, "loop_", 5) == 0) return T_LOOP;
      break;
    case 's': case 'S':
      if (len >= 5 && strncasecmp(s, "save_", 5) == 0) return T_SAVE;
      if (len == 5 && strncasecmp(s, "stop_", 5) == 0) return T_STOP;
      break;
    case 'g': case 'G':
      if (len == 7 && strncasecmp(s, "global_", 7) == 0) return T_GLOBAL;
      break;
    default: break;
  }
  return T_VALUE;
}

/* ------------------------------------------------------------------ parser */

static int push_val(mf_cif_doc *d, const char *buf, const char *ts, uint32_t len) {
  if (mf_grow((void **)&d->vals, &d->cap_vals, d->n_vals + 1, sizeof(span), "cif values") !=
      MF_OK)
    return 0;
  d->vals[d->n_vals].off = (uint32_t)(ts - buf);
  d->vals[d->n_vals].len = len;
  d->n_vals++;
  return 1;
}

static item *push_item(mf_cif_doc *d, const char *buf, const char *ts, uint32_t len) {
  int64_t cap = d->cap_items;
  if (d->n_items == INT32_MAX) {
    mf_error_set(MF_ERR_FORMAT, "%s: too many items", d->name);
    return NULL;
  }
  if (mf_grow((void **)&d->items, &cap, (int64_t)d->n_items + 1, sizeof(item), "cif items") !=
      MF_OK)
    return NULL;
  d->cap_items = (int32_t)(cap > INT32_MAX ? INT32_MAX : cap);
  item *it = &d->items[d->n_items++];
  it->tag.off = (uint32_t)(ts - buf);
  it->tag.len = len;
  it->first = d->n_vals;
  it->n = 1;
  it->stride = 1;
  d->blocks[d->n_blocks - 1].n_items++;
  return it;
}

static const char *token_name(int t) {
  switch (t) {
    case T_EOF: return "end of file";
    case T_TAG: return "a tag";
    case T_LOOP: return "loop_";
    case T_DATA: return "data_";
    case T_SAVE: return "save_";
    case T_GLOBAL: return "global_";
    case T_STOP: return "stop_";
    default: return "a value";
  }
}

static mf_status parse(mf_cif_doc *d) {
  lexer L = {d, d->buf, d->buf + d->n, d->buf, NULL, 0};
  const char *buf = d->buf;
  char ex[64], msg[400];
  if (d->n == 0) return mf_error_set(MF_ERR_FORMAT, "%s: empty file", d->name);
  if (d->n >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) L.p += 3; /* UTF-8 BOM */
  int64_t est = (int64_t)(d->n / 6) + 64;
  if (mf_grow((void **)&d->vals, &d->cap_vals, est, sizeof(span), "cif values") != MF_OK)
    return MF_ERR_NOMEM;

  int tok = next_token(&L);
  for (;;) {
    if (tok == T_ERR) return MF_ERR_FORMAT;
    if (tok == T_EOF) break;
    if (tok == T_DATA) {
      int64_t cap = d->cap_blocks;
      if (mf_grow((void **)&d->blocks, &cap, (int64_t)d->n_blocks + 1, sizeof(block),
                  "cif blocks") != MF_OK)
        return MF_ERR_NOMEM;
      d->cap_blocks = (int32_t)cap;
      block *b = &d->blocks[d->n_blocks++];
      b->name.off = (uint32_t)(L.ts + 5 - buf);
      b->name.len = L.tlen - 5;
      b->first_item = d->n_items;
      b->n_items = 0;
      tok = next_token(&L);
      continue;
    }
    if (tok != T_TAG && tok != T_LOOP) {
      if (tok == T_VALUE) {
        excerpt(L.ts, L.tlen, ex, sizeof ex);
        snprintf(msg, sizeof msg, "unexpected value '%s': expected a tag, loop_ or data_", ex);
        lex_error(&L, L.ts, "%s", msg);
      } else {
        lex_error(&L, L.ts, "%s is not supported in mmCIF data files", token_name(tok));
      }
      return MF_ERR_FORMAT;
    }
    if (d->n_blocks == 0) {
      lex_error(&L, L.ts, "%s before any data block: expected data_<name> first", token_name(tok));
      return MF_ERR_FORMAT;
    }
    if (tok == T_TAG) {
      const char *tag = L.ts;
      uint32_t tlen = L.tlen;
      int v = next_token(&L);
      if (v != T_VALUE) {
        if (v == T_ERR) return MF_ERR_FORMAT;
        excerpt(tag, tlen, ex, sizeof ex);
        snprintf(msg, sizeof msg, "tag %s has no value: expected a value, found %s", ex,
                 token_name(v));
        lex_error(&L, v == T_EOF ? L.end : L.ts, "%s", msg);
        return MF_ERR_FORMAT;
      }
      if (!push_item(d, buf, tag, tlen)) return MF_ERR_NOMEM;
      if (!push_val(d, buf, L.ts, L.tlen)) return MF_ERR_NOMEM;
      tok = next_token(&L);
      continue;
    }
    /* loop_ */
    const char *loop_at = L.ts;
    int32_t first_item = d->n_items;
    tok = next_token(&L);
    while (tok == T_TAG) {
      if (!push_item(d, buf, L.ts, L.tlen)) return MF_ERR_NOMEM;
      tok = next_token(&L);
    }
    if (tok == T_ERR) return MF_ERR_FORMAT;
    int32_t ncols = d->n_items - first_item;
    if (ncols == 0) {
      lex_error(&L, loop_at, "loop_ without tags: expected _category.item lines after loop_%s", "");
      return MF_ERR_FORMAT;
    }
    int64_t first_val = d->n_vals;
    const char *last = loop_at;
    while (tok == T_VALUE) {
      if (!push_val(d, buf, L.ts, L.tlen)) return MF_ERR_NOMEM;
      last = L.ts;
      tok = next_token(&L);
    }
    if (tok == T_ERR) return MF_ERR_FORMAT;
    int64_t nv = d->n_vals - first_val;
    if (nv % ncols != 0) {
      span t0 = d->items[first_item].tag;
      excerpt(buf + t0.off, t0.len, ex, sizeof ex);
      snprintf(msg, sizeof msg,
               "loop of %d tags (%s ...) has %lld values, not a multiple of %d: expected %lld more "
               "value(s) (truncated or malformed row)",
               ncols, ex, (long long)nv, ncols, (long long)(ncols - nv % ncols));
      lex_error(&L, last, "%s", msg);
      return MF_ERR_FORMAT;
    }
    for (int32_t c = 0; c < ncols; c++) {
      item *it = &d->items[first_item + c];
      it->first = first_val + c;
      it->n = nv / ncols;
      it->stride = ncols;
    }
  }
  if (d->n_blocks == 0) {
    return mf_error_set(MF_ERR_FORMAT, "%s:%lld: no data block: expected data_<name>", d->name,
                        (long long)line_at(buf, L.end));
  }
  return MF_OK;
}

/* ------------------------------------------------------------------ loading */

static mf_status doc_new(const char *name, mf_cif_doc **out) {
  mf_cif_doc *d = mf_calloc(sizeof *d, "cif doc");
  if (!d) return MF_ERR_NOMEM;
  snprintf(d->name, sizeof d->name, "%s", name ? name : "(memory)");
  *out = d;
  return MF_OK;
}

/* Takes ownership of `text` (n bytes + NUL, from mf_textfile_*), then parses. */
static mf_status doc_load(mf_cif_doc *d, char *text, size_t n) {
  if (n > MAX_TEXT) {
    mf_free(text);
    return mf_error_set(MF_ERR_FORMAT, "%s: text over 4 GiB", d->name);
  }
  d->buf = text;
  d->n = n;
  return parse(d);
}

/* Reads bytes (path == NULL) or a file through mf_textfile_* (gzip by magic), parses. */
static mf_status load(const char *path, const void *data, size_t n, const char *name,
                      mf_cif_doc **out) {
  *out = NULL;
  mf_cif_doc *d;
  mf_status st = doc_new(path ? path : name, &d);
  if (st != MF_OK) return st;
  char *text = NULL;
  size_t len = 0;
  st = path ? mf_textfile_read(path, &text, &len)
            : mf_textfile_from_bytes(data, n, d->name, &text, &len);
  if (st == MF_OK) st = doc_load(d, text, len);
  if (st != MF_OK) {
    mf_cif_free(d);
    return st;
  }
  *out = d;
  return MF_OK;
}

mf_status mf_cif_parse(const void *data, size_t n, const char *name, mf_cif_doc **out) {
  return load(NULL, data, n, name, out);
}

mf_status mf_cif_read(const char *path, mf_cif_doc **out) { return load(path, NULL, 0, NULL, out); }

void mf_cif_free(mf_cif_doc *d) {
  if (!d) return;
  mf_free(d->buf);
  mf_free(d->vals);
  mf_free(d->items);
  mf_free(d->blocks);
  mf_free(d);
}

/* ------------------------------------------------------------------ look-up */

const char *mf_cif_name(const mf_cif_doc *d) { return d->name; }
size_t mf_cif_bytes(const mf_cif_doc *d) { return d->n; }
int64_t mf_cif_n_values(const mf_cif_doc *d) { return d->n_vals; }
int32_t mf_cif_n_blocks(const mf_cif_doc *d) { return d->n_blocks; }

mf_cif_str mf_cif_block_name(const mf_cif_doc *d, int32_t b) {
  mf_cif_str s = {NULL, 0};
  if (b < 0 || b >= d->n_blocks) return s;
  s.p = d->buf + d->blocks[b].name.off;
  s.len = d->blocks[b].name.len;
  return s;
}

int32_t mf_cif_find_block(const mf_cif_doc *d, const char *name) {
  for (int32_t b = 0; b < d->n_blocks; b++)
    if (mf_cif_str_ieq(mf_cif_block_name(d, b), name)) return b;
  return -1;
}

void mf_cif_block_items(const mf_cif_doc *d, int32_t b, int32_t *first, int32_t *count) {
  *first = 0;
  *count = 0;
  if (b < 0 || b >= d->n_blocks) return;
  *first = d->blocks[b].first_item;
  *count = d->blocks[b].n_items;
}

mf_cif_str mf_cif_item_tag(const mf_cif_doc *d, int32_t i) {
  mf_cif_str s = {NULL, 0};
  if (i < 0 || i >= d->n_items) return s;
  s.p = d->buf + d->items[i].tag.off;
  s.len = d->items[i].tag.len;
  return s;
}

mf_cif_col mf_cif_item_col(const mf_cif_doc *d, int32_t i) {
  mf_cif_col c = {d, 0, 0, 1, -1};
  if (i < 0 || i >= d->n_items) return c;
  c.first = d->items[i].first;
  c.n = d->items[i].n;
  c.stride = d->items[i].stride;
  c.item = i;
  return c;
}

int mf_cif_find(const mf_cif_doc *d, int32_t b, const char *tag, mf_cif_col *col) {
  *col = mf_cif_item_col(d, -1);
  if (b < 0 || b >= d->n_blocks) return 0;
  size_t len = strlen(tag);
  const block *bl = &d->blocks[b];
  for (int32_t i = bl->first_item; i < bl->first_item + bl->n_items; i++) {
    const item *it = &d->items[i];
    if (it->tag.len == len && strncasecmp(d->buf + it->tag.off, tag, len) == 0) {
      *col = mf_cif_item_col(d, i);
      return 1;
    }
  }
  return 0;
}

int64_t mf_cif_category_rows(const mf_cif_doc *d, int32_t b, const char *category) {
  if (b < 0 || b >= d->n_blocks) return -1;
  size_t len = strlen(category);
  const block *bl = &d->blocks[b];
  for (int32_t i = bl->first_item; i < bl->first_item + bl->n_items; i++) {
    const item *it = &d->items[i];
    if (it->tag.len > len && d->buf[it->tag.off + len] == '.' &&
        strncasecmp(d->buf + it->tag.off, category, len) == 0)
      return it->n;
  }
  return -1;
}

static const span *val_at(const mf_cif_col *c, int64_t row) {
  if (!c->doc || c->item < 0 || row < 0 || row >= c->n) return NULL;
  return &c->doc->vals[c->first + row * c->stride];
}

mf_cif_str mf_cif_value(const mf_cif_col *c, int64_t row) {
  mf_cif_str s = {NULL, 0};
  const span *v = val_at(c, row);
  if (!v) return s;
  s.p = c->doc->buf + v->off;
  s.len = v->len;
  return s;
}

mf_cif_kind mf_cif_value_kind(const mf_cif_col *c, int64_t row) {
  const span *v = val_at(c, row);
  if (!v) return MF_CIF_ABSENT;
  const char *buf = c->doc->buf;
  char before = v->off ? buf[v->off - 1] : ' ';
  if (before == '\'' || before == '"') return MF_CIF_QUOTED;
  if (before == ';') return MF_CIF_TEXT;
  if (v->len == 1 && buf[v->off] == '?') return MF_CIF_UNKNOWN;
  if (v->len == 1 && buf[v->off] == '.') return MF_CIF_INAPPLICABLE;
  return MF_CIF_PLAIN;
}

int mf_cif_is_null(const mf_cif_col *c, int64_t row) {
  mf_cif_kind k = mf_cif_value_kind(c, row);
  return k == MF_CIF_ABSENT || k == MF_CIF_UNKNOWN || k == MF_CIF_INAPPLICABLE;
}

int64_t mf_cif_line(const mf_cif_col *c, int64_t row) {
  const span *v = val_at(c, row);
  if (!v) return 0;
  return line_at(c->doc->buf, c->doc->buf + v->off);
}

/* ------------------------------------------------------------------ numbers */

static const double k_pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Length of s without a trailing standard uncertainty "(digits)"; -1 if malformed. */
static int64_t strip_su(mf_cif_str s) {
  if (s.len < 3 || s.p[s.len - 1] != ')') return s.len;
  int64_t i = s.len - 2;
  while (i >= 0 && s.p[i] >= '0' && s.p[i] <= '9') i--;
  if (i < 0 || s.p[i] != '(' || i == s.len - 2) return -1;
  return i;
}

int mf_cif_parse_double(mf_cif_str s, double *out) {
  if (!s.p || s.len <= 0) return 0;
  int64_t len = strip_su(s);
  if (len <= 0) return 0;
  const char *p = s.p, *e = s.p + len;
  int neg = 0;
  if (*p == '+' || *p == '-') neg = *p++ == '-';
  uint64_t m = 0;
  int nd = 0, digits = 0;
  int64_t ex = 0;
  for (; p < e && *p >= '0' && *p <= '9'; p++, digits++) {
    if (nd < 19) {
      m = m * 10 + (uint64_t)(*p - '0');
      if (m) nd++;
    } else {
      ex++;
    }
  }
  if (p < e && *p == '.') {
    for (p++; p < e && *p >= '0' && *p <= '9'; p++, digits++) {
      if (nd < 19) {
        m = m * 10 + (uint64_t)(*p - '0');
        if (m) nd++;
        ex--;
      }
    }
  }
  if (!digits) return 0;
  if (p < e && (*p == 'e' || *p == 'E')) {
    p++;
    int eneg = 0;
    if (p < e && (*p == '+' || *p == '-')) eneg = *p++ == '-';
    if (p >= e || *p < '0' || *p > '9') return 0;
    int64_t x = 0;
    for (; p < e && *p >= '0' && *p <= '9'; p++)
      if (x < 100000) x = x * 10 + (*p - '0');
    ex += eneg ? -x : x;
  }
  if (p != e) return 0;
  double v;
  if (nd <= 15 && ex >= -22 && ex <= 22) {
    v = (double)m; /* exact: m < 10^15 < 2^53 */
    v = ex < 0 ? v / k_pow10[-ex] : v * k_pow10[ex];
  } else {
    char tmp[512];
    if (len >= (int64_t)sizeof tmp) return 0;
    memcpy(tmp, s.p, (size_t)len);
    tmp[len] = '\0';
    char *endp;
    v = strtod(tmp, &endp);
    if (endp != tmp + len) return 0;
    *out = v;
    return 1;
  }
  *out = neg ? -v : v;
  return 1;
}

int mf_cif_parse_int(mf_cif_str s, int64_t *out) {
  if (!s.p || s.len <= 0) return 0;
  int64_t len = strip_su(s);
  if (len <= 0) return 0;
  const char *p = s.p, *e = s.p + len;
  int neg = 0;
  if (*p == '+' || *p == '-') neg = *p++ == '-';
  if (p == e) return 0;
  uint64_t v = 0;
  for (; p < e; p++) {
    if (*p < '0' || *p > '9') return 0;
    v = v * 10 + (uint64_t)(*p - '0');
    if (v > (uint64_t)INT64_MAX) return 0;
  }
  *out = neg ? -(int64_t)v : (int64_t)v;
  return 1;
}

static mf_status not_a_number(const mf_cif_col *c, int64_t row, const char *what) {
  char ex[64], tag[96];
  mf_cif_str v = mf_cif_value(c, row), t = mf_cif_item_tag(c->doc, c->item);
  excerpt(v.p, v.len, ex, sizeof ex);
  excerpt(t.p, t.len, tag, sizeof tag);
  return mf_error_set(MF_ERR_FORMAT, "%s:%lld: %s (row %lld): expected %s, got '%s'", c->doc->name,
                      (long long)mf_cif_line(c, row), tag, (long long)row + 1, what, ex);
}

mf_status mf_cif_get_double(const mf_cif_col *c, int64_t row, double dflt, double *out) {
  if (mf_cif_is_null(c, row)) {
    *out = dflt;
    return MF_OK;
  }
  if (!mf_cif_parse_double(mf_cif_value(c, row), out)) return not_a_number(c, row, "a number");
  return MF_OK;
}

mf_status mf_cif_get_int(const mf_cif_col *c, int64_t row, int64_t dflt, int64_t *out) {
  if (mf_cif_is_null(c, row)) {
    *out = dflt;
    return MF_OK;
  }
  if (!mf_cif_parse_int(mf_cif_value(c, row), out)) return not_a_number(c, row, "an integer");
  return MF_OK;
}

/* ------------------------------------------------------------------ strings */

int mf_cif_str_eq(mf_cif_str s, const char *lit) {
  size_t n = strlen(lit);
  return s.p && (size_t)s.len == n && memcmp(s.p, lit, n) == 0;
}

int mf_cif_str_ieq(mf_cif_str s, const char *lit) {
  size_t n = strlen(lit);
  return s.p && (size_t)s.len == n && strncasecmp(s.p, lit, n) == 0;
}

int mf_cif_str_same(mf_cif_str a, mf_cif_str b) {
  return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, (size_t)a.len) == 0);
}

int mf_cif_str_copy(mf_cif_str s, char *dst, size_t cap) {
  if (cap == 0) return 0;
  size_t n = s.p ? (size_t)s.len : 0;
  int fits = n < cap;
  if (!fits) n = cap - 1;
  if (n) memcpy(dst, s.p, n);
  dst[n] = '\0';
  return fits;
}
