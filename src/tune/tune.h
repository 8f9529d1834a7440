/*
 * tune layer internals: the online learner behind `auto` (learn.c) and the
 * SQLite knowledge base it remembers into (kb*.c). docs/learner.md has the
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
    /* The arm a job last exploited here (algo "" if none is logged). */
    char algo[TUNE_ALGO_MAX];
    size_t chunk;
    int channels;
} tune_bucket_info;

/* Attach the learner behind `auto` to a new communicator (learn.c):
 * installs c->tuner unless AUTOINFRA_TUNE=0; reads the AUTOINFRA_TUNE_*
 * settings and fails on a bad one, leaving c as it was. kb_path: the KB
 * rank 0 writes (ai_comm_config.kb_path); NULL: AUTOINFRA_KB, else the
 * default path, settled here once. */
ai_status_t tune_learner_attach(ai_comm *c, const char *kb_path);
/* The KB path a communicator's learner settled on; NULL: none. */
const char *tune_kb_path(const ai_comm *c);
/* A public communicator from comm's (api/communicator.c): when st is
 * AI_OK, the learner attached to c and c into *out; c destroyed if that
 * fails. On a failed st, st (c is not looked at). */
ai_status_t tune_with_learner(ai_status_t st, ai_comm *c, const char *kb_path, ai_comm **out);

/* Open a knowledge base for the learner's writer (rank 0). It waits at
 * most busy_ms (kb_open_writer: not at all) for a lock another process
 * holds (the learner opens it inside a collective). A lock that blocks
 * even reading fails with AI_ERR_TIMEOUT (the caller may try again
 * later); one that blocks writing only leaves the set-up to a later write.
 * A KB the process cannot write (permissions, a full disk) is opened
 * read-only. */
ai_status_t kb_open_writer(const char *path, ai_kb **out);
ai_status_t kb_open_writer_wait(const char *path, int busy_ms, ai_kb **out);
/* ai_kb_default_path on the settings as they are (no new read). */
ai_status_t kb_default_path(char *buf, size_t len);
const char *kb_path(const ai_kb *kb);
/* Opened read-only: nothing will be written; kb_readonly_why says why. */
int kb_is_readonly(const ai_kb *kb);
const char *kb_readonly_why(const ai_kb *kb);
/* The last write (or the set-up) found the KB locked by another process. */
int kb_is_busy(const ai_kb *kb);
/* How long later statements wait for a lock held elsewhere. */
void kb_set_wait(ai_kb *kb, int busy_ms);
/* What the KB knows of one bucket: up to max arms with samples. */
ai_status_t kb_load_bucket(ai_kb *kb, const char *fp, ai_coll coll, size_t bytes,
                           tune_arm_stat *arms, int max, int *n, tune_bucket_info *info);
/* The learner's writes, one transaction per batch: kb_begin (which also
 * records the fingerprint), any number of kb_put_bucket (a bucket's sampled
 * arms and bookkeeping) and kb_put_measurement (one agreed window time,
 * `when` in seconds since the epoch), then kb_end, which commits when st is
 * AI_OK and otherwise rolls back and returns st. */
ai_status_t kb_begin(ai_kb *kb, const char *fp, int nranks, int nhosts, const char *desc);
ai_status_t kb_put_bucket(ai_kb *kb, const char *fp, ai_coll coll, size_t bytes,
                          const tune_arm_stat *arms, int n, const tune_bucket_info *info);
ai_status_t kb_put_measurement(ai_kb *kb, const char *fp, ai_coll coll, size_t bytes,
                               const tune_arm_stat *arm, double seconds, const char *phase,
                               double when);
/* Inside kb_begin..kb_end: what `auto` chose in a bucket (reason
 * "settled", "switched" or "warm"), its confidence and the runner-up
 * (NULL: none measured), for `autoinfra kb log`. */
ai_status_t kb_put_choice(ai_kb *kb, const char *fp, ai_coll coll, size_t bytes,
                          const tune_arm_stat *chosen, const tune_arm_stat *runner,
                          double confidence, const char *reason, double when);
ai_status_t kb_end(ai_kb *kb, ai_status_t st);

/* Fingerprints by measured host rates (bytes/s), for one communicator
 * shape (hash of ranks and placement): record a fingerprint's rates, and
 * find the known fingerprint of that shape whose every host rate is within
 * tol (log2) of bps, the closest ("" if none). */
ai_status_t kb_note_rates(ai_kb *kb, const char *fp, const char *shape, int nhosts,
                          const double *bps);
ai_status_t kb_match_rates(ai_kb *kb, const char *shape, int nhosts, const double *bps,
                           double tol, char out[17]);

/* What the knowledge base's files share: kb.c (open and ownership, the
 * schema), kb_arms.c (the learner's arms, buckets, choices and rates),
 * kb_json.c (the JSON exchange), kb_profile.c (compute profiles). */
struct sqlite3;
struct sqlite3_stmt;
struct ai_kb {
    struct sqlite3 *db;
    char path[1024];
    int readonly;   /* opened read-only: nothing is written */
    int need_setup; /* schema, stamp or WAL still to be written (was busy) */
    int busy;       /* the last write found the KB locked by another process */
    int setup_rc;   /* what the last kb_setup's SQLite call returned */
    char why_ro[256]; /* readonly: why */
};
/* An AI_ERR_IO naming the file, what was being done and SQLite's message. */
ai_status_t kb_err(const ai_kb *kb, const char *what);
/* Statements without result rows; SQLite's message on failure. */
ai_status_t kb_exec(ai_kb *kb, const char *sql);
/* The first column of a query's first row; 0 when there is none. */
int kb_pragma_int(ai_kb *kb, const char *sql, int *out);
/* A SQLite code of a lock held by another connection. */
int kb_is_busy_rc(int rc);
/* Create the schema, stamp the file as ours and switch it to WAL; all
 * idempotent. A lock held elsewhere leaves it for the next write. */
ai_status_t kb_setup(ai_kb *kb);
/* Run a write statement to completion and release it. */
ai_status_t kb_step_done(ai_kb *kb, struct sqlite3_stmt *q, const char *what);
/* Insert or update a fingerprint's row, an arm's posterior (kb_arms.c). */
ai_status_t kb_put_fingerprint(ai_kb *kb, const char *fp, int nranks, int nhosts,
                               const char *desc);
ai_status_t kb_put_arm(ai_kb *kb, const char *fp, const char *coll, size_t bytes,
                       const tune_arm_stat *a);

/* ------------------------------------------------------------ bandit.c
 * The learner's statistics for one bucket, apart from ranks and the
 * knowledge base: per arm a normal posterior on log call time, from a prior
 * (the network model's prediction, what the KB knew, or nothing) and the
 * agreed measurements; top-two Thompson sampling over them. */

#define TUNE_MAX_ARMS 48
#define TUNE_SAMPLES 16 /* an arm's robust location: its last this many windows */

typedef struct tune_bandit {
    int narms;
    tune_arm_stat arm[TUNE_MAX_ARMS];
    /* Where an arm's prior came from; model and KB priors each have their
     * shared offset. Blind: none yet, the mean is unset until the arm is
     * measured, whose first measurement then stands in (seen). */
    enum { PRIOR_BLIND, PRIOR_SEEN, PRIOR_MODEL, PRIOR_KB } source[TUNE_MAX_ARMS];
    double noise2; /* pooled variance of one call's log time */
    double bias;   /* the model's log error shared by the arms */
    double level;  /* this job's log offset from the KB, shared by known arms */
    unsigned char high[TUNE_MAX_ARMS]; /* the arm's last settled window was
                                        * far above its mean */
    /* Each arm's last TUNE_SAMPLES observations (log seconds, calls), a
     * ring: their median, weighted by calls, is where the arm's evidence
     * sits (bandit_update), and their median absolute deviation its
     * noise. nsamples[i] > 0 exactly when arm[i].w > 0. */
    float sample_y[TUNE_MAX_ARMS][TUNE_SAMPLES];
    unsigned short sample_calls[TUNE_MAX_ARMS][TUNE_SAMPLES];
    unsigned char nsamples[TUNE_MAX_ARMS], sample_at[TUNE_MAX_ARMS];
    /* The same posteriors by the decayed mean and variance of the
     * observations, spikes and all: what bandit_drifted tests a settled
     * window against (a drift must stand out from all of the noise, not
     * from its bulk only). */
    double mean_m[TUNE_MAX_ARMS], mean_v[TUNE_MAX_ARMS], mean_noise2;
    ai_rng rng;    /* the Thompson draws */
} tune_bandit;

/* Arm i's prior: the model's predicted seconds (not finite: no prediction,
 * a blind arm), `variant` for chunk/channel variants the model ignores. */
void bandit_prior(tune_bandit *b, int i, double seconds, int variant);
/* Arm i's prior is what an earlier job learned (the KB). */
void bandit_prior_known(tune_bandit *b, int i, const tune_arm_stat *known);
/* Recompute every posterior from the priors and the observations. */
void bandit_update(tune_bandit *b);
/* Arm i's robust location: the median, weighted by calls, of its last
 * TUNE_SAMPLES observations (log seconds); NAN if it has none. */
double bandit_location(const tune_bandit *b, int i);
/* Fold one observation into arm i: y, the log seconds of the mean of
 * `calls` calls. */
void bandit_observe(tune_bandit *b, int i, double y, int calls);
/* y capped at a few sd of noise above what arm i measured so far (a spike
 * counts less); for exploratory observations. */
double bandit_cap(const tune_bandit *b, int i, double y, int calls);
/* A settled window into arm i: one spike counts capped, a lasting change
 * in full from its second window. */
void bandit_observe_settled(tune_bandit *b, int i, double y, int calls);
/* Would bandit_observe_settled take y as a spike now (count it capped)? */
int bandit_settled_spike(const tune_bandit *b, int i, double y, int calls);
/* Is y (log seconds, the mean of a window of arm i's calls) more than
 * `limit` (log) and 3 sd of the noise of one observation, spikes
 * included, away from what arm i measured so far? The statistical half
 * of a drift strike. */
int bandit_drifted(const tune_bandit *b, int i, double y, double limit);
/* The measured arm with the lowest posterior mean (-1: none measured); the
 * arm with the lowest prior mean. */
int bandit_best_measured(const tune_bandit *b);
int bandit_best_prior(const tune_bandit *b);
/* `best` has been measured a few times and is the fastest with high
 * probability. */
int bandit_confident(const tune_bandit *b, int best);
/* The arm to run next while exploring: top-two Thompson sampling among the
 * arms expected at most `bound` times slower than the best measured one. */
int bandit_next(tune_bandit *b, double bound);

/* The measured arm most likely to be `gain` (log) faster than `best`, if
 * that chance is at least p; -1: none. The near tie worth refining. */
int bandit_rival(const tune_bandit *b, int best, double gain, double p);

/* Public-API views of a posterior. */
double tune_arm_mean_us(const tune_arm_stat *a);
double tune_arm_std_us(const tune_arm_stat *a);
/* P(arm `best` is faster than every other arm, measured or not),
 * independence assumed between arms. */
double tune_confidence(const tune_arm_stat *arms, int n, int best);

#endif
