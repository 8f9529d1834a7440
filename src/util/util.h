/*
 * util layer: status reporting, logging, clocks, small helpers.
 * No knowledge of the domain. Every other layer may include this.
 */
#ifndef AI_UTIL_H
#define AI_UTIL_H

#include "autoinfra.h"
#include "autoinfra/introspect.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* Record a detailed message for ai_last_error() and return `status`, so the
 * first function that detects an error can write `return util_fail(...)`. */
ai_status_t util_fail(ai_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefix the current detailed message with more context ("rank 3: ..."). */
ai_status_t util_fail_prefix(ai_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void util_clear_error(void);

typedef enum { AI_LOG_ERROR, AI_LOG_WARN, AI_LOG_INFO, AI_LOG_DEBUG } ai_log_level;
/* Level from AUTOINFRA_LOG (error|warn|info|debug), default warn. Messages
 * go to stderr with a "autoinfra[rank]" prefix. */
void util_log(ai_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void util_log_set_rank(int rank);

/* The table of settings (param.c, docs/runtime.md "Settings"): every
 * AUTOINFRA_* variable, declared once with its type, default, range and
 * doc. Layers read settings only through these, never getenv. */
typedef enum util_param_id {
    UTIL_PARAM_LOG, UTIL_PARAM_RANK, UTIL_PARAM_SIZE, UTIL_PARAM_ADDR, UTIL_PARAM_TOKEN,
    UTIL_PARAM_HOST, UTIL_PARAM_JOIN_ADDR, UTIL_PARAM_JOIN_DOOR, UTIL_PARAM_TIMEOUT, UTIL_PARAM_CHANNELS,
    UTIL_PARAM_NO_SHM, UTIL_PARAM_SPIN_US, UTIL_PARAM_YIELD_US, UTIL_PARAM_SHM_RING, UTIL_PARAM_SHM_NT,
    UTIL_PARAM_PROBE_BYTES, UTIL_PARAM_TUNE, UTIL_PARAM_TUNE_MIN, UTIL_PARAM_TUNE_BUDGET,
    UTIL_PARAM_TUNE_REFINE, UTIL_PARAM_TUNE_BOUND, UTIL_PARAM_TUNE_SAVE_S, UTIL_PARAM_KB,
    UTIL_PARAM_COUNT
} util_param_id;

typedef enum util_param_type {
    UTIL_PARAM_T_STR, UTIL_PARAM_T_INT, UTIL_PARAM_T_DOUBLE, UTIL_PARAM_T_SIZE, UTIL_PARAM_T_CHOICE
} util_param_type;

typedef struct util_param_info {
    const char *name;
    util_param_type type;
    const char *def;            /* as the environment would spell it; NULL: none */
    double lo, hi;              /* accepted range (int, double, size) */
    size_t step;                /* size: a multiple of this (0: any) */
    const char *const *choices; /* choice: the names, value = index */
    int nchoices;
    const char *doc;
} util_param_info;

const util_param_info *util_param_info_of(util_param_id id);
/* The value in effect: the environment's, else the default. A value the
 * table refuses gives AI_ERR_INVALID naming the variable, its text and
 * what is accepted (every call, at whichever layer asks). int serves
 * int and choice settings. */
ai_status_t util_param_int(util_param_id id, int *out);
ai_status_t util_param_double(util_param_id id, double *out);
ai_status_t util_param_size(util_param_id id, size_t *out);
/* The value, or fallback when the environment's is refused; no error
 * recorded (for the logger, whose messages may be the last error). */
int util_param_int_or(util_param_id id, int fallback);
/* A string setting's value, NULL when unset; valid for the process's life. */
const char *util_param_str(util_param_id id);
/* The table's default of a number, size or choice (0 when it has none). */
double util_param_default(util_param_id id);
/* 1 when the value came from the environment. */
int util_param_is_set(util_param_id id);
/* Read the environment again (public calls that start from configuration
 * do, once each: communicator creation, join, ai_kb_default_path). */
void util_param_refresh(void);
/* A copy of s kept for the life of the process (one per distinct text),
 * for configuration strings handed to callers; NULL when out of memory. */
const char *util_param_intern(const char *s);
/* A variable the launcher or the system sets (OMPI_COMM_WORLD_RANK,
 * SLURM_JOB_ID, HOME, ...), from the short list param.c declares; NULL
 * when unset or empty. */
const char *util_env_outside(const char *name);

/* The level AUTOINFRA_LOG asks for; AI_ERR_INVALID for an unknown name. */
ai_status_t util_log_level_env(ai_log_level *out);

/* The name of names[0..n) nearest to word by edit distance, if it is
 * close enough to be a likely misspelling (at most a third of the word's
 * letters, at least 1, differ); NULL otherwise. */
const char *util_nearest_name(const char *word, const char *const *names, int n);

/* ai_parse_size (sizes: "64K", "4MiB", ...): autoinfra/introspect.h. */
/* Strict integer / double parsing of a whole string. */
ai_status_t util_parse_long(const char *text, long *out);
ai_status_t util_parse_double(const char *text, double *out);
/* The first host of a Slurm hostlist ("gpu[003-010,012],login1" ->
 * "gpu003"): AI_ERR_INVALID naming the list when it is malformed or the
 * name does not fit in `cap` bytes. */
ai_status_t util_hostlist_first(const char *list, char *out, size_t cap);

/* Sleep helpers for polling loops. */
void util_sleep_us(long us);

/* 64-bit FNV-1a over bytes, for fingerprints and names (not security). */
uint64_t util_hash64(const void *data, size_t n, uint64_t seed);

/* Keys, nonces and MACs for the job token's challenge-response
 * (libsodium; crypto.c). Every function initialises the library once,
 * thread-safely, on first use; util_crypto_init says whether that worked. */
#define AI_KEY_BYTES 32
#define AI_MAC_BYTES 32
#define AI_NONCE_BYTES 16
ai_status_t util_crypto_init(void);
/* n bytes from the system's cryptographic random source. */
void util_random_bytes(void *buf, size_t n);
/* out = BLAKE2b-256 keyed by parent (NULL: unkeyed) over label (with its
 * NUL) then data[n]: a key that is the parent's only for this label and
 * data, and tells nothing of the parent. */
void util_key_derive(unsigned char out[AI_KEY_BYTES], const unsigned char *parent, const char *label,
                     const void *data, size_t n);
/* HMAC-SHA-512-256 under key over the concatenation of parts. */
typedef struct ai_mac_part {
    const void *p;
    size_t n;
} ai_mac_part;
void util_mac(unsigned char out[AI_MAC_BYTES], const unsigned char key[AI_KEY_BYTES],
              const ai_mac_part *parts, int nparts);
/* 1 when mac is the MAC of parts under key; in time independent of
 * where they differ. */
int util_mac_verify(const unsigned char mac[AI_MAC_BYTES], const unsigned char key[AI_KEY_BYTES],
                    const ai_mac_part *parts, int nparts);
/* Overwrite n bytes with zeros in a way the compiler keeps (keys). */
void util_wipe(void *p, size_t n);

/* Deterministic RNG (splitmix64 seeding xoshiro256**). */
typedef struct ai_rng { uint64_t s[4]; } ai_rng;
void util_rng_seed(ai_rng *rng, uint64_t seed);
uint64_t util_rng_next(ai_rng *rng);
double util_rng_uniform(ai_rng *rng); /* [0, 1) */

#define AI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define AI_MAX(a, b) ((a) > (b) ? (a) : (b))
#define AI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
