/* a3m.c — a3m MSA reader (two passes over the text: validate and count, then fill) and the
 * MSA features of spec §3.4. See a3m.h. Not a Stockholm/FASTA reader, not a subsampler. */
#include "data/a3m.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "data/textfile.h"

/* Counts from the validating pass. */
typedef struct {
  int64_t S, N, name_bytes;
} a3m_counts;

static void show_char(char *buf, size_t n, unsigned char c) {
  if (c >= 0x21 && c < 0x7f) snprintf(buf, n, "'%c'", c);
  else snprintf(buf, n, "byte 0x%02x", c);
}

/* One pass over the text. With out == NULL: validates and counts into *cnt. With out set
 * (arrays allocated from *cnt): fills them; the text is known to be valid then. */
static mf_status scan(const char *text, size_t len, const char *what, mf_moltype type,
                      a3m_counts *cnt, mf_a3m *out) {
  int64_t S = 0, N = out ? out->N : 0, name_bytes = 0;
  int64_t col = 0, line = 1, header_line = 0;
  int32_t pending_del = 0;
  size_t i = 0;
  while (i < len) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - text) : len; /* [i, end) is the line */
    size_t stop = end;
    if (stop > i && text[stop - 1] == '\r') stop--;
    if (text[i] == '#') {
      /* a comment, e.g. ColabFold/MMseqs2's first line "#<lengths>\t<cardinalities>" */
    } else if (text[i] == '>') {
      if (S > 0 && !out) { /* close the previous record */
        if (S == 1) {
          N = col;
          if (N == 0)
            return mf_error_set(MF_ERR_FORMAT, "%s: record 1 (line %lld): the query has no "
                                "residues", what, (long long)header_line);
        } else if (col != N) {
          return mf_error_set(MF_ERR_FORMAT, "%s: record %lld (line %lld): %lld aligned columns, "
                              "the query (record 1) has %lld", what, (long long)S,
                              (long long)header_line, (long long)col, (long long)N);
        }
      }
      size_t nlen = stop - (i + 1);
      if (out) {
        out->name_off[S] = name_bytes;
        memcpy(out->names + name_bytes, text + i + 1, nlen);
        out->names[name_bytes + (int64_t)nlen] = '\0';
      }
      name_bytes += (int64_t)nlen + 1;
      S++;
      col = 0;
      pending_del = 0;
      header_line = line;
    } else {
      for (size_t k = i; k < stop; k++) {
        unsigned char c = (unsigned char)text[k];
        if (c == ' ' || c == '\t' || c == '\r' || c == '.') continue;
        if (S == 0) {
          return mf_error_set(MF_ERR_FORMAT, "%s: line %lld: text before the first '>' header",
                              what, (long long)line);
        }
        if (c >= 'a' && c <= 'z') {
          if (pending_del < INT32_MAX) pending_del++;
          continue;
        }
        if (!((c >= 'A' && c <= 'Z') || c == '-')) {
          char buf[16];
          show_char(buf, sizeof buf, c);
          return mf_error_set(MF_ERR_FORMAT, "%s: record %lld (line %lld, column %zu): invalid "
                              "sequence character %s", what, (long long)S, (long long)line,
                              k - i + 1, buf);
        }
        if (out) {
          if (col < N) { /* always true for valid text */
            int64_t at = (S - 1) * N + col;
            out->msa[at] = (uint8_t)mf_restype_from_letter((char)c, type);
            out->deletions[at] = pending_del;
            if (S == 1) out->query[col] = (char)c;
          }
        }
        pending_del = 0;
        col++;
      }
    }
    i = nl ? end + 1 : len;
    line++;
  }
  if (!out) {
    if (S == 0) return mf_error_set(MF_ERR_FORMAT, "%s: empty a3m (no '>' record)", what);
    if (S == 1) {
      N = col;
      if (N == 0)
        return mf_error_set(MF_ERR_FORMAT, "%s: record 1 (line %lld): the query has no residues",
                            what, (long long)header_line);
    } else if (col != N) {
      return mf_error_set(MF_ERR_FORMAT, "%s: record %lld (line %lld): %lld aligned columns, the "
                          "query (record 1) has %lld", what, (long long)S, (long long)header_line,
                          (long long)col, (long long)N);
    }
    cnt->S = S;
    cnt->N = N;
    cnt->name_bytes = name_bytes;
  }
  return MF_OK;
}

void mf_a3m_free(mf_a3m *a) {
  if (!a) return;
  mf_free(a->msa);
  mf_free(a->deletions);
  mf_free(a->query);
  mf_free(a->names);
  mf_free(a->name_off);
  memset(a, 0, sizeof *a);
}

mf_status mf_a3m_parse(const char *text, size_t len, const char *what, mf_moltype type,
                       mf_a3m *out) {
  memset(out, 0, sizeof *out);
  size_t nul;
  if (len == 0) return mf_error_set(MF_ERR_FORMAT, "%s: empty a3m (no data)", what);
  if (mf_textfile_find_nul(text, len, &nul))
    return mf_error_set(MF_ERR_FORMAT, "%s: binary data (NUL byte at offset %zu), not an a3m",
                        what, nul);
  a3m_counts cnt;
  mf_status st = scan(text, len, what, type, &cnt, NULL);
  if (st != MF_OK) return st;
  if (cnt.S > INT64_MAX / cnt.N / (int64_t)sizeof(int32_t))
    return mf_error_set(MF_ERR_FORMAT, "%s: MSA of %lld x %lld is too large", what,
                        (long long)cnt.S, (long long)cnt.N);
  size_t cells = (size_t)(cnt.S * cnt.N);
  out->S = cnt.S;
  out->N = cnt.N;
  out->msa = mf_malloc(cells, "a3m msa");
  out->deletions = mf_malloc(cells * sizeof(int32_t), "a3m deletions");
  out->query = mf_malloc((size_t)cnt.N + 1, "a3m query");
  out->names = mf_malloc((size_t)cnt.name_bytes, "a3m names");
  out->name_off = mf_malloc((size_t)cnt.S * sizeof(int64_t), "a3m name offsets");
  if (!out->msa || !out->deletions || !out->query || !out->names || !out->name_off) {
    mf_a3m_free(out);
    return MF_ERR_NOMEM;
  }
  out->query[cnt.N] = '\0';
  st = scan(text, len, what, type, NULL, out);
  if (st != MF_OK) mf_a3m_free(out);
  return st;
}

mf_status mf_a3m_read(const char *path, mf_moltype type, mf_a3m *out) {
  memset(out, 0, sizeof *out);
  char *text = NULL;
  size_t len = 0;
  mf_status st = mf_textfile_read(path, &text, &len);
  if (st != MF_OK) return st;
  st = mf_a3m_parse(text, len, path, type, out);
  mf_free(text);
  return st;
}

const char *mf_a3m_name(const mf_a3m *a, int64_t row) {
  if (row < 0 || row >= a->S) return NULL;
  return a->names + a->name_off[row];
}

float mf_msa_deletion_value(int32_t d) {
  return (float)(2.0 / 3.14159265358979323846 * atan((double)d / 3.0));
}

void mf_msa_features_free(mf_msa_features *f) {
  if (!f) return;
  mf_free(f->has_deletion);
  mf_free(f->deletion_value);
  mf_free(f->profile);
  mf_free(f->deletion_mean);
  memset(f, 0, sizeof *f);
}

mf_status mf_msa_profile(const mf_a3m *a, float *profile, float *deletion_mean) {
  const int64_t S = a->S, N = a->N;
  int64_t *counts = mf_calloc((size_t)N * MF_RESTYPE_COUNT * sizeof(int64_t), "msa profile counts");
  int64_t *dsum = mf_calloc((size_t)N * sizeof(int64_t), "msa deletion sums");
  if (!counts || !dsum) {
    mf_free(counts);
    mf_free(dsum);
    return MF_ERR_NOMEM;
  }
  for (int64_t s = 0; s < S; s++) {
    const uint8_t *m = a->msa + s * N;
    const int32_t *d = a->deletions + s * N;
    for (int64_t j = 0; j < N; j++) {
      counts[j * MF_RESTYPE_COUNT + m[j]]++;
      dsum[j] += d[j];
    }
  }
  for (int64_t j = 0; j < N; j++) {
    for (int k = 0; k < MF_RESTYPE_COUNT; k++)
      profile[j * MF_RESTYPE_COUNT + k] =
          (float)((double)counts[j * MF_RESTYPE_COUNT + k] / (double)S);
    deletion_mean[j] = (float)((double)dsum[j] / (double)S);
  }
  mf_free(counts);
  mf_free(dsum);
  return MF_OK;
}

mf_status mf_msa_features_compute(const mf_a3m *a, mf_msa_features *f) {
  memset(f, 0, sizeof *f);
  const int64_t S = a->S, N = a->N;
  size_t cells = (size_t)(S * N);
  f->S = S;
  f->N = N;
  f->has_deletion = mf_malloc(cells * sizeof(float), "msa has_deletion");
  f->deletion_value = mf_malloc(cells * sizeof(float), "msa deletion_value");
  f->profile = mf_malloc((size_t)N * MF_RESTYPE_COUNT * sizeof(float), "msa profile");
  f->deletion_mean = mf_malloc((size_t)N * sizeof(float), "msa deletion_mean");
  if (!f->has_deletion || !f->deletion_value || !f->profile || !f->deletion_mean) {
    mf_msa_features_free(f);
    return MF_ERR_NOMEM;
  }
  for (size_t i = 0; i < cells; i++) {
    f->has_deletion[i] = mf_msa_has_deletion(a->deletions[i]);
    f->deletion_value[i] = mf_msa_deletion_value(a->deletions[i]);
  }
  mf_status st = mf_msa_profile(a, f->profile, f->deletion_mean);
  if (st != MF_OK) mf_msa_features_free(f);
  return st;
}
