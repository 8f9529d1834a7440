/*
 * tune layer internals: the online learner behind `auto` (learn.c) and the
 * SQLite knowledge base it remembers into (kb.c). docs/learner.md has the
 * design; the public side is the "learner and knowledge base" section of
 * autoinfra.h.
 */
#ifndef AI_TUNE_H
#define AI_TUNE_H

#include "comm/comm.h"

#define TUNE_ALGO_MAX 32

/* One arm's knowledge: a normal posterior on log(seconds) of a call at the
 * bucket's lower edge. */
typedef struct tune_arm_stat {
    char algo[TUNE_ALGO_MAX];
    size_t chunk;
    int channels;
    long n;      /* measured calls (slowest rank's time each) */
    double m, v; /* posterior mean and variance of log seconds */
    /* The learner's working state (not stored): prior, and decayed sums
     * of the observations (weight, sum of y, sum of y^2). */
    double m0, v0, w, sy, syy;
} tune_arm_stat;

/* Bucket-level bookkeeping kept with the arms. */
typedef struct tune_bucket_info {
    long explored;    /* exploratory calls spent */
    double explore_s; /* their total seconds */
    int settled;      /* learning finished: a later job explores nothing */
} tune_bucket_info;

/* Open a knowledge base for the learner's writer (rank 0). */
ai_status_t kb_open_writer(const char *path, ai_kb **out);
/* What the KB knows of one bucket: up to max arms with samples. */
ai_status_t kb_load_bucket(ai_kb *kb, const char *fp, ai_coll coll, size_t bytes,
                           tune_arm_stat *arms, int max, int *n, tune_bucket_info *info);
/* One transaction: the fingerprint row, the bucket's sampled arms and
 * bookkeeping, and (arm >= 0) the measurement that changed them. */
ai_status_t kb_save_bucket(ai_kb *kb, const char *fp, int nranks, int nhosts, const char *desc,
                           ai_coll coll, size_t bytes, const tune_arm_stat *arms, int n,
                           const tune_bucket_info *info, int arm, double seconds,
                           const char *phase);

/* Fingerprints by measured host rates (bytes/s), for one communicator
 * shape (hash of ranks and placement): record a fingerprint's rates, and
 * find the known fingerprint of that shape whose every host rate is within
 * tol (log2) of bps, the closest ("" if none). */
ai_status_t kb_note_rates(ai_kb *kb, const char *fp, const char *shape, int nhosts,
                          const double *bps);
ai_status_t kb_match_rates(ai_kb *kb, const char *shape, int nhosts, const double *bps,
                           double tol, char out[17]);

/* Public-API views of a posterior. */
double tune_arm_mean_us(const tune_arm_stat *a);
double tune_arm_std_us(const tune_arm_stat *a);
/* P(arm `best` is faster than every other arm, measured or not),
 * independence assumed between arms. */
double tune_confidence(const tune_arm_stat *arms, int n, int best);

#endif
