/* log.h — leveled logging with a rank prefix, wall-clock timers, and a progress
 * reporter (items/s and ETA) for long jobs. Logging goes to stderr. */
#ifndef MF_LOG_H
#define MF_LOG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MF_LOG_DEBUG = 0, MF_LOG_INFO, MF_LOG_WARN, MF_LOG_ERROR, MF_LOG_OFF } mf_log_level;

void mf_log_set_level(mf_log_level level);
mf_log_level mf_log_get_level(void);
/* Parses "debug|info|warn|error|off"; returns -1 if unknown. */
int mf_log_level_parse(const char *s);
void mf_log_set_rank(int rank); /* -1: single process, no prefix */
int mf_log_get_rank(void);
void mf_log(mf_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define MF_DEBUG(...) mf_log(MF_LOG_DEBUG, __VA_ARGS__)
#define MF_INFO(...) mf_log(MF_LOG_INFO, __VA_ARGS__)
#define MF_WARN(...) mf_log(MF_LOG_WARN, __VA_ARGS__)
#define MF_ERROR(...) mf_log(MF_LOG_ERROR, __VA_ARGS__)

/* Monotonic wall clock in seconds. */
double mf_time_now(void);

/* Accumulating timer: start/stop pairs add to total. */
typedef struct {
  double start, total;
  int64_t count;
} mf_timer;
void mf_timer_start(mf_timer *t);
double mf_timer_stop(mf_timer *t); /* returns the seconds of this interval */

/* Progress of a job of `total` items: prints at most every `interval` seconds
 * "<what>: done/total (pct), items/s, ETA", and a summary at the end. */
typedef struct {
  const char *what;
  int64_t total, done;
  double t0, last_print, interval;
} mf_progress;
void mf_progress_init(mf_progress *p, const char *what, int64_t total);
void mf_progress_add(mf_progress *p, int64_t n);
void mf_progress_finish(mf_progress *p);

#ifdef __cplusplus
}
#endif

#endif
