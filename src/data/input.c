/* input.c — FASTA reader and JSON job reader (jansson); see input.h. Not an MSA reader and
 * not a featuriser. */
#include "data/input.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "data/textfile.h"

/* ------------------------------------------------------------------ FASTA */
void mf_fasta_free(mf_fasta *f) {
  if (!f) return;
  mf_free(f->text);
  mf_free(f->name_off);
  mf_free(f->seq_off);
  mf_free(f->seq_len);
  memset(f, 0, sizeof *f);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

static mf_status close_record(mf_fasta *out, int64_t rec, int64_t *used, int64_t header_line,
                              const char *what) {
  out->seq_len[rec] = *used - out->seq_off[rec];
  out->text[(*used)++] = '\0';
  if (out->seq_len[rec] == 0)
    return mf_error_set(MF_ERR_FORMAT, "%s: record %lld (line %lld) has an empty sequence", what,
                        (long long)rec + 1, (long long)header_line);
  return MF_OK;
}

mf_status mf_fasta_parse(const char *text, size_t len, const char *what, mf_fasta *out) {
  memset(out, 0, sizeof *out);
  size_t nul;
  if (mf_textfile_find_nul(text, len, &nul))
    return mf_error_set(MF_ERR_FORMAT, "%s: binary data (NUL byte at offset %zu), not FASTA",
                        what, nul);
  int64_t n = 0; /* records: lines that start with '>' */
  for (size_t i = 0; i < len; i++)
    if (text[i] == '>' && (i == 0 || text[i - 1] == '\n')) n++;
  if (n == 0) return mf_error_set(MF_ERR_FORMAT, "%s: no FASTA record (no line starts with '>')",
                                  what);
  out->text = mf_malloc(len + 2, "fasta text");
  out->name_off = mf_malloc((size_t)n * sizeof(int64_t), "fasta offsets");
  out->seq_off = mf_malloc((size_t)n * sizeof(int64_t), "fasta offsets");
  out->seq_len = mf_malloc((size_t)n * sizeof(int64_t), "fasta lengths");
  if (!out->text || !out->name_off || !out->seq_off || !out->seq_len) {
    mf_fasta_free(out);
    return MF_ERR_NOMEM;
  }
  int64_t rec = -1, line = 1, header_line = 0, used = 0;
  int star = 0;
  mf_status st = MF_OK;
  size_t i = 0;
  while (i < len && st == MF_OK) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - text) : len; /* [i, end) is the line */
    if (text[i] == '>') {
      if (rec >= 0) st = close_record(out, rec, &used, header_line, what);
      if (st != MF_OK) break;
      rec++;
      size_t stop = end;
      if (stop > i + 1 && text[stop - 1] == '\r') stop--;
      out->name_off[rec] = used;
      memcpy(out->text + used, text + i + 1, stop - i - 1);
      used += (int64_t)(stop - i - 1);
      out->text[used++] = '\0';
      out->seq_off[rec] = used;
      header_line = line;
      star = 0;
    } else {
      for (size_t k = i; k < end && st == MF_OK; k++) {
        char c = text[k];
        unsigned char u = (unsigned char)c;
        if (is_space(c)) continue;
        if (rec < 0) {
          st = mf_error_set(MF_ERR_FORMAT, "%s: line %lld: text before the first '>' header", what,
                            (long long)line);
        } else if (c == '*' && !star) {
          star = 1;
        } else if (star || !((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '-')) {
          char shown[8];
          if (u >= 0x21 && u < 0x7f) snprintf(shown, sizeof shown, "'%c'", c);
          else snprintf(shown, sizeof shown, "0x%02x", u);
          st = mf_error_set(MF_ERR_FORMAT, "%s: record %lld (line %lld, column %zu): %s %s", what,
                            (long long)rec + 1, (long long)line, k - i + 1, shown,
                            star ? "after the final '*'" : "is not a sequence letter");
        } else {
          out->text[used++] = (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
        }
      }
    }
    i = nl ? end + 1 : len;
    line++;
  }
  if (st == MF_OK) st = close_record(out, rec, &used, header_line, what);
  if (st != MF_OK) mf_fasta_free(out);
  else out->n = n;
  return st;
}

mf_status mf_fasta_read(const char *path, mf_fasta *out) {
  memset(out, 0, sizeof *out);
  char *text = NULL;
  size_t len = 0;
  mf_status st = mf_textfile_read(path, &text, &len);
  if (st != MF_OK) return st;
  st = mf_fasta_parse(text, len, path, out);
  mf_free(text);
  return st;
}

/* ------------------------------------------------------------------ JSON job */
void mf_job_free(mf_job *job) {
  if (!job) return;
  for (int64_t i = 0; job->entities && i < job->n_entities; i++) {
    mf_job_entity *e = &job->entities[i];
    mf_free(e->ids);
    mf_free(e->sequence);
    mf_free(e->ccd);
    mf_free(e->mods);
    mf_free(e->msa_path);
  }
  mf_free(job->entities);
  mf_free(job->name);
  mf_free(job->seeds);
  memset(job, 0, sizeof *job);
}

int64_t mf_job_n_chains(const mf_job *job) {
  int64_t n = 0;
  for (int64_t i = 0; i < job->n_entities; i++) n += job->entities[i].n_ids;
  return n;
}

static char *dup_str(const char *s, const char *what) {
  size_t n = strlen(s);
  char *d = mf_malloc(n + 1, what);
  if (d) memcpy(d, s, n + 1);
  return d;
}

static int valid_id(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n > 4) return 0;
  for (size_t k = 0; k < n; k++) {
    char c = s[k];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return 0;
  }
  return 1;
}

static int valid_ccd(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n >= MF_JOB_CCD_MAX) return 0;
  for (size_t k = 0; k < n; k++) {
    char c = s[k];
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return 0;
  }
  return 1;
}

/* "id": "A" or ["A", "B"] */
static mf_status parse_ids(json_t *v, const char *what, const char *path, mf_job_entity *e) {
  json_t *one[1] = {v};
  json_t **items = one;
  size_t n = 1;
  if (json_is_array(v)) {
    n = json_array_size(v);
    if (n == 0) return mf_error_set(MF_ERR_FORMAT, "%s: %s.id is an empty list", what, path);
    items = NULL;
  } else if (!json_is_string(v)) {
    return mf_error_set(MF_ERR_FORMAT, "%s: %s.id must be a string or a list of strings", what,
                        path);
  }
  e->ids = mf_malloc(n * MF_JOB_ID_MAX, "job chain ids");
  if (!e->ids) return MF_ERR_NOMEM;
  for (size_t k = 0; k < n; k++) {
    json_t *s = items ? items[k] : json_array_get(v, k);
    if (!json_is_string(s) || !valid_id(json_string_value(s)))
      return mf_error_set(MF_ERR_FORMAT, "%s: %s.id[%zu]: chain ids are strings of 1-4 letters or "
                          "digits", what, path, k);
    snprintf(e->ids[k], MF_JOB_ID_MAX, "%s", json_string_value(s));
    e->n_ids = (int64_t)k + 1;
  }
  return MF_OK;
}

static mf_status parse_mods(json_t *v, const char *what, const char *path, mf_job_entity *e) {
  if (!v) return MF_OK;
  if (!json_is_array(v))
    return mf_error_set(MF_ERR_FORMAT, "%s: %s.modifications must be a list", what, path);
  size_t n = json_array_size(v);
  if (n == 0) return MF_OK;
  e->mods = mf_malloc(n * sizeof(mf_job_mod), "job modifications");
  if (!e->mods) return MF_ERR_NOMEM;
  const char *kt = e->type == MF_MOL_PROTEIN ? "ptmType" : "modificationType";
  const char *kp = e->type == MF_MOL_PROTEIN ? "ptmPosition" : "basePosition";
  for (size_t k = 0; k < n; k++) {
    json_t *m = json_array_get(v, k);
    json_t *t = json_is_object(m) ? json_object_get(m, kt) : NULL;
    json_t *p = json_is_object(m) ? json_object_get(m, kp) : NULL;
    if (!json_is_string(t) || !valid_ccd(json_string_value(t)) || !json_is_integer(p))
      return mf_error_set(MF_ERR_FORMAT, "%s: %s.modifications[%zu] needs \"%s\" (a CCD code) and "
                          "\"%s\" (an integer)", what, path, k, kt, kp);
    int64_t pos = (int64_t)json_integer_value(p);
    if (pos < 1 || pos > e->length)
      return mf_error_set(MF_ERR_FORMAT, "%s: %s.modifications[%zu].%s = %lld is outside the "
                          "sequence (1..%lld)", what, path, k, kp, (long long)pos,
                          (long long)e->length);
    e->mods[k].position = pos;
    snprintf(e->mods[k].ccd, MF_JOB_CCD_MAX, "%s", json_string_value(t));
    e->n_mods = (int64_t)k + 1;
  }
  return MF_OK;
}

static mf_status parse_entity(json_t *item, size_t idx, const char *what, mf_job_entity *e) {
  static const char *const kinds[4] = {"protein", "rna", "dna", "ligand"};
  static const mf_moltype types[4] = {MF_MOL_PROTEIN, MF_MOL_RNA, MF_MOL_DNA, MF_MOL_LIGAND};
  if (!json_is_object(item) || json_object_size(item) != 1)
    return mf_error_set(MF_ERR_FORMAT, "%s: sequences[%zu] must be an object with one key, "
                        "protein, rna, dna or ligand", what, idx);
  const char *key = json_object_iter_key(json_object_iter(item));
  json_t *body = json_object_iter_value(json_object_iter(item));
  int kind = -1;
  for (int k = 0; k < 4; k++)
    if (!strcmp(key, kinds[k])) kind = k;
  if (kind < 0)
    return mf_error_set(MF_ERR_FORMAT, "%s: sequences[%zu]: unknown entity type \"%s\" (protein, "
                        "rna, dna or ligand)", what, idx, key);
  char path[64];
  snprintf(path, sizeof path, "sequences[%zu].%s", idx, key);
  if (!json_is_object(body)) return mf_error_set(MF_ERR_FORMAT, "%s: %s must be an object", what, path);
  e->type = types[kind];
  json_t *id = json_object_get(body, "id");
  if (!id) return mf_error_set(MF_ERR_FORMAT, "%s: %s has no \"id\"", what, path);
  mf_status st = parse_ids(id, what, path, e);
  if (st != MF_OK) return st;

  if (e->type == MF_MOL_LIGAND) {
    if (json_object_get(body, "smiles"))
      return mf_error_set(MF_ERR_FORMAT, "%s: %s.smiles: SMILES ligands are not supported (they "
                          "need RDKit); give CCD codes (\"ccd\" or \"ccdCodes\")", what, path);
    json_t *one = json_object_get(body, "ccd"), *many = json_object_get(body, "ccdCodes");
    if (!one && !many)
      return mf_error_set(MF_ERR_FORMAT, "%s: %s needs \"ccd\" or \"ccdCodes\"", what, path);
    if (one && many)
      return mf_error_set(MF_ERR_FORMAT, "%s: %s has both \"ccd\" and \"ccdCodes\"", what, path);
    size_t n = one ? 1 : json_is_array(many) ? json_array_size(many) : 0;
    if (n == 0)
      return mf_error_set(MF_ERR_FORMAT, "%s: %s.ccdCodes must be a non-empty list", what, path);
    e->ccd = mf_malloc(n * MF_JOB_CCD_MAX, "job ccd codes");
    if (!e->ccd) return MF_ERR_NOMEM;
    for (size_t k = 0; k < n; k++) {
      json_t *s = one ? one : json_array_get(many, k);
      if (!json_is_string(s) || !valid_ccd(json_string_value(s)))
        return mf_error_set(MF_ERR_FORMAT, "%s: %s.%s: a CCD code is 1-7 upper-case letters or "
                            "digits", what, path, one ? "ccd" : "ccdCodes[]");
      snprintf(e->ccd[k], MF_JOB_CCD_MAX, "%s", json_string_value(s));
      e->n_ccd = (int64_t)k + 1;
    }
    return MF_OK;
  }

  json_t *seq = json_object_get(body, "sequence");
  if (!json_is_string(seq) || json_string_length(seq) == 0)
    return mf_error_set(MF_ERR_FORMAT, "%s: %s.sequence must be a non-empty string", what, path);
  const char *s = json_string_value(seq);
  size_t n = json_string_length(seq);
  e->sequence = mf_malloc(n + 1, "job sequence");
  if (!e->sequence) return MF_ERR_NOMEM;
  for (size_t k = 0; k < n; k++) {
    char c = s[k];
    if (c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
    if (c < 'A' || c > 'Z')
      return mf_error_set(MF_ERR_FORMAT, "%s: %s.sequence: character %zu is not a letter", what,
                          path, k + 1);
    e->sequence[k] = c;
  }
  e->sequence[n] = '\0';
  e->length = (int64_t)n;
  st = parse_mods(json_object_get(body, "modifications"), what, path, e);
  if (st != MF_OK) return st;
  json_t *msa = json_object_get(body, "msa");
  if (!msa) msa = json_object_get(body, "unpairedMsaPath");
  if (msa) {
    if (!json_is_string(msa) || json_string_length(msa) == 0)
      return mf_error_set(MF_ERR_FORMAT, "%s: %s.msa must be a file path", what, path);
    e->msa_path = dup_str(json_string_value(msa), "job msa path");
    if (!e->msa_path) return MF_ERR_NOMEM;
  }
  return MF_OK;
}

static mf_status parse_job(json_t *root, const char *what, mf_job *job) {
  if (!json_is_object(root))
    return mf_error_set(MF_ERR_FORMAT, "%s: the job must be a JSON object", what);
  json_t *name = json_object_get(root, "name");
  if (!json_is_string(name) || json_string_length(name) == 0)
    return mf_error_set(MF_ERR_FORMAT, "%s: \"name\" must be a non-empty string", what);
  job->name = dup_str(json_string_value(name), "job name");
  if (!job->name) return MF_ERR_NOMEM;
  json_t *seeds = json_object_get(root, "modelSeeds");
  if (seeds) {
    if (!json_is_array(seeds))
      return mf_error_set(MF_ERR_FORMAT, "%s: \"modelSeeds\" must be a list of integers", what);
    size_t n = json_array_size(seeds);
    if (n) {
      job->seeds = mf_malloc(n * sizeof(int64_t), "job seeds");
      if (!job->seeds) return MF_ERR_NOMEM;
    }
    for (size_t k = 0; k < n; k++) {
      json_t *s = json_array_get(seeds, k);
      if (!json_is_integer(s))
        return mf_error_set(MF_ERR_FORMAT, "%s: modelSeeds[%zu] is not an integer", what, k);
      job->seeds[k] = (int64_t)json_integer_value(s);
      job->n_seeds = (int64_t)k + 1;
    }
  }
  json_t *seqs = json_object_get(root, "sequences");
  if (!json_is_array(seqs) || json_array_size(seqs) == 0)
    return mf_error_set(MF_ERR_FORMAT, "%s: \"sequences\" must be a non-empty list", what);
  size_t n = json_array_size(seqs);
  job->entities = mf_calloc(n * sizeof(mf_job_entity), "job entities");
  if (!job->entities) return MF_ERR_NOMEM;
  for (size_t k = 0; k < n; k++) {
    job->n_entities = (int64_t)k + 1; /* so that free sees what was filled */
    mf_status st = parse_entity(json_array_get(seqs, k), k, what, &job->entities[k]);
    if (st != MF_OK) return st;
  }
  /* chain ids unique over the job */
  for (int64_t a = 0; a < job->n_entities; a++)
    for (int64_t i = 0; i < job->entities[a].n_ids; i++)
      for (int64_t b = a; b < job->n_entities; b++)
        for (int64_t j = (b == a ? i + 1 : 0); j < job->entities[b].n_ids; j++)
          if (!strcmp(job->entities[a].ids[i], job->entities[b].ids[j]))
            return mf_error_set(MF_ERR_FORMAT, "%s: chain id \"%s\" is used twice (sequences[%lld] "
                                "and sequences[%lld])", what, job->entities[a].ids[i],
                                (long long)a, (long long)b);
  return MF_OK;
}

mf_status mf_job_parse(const char *text, size_t len, const char *what, mf_job *job) {
  memset(job, 0, sizeof *job);
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return mf_error_set(MF_ERR_FORMAT, "%s: JSON error at line %d, column %d: %s", what, err.line,
                        err.column, err.text);
  mf_status st = parse_job(root, what, job);
  json_decref(root);
  if (st != MF_OK) mf_job_free(job);
  return st;
}

mf_status mf_job_read(const char *path, mf_job *job) {
  memset(job, 0, sizeof *job);
  char *text = NULL;
  size_t len = 0;
  mf_status st = mf_textfile_read(path, &text, &len);
  if (st != MF_OK) return st;
  st = mf_job_parse(text, len, path, job);
  mf_free(text);
  return st;
}
