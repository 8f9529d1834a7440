/*
 * util layer: status reporting, logging, clocks, small helpers.
 * No knowledge of the domain. Every other layer may include this.
 */
#ifndef AI_UTIL_H
#define AI_UTIL_H

#include "autoinfra.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* Record a detailed message for ai_last_error() and return `status`, so the
 * first function that detects an error can write `return ai_fail(...)`. */
ai_status_t ai_fail(ai_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefix the current detailed message with more context ("rank 3: ..."). */
ai_status_t ai_fail_prefix(ai_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ai_clear_error(void);

typedef enum { AI_LOG_ERROR, AI_LOG_WARN, AI_LOG_INFO, AI_LOG_DEBUG } ai_log_level;
/* Level from AUTOINFRA_LOG (error|warn|info|debug), default warn. Messages
 * go to stderr with a "autoinfra[rank]" prefix. */
void ai_log(ai_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ai_log_set_rank(int rank);

/* Environment helpers: value or fallback when unset or empty. */
const char *ai_env_str(const char *name, const char *fallback);
/* Parse a strictly numeric variable; AI_ERR_INVALID names it when malformed. */
ai_status_t ai_env_double(const char *name, double fallback, double *out);
ai_status_t ai_env_int(const char *name, int fallback, int *out);

/* ai_parse_size (sizes: "64K", "4MiB", ...) is public: autoinfra.h. */
/* Strict integer / double parsing of a whole string. */
ai_status_t ai_parse_long(const char *text, long *out);
ai_status_t ai_parse_double(const char *text, double *out);

/* Sleep helpers for polling loops. */
void ai_sleep_us(long us);

/* 64-bit FNV-1a over bytes, for fingerprints and names (not security). */
uint64_t ai_hash64(const void *data, size_t n, uint64_t seed);

/* Deterministic RNG (splitmix64 seeding xoshiro256**). */
typedef struct ai_rng { uint64_t s[4]; } ai_rng;
void ai_rng_seed(ai_rng *rng, uint64_t seed);
uint64_t ai_rng_next(ai_rng *rng);
double ai_rng_uniform(ai_rng *rng); /* [0, 1) */

#define AI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define AI_MAX(a, b) ((a) > (b) ? (a) : (b))
#define AI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
