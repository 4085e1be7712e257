/* cif.h — a STAR/CIF 1.1 reader for mmCIF files (plain or gzip): data blocks, single
 * items, loops, quoted and ';' text-field values, '?' and '.' as missing values,
 * comments. The file is read whole into memory and tokenised in place: a value is an
 * (offset, length) span into that buffer, so reading costs one pass and no allocation
 * per token. Look-up is by tag ("_atom_site.Cartn_x", case-insensitive) within a block.
 *
 * Not here: what the items mean (that is structure.c for mmCIF, the CCD reader for
 * components), CIF 2.0 lists/tables, save frames (rejected with an error), writing CIF.
 *
 * Errors: mf_cif_read / mf_cif_parse return MF_ERR_IO (cannot read) or MF_ERR_FORMAT
 * (empty file, binary data, truncated gzip stream, unterminated quote or text field, a
 * tag without a value, a loop whose value count is not a multiple of its tag count),
 * with mf_error_message() naming the file, the line and what was expected. */
#ifndef MF_DATA_CIF_H
#define MF_DATA_CIF_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mf_cif_doc mf_cif_doc;

/* A value: a span into the document's buffer, NOT NUL-terminated. */
typedef struct {
  const char *p;
  int64_t len;
} mf_cif_str;

typedef enum {
  MF_CIF_ABSENT = 0,    /* no such item / row out of range */
  MF_CIF_PLAIN,         /* unquoted value */
  MF_CIF_QUOTED,        /* '...' or "..." */
  MF_CIF_TEXT,          /* ;...; text field (the newline before the closing ';' excluded) */
  MF_CIF_UNKNOWN,       /* unquoted ?  */
  MF_CIF_INAPPLICABLE   /* unquoted .  */
} mf_cif_kind;

/* One column: the values of one tag in one block. A single item is a column of one row.
 * n == 0 when the tag was not found. */
typedef struct {
  const mf_cif_doc *doc;
  int64_t first;  /* index of row 0's value in the document's value table */
  int64_t n;      /* rows */
  int32_t stride; /* columns of its loop (1 for a single item) */
  int32_t item;   /* index of the item in the document, -1 when absent */
} mf_cif_col;

/* Reads a file, gzip (detected by its magic bytes, not its name) or plain. */
mf_status mf_cif_read(const char *path, mf_cif_doc **out);
/* Parses a copy of data[0, n); `name` is used in error messages. */
mf_status mf_cif_parse(const void *data, size_t n, const char *name, mf_cif_doc **out);
void mf_cif_free(mf_cif_doc *doc);

const char *mf_cif_name(const mf_cif_doc *doc); /* file name given at read/parse */
size_t mf_cif_bytes(const mf_cif_doc *doc);     /* size of the (decompressed) text */
int64_t mf_cif_n_values(const mf_cif_doc *doc);

/* Data blocks, in file order. The name excludes "data_". */
int32_t mf_cif_n_blocks(const mf_cif_doc *doc);
mf_cif_str mf_cif_block_name(const mf_cif_doc *doc, int32_t block);
int32_t mf_cif_find_block(const mf_cif_doc *doc, const char *name); /* -1 if none */

/* Items of a block: [first, first + count) indexes mf_cif_item_*. */
void mf_cif_block_items(const mf_cif_doc *doc, int32_t block, int32_t *first, int32_t *count);
mf_cif_str mf_cif_item_tag(const mf_cif_doc *doc, int32_t item);
mf_cif_col mf_cif_item_col(const mf_cif_doc *doc, int32_t item);

/* Column of `tag` in `block` (case-insensitive); returns 1 when found, 0 (col->n = 0) if not. */
int mf_cif_find(const mf_cif_doc *doc, int32_t block, const char *tag, mf_cif_col *col);
/* Rows of a category ("_atom_site"): rows of its first item found, -1 if no item. */
int64_t mf_cif_category_rows(const mf_cif_doc *doc, int32_t block, const char *category);

mf_cif_str mf_cif_value(const mf_cif_col *col, int64_t row); /* {NULL, 0} when absent */
mf_cif_kind mf_cif_value_kind(const mf_cif_col *col, int64_t row);
/* 1 when the value is absent, unquoted '?' or unquoted '.'. */
int mf_cif_is_null(const mf_cif_col *col, int64_t row);
/* Line of the value in the file (1-based), for messages; 0 when absent. */
int64_t mf_cif_line(const mf_cif_col *col, int64_t row);

/* Numbers. Parse a whole value as a number; a trailing standard uncertainty "1.23(4)"
 * is accepted and ignored. Return 1 on success, 0 if the value is not a number. */
int mf_cif_parse_double(mf_cif_str s, double *out);
int mf_cif_parse_int(mf_cif_str s, int64_t *out);
/* Column helpers: null values ('?', '.', absent) give `dflt`; anything else that is not a
 * number is MF_ERR_FORMAT with file, line and tag in the message. */
mf_status mf_cif_get_double(const mf_cif_col *col, int64_t row, double dflt, double *out);
mf_status mf_cif_get_int(const mf_cif_col *col, int64_t row, int64_t dflt, int64_t *out);

/* Strings. */
int mf_cif_str_eq(mf_cif_str s, const char *lit);     /* exact */
int mf_cif_str_ieq(mf_cif_str s, const char *lit);    /* ASCII case-insensitive */
int mf_cif_str_same(mf_cif_str a, mf_cif_str b);      /* exact */
/* Copies into dst (cap bytes with the NUL); returns 0 when it did not fit (dst truncated). */
int mf_cif_str_copy(mf_cif_str s, char *dst, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
