/*
 * autoinfra introspection: UNSTABLE. Declarations here may change or go
 * away in any release, without notice.
 *
 * What benchmarks, tests and the autoinfra command need beside the public
 * API (autoinfra.h): the learner's choice and arm space for oracle sweeps
 * (autoinfra bench --oracle, learn-eval) and the torch backend's
 * pg.choice(); element access for test patterns; fault injection for
 * bench/chaos; the size grammar of the CLI's flags. A training program
 * needs none of it: `auto` applies the learner's choice by itself.
 */
#ifndef AUTOINFRA_INTROSPECT_H
#define AUTOINFRA_INTROSPECT_H

#include "autoinfra.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------- test patterns (comm/kernel/reduce_local.c) */

/* Element i of a buffer of type dt, written from / read as a double (for
 * test patterns and checks: benchmarks, bench/chaos). */
void ai_elem_set(void *buf, ai_dtype dt, size_t i, double v);
double ai_elem_get(const void *buf, ai_dtype dt, size_t i);

/* ------------------------------------------------- sizes (util/misc.c) */

/* A size: the one grammar of every size the CLI and the environment
 * (AUTOINFRA_TUNE_MIN, AUTOINFRA_PROBE_BYTES, ...) accept:
 * digits, then an optional unit in any case, B; K, KB or KiB; M, MB or
 * MiB; G, GB or GiB; T, TB or TiB; every unit a power of 1024 ("64KB" =
 * "64K" = "64KiB" = 65536). No sign, no spaces, no fractions.
 * AI_ERR_INVALID (ai_last_error says why) when malformed or too large. */
ai_status_t ai_parse_size(const char *text, size_t *out);

/* ------------------------------------ the learner (tune/learn.c)
 * What the learner would run and which arms it weighs, for oracle sweeps
 * (autoinfra bench --oracle, learn-eval) and tests. A training program
 * does not need these: `auto` applies the same choice by itself. */

/* The arm `auto` runs for the next call of this collective and size, the
 * same on every rank: once the learner has settled (after at most 32 calls
 * of a size bucket), its best arm; before, possibly an experiment; before
 * the learner has seen the size (or below AUTOINFRA_TUNE_MIN), the model's
 * or the fixed rule's choice. explored and explore_s count this job's
 * exploratory calls, on rank 0 (0 elsewhere). */
typedef struct ai_choice {
    char algo[32];
    size_t chunk_bytes; /* 0: the algorithm's default */
    int channels;       /* TCP connections used */
    const char *source; /* "learned", "kb" (warm start), "model", "rule" */
    int explored;       /* exploratory calls spent in this bucket */
    double explore_s;   /* seconds they took beyond the best arm's mean */
    int settled;        /* 1: the learner's settled choice for the bucket (the
                         * same on every rank), not an experiment */
} ai_choice;
ai_status_t ai_comm_choice(const ai_comm *comm, ai_coll coll, size_t bytes, ai_choice *out);
/* The arms the learner weighs for calls of this collective and size (the
 * same list on every rank): up to max of them in out (names are static
 * strings); returns how many there are. For sweeps and oracles. */
int ai_comm_arms(const ai_comm *comm, ai_coll coll, size_t bytes, ai_algo_opts *out, int max);
/* Fault injection for bench/chaos (docs/chaos.md), off until called: the
 * next message header this process sends, on any communicator, has byte
 * (v % 16) XORed with (v >> 8) & 0xff (0xff when that is 0), so that the
 * receiver's frame checks must catch it. Async-signal-safe (one atomic
 * store): a signal handler may call it. */
void ai_fault_corrupt_next_frame(unsigned v);

#ifdef __cplusplus
}
#endif
#endif /* AUTOINFRA_INTROSPECT_H */
