/*
 * The learner behind `auto`: for every (collective, power-of-two size
 * bucket, communicator fingerprint) it picks an arm (algorithm x chunk x
 * channels) by Thompson sampling on a normal model of log call time.
 *
 * Why Thompson sampling: the network model gives every arm a prior, so
 * arms the model rates far slower are seldom tried, arms it cannot tell
 * apart are tried in proportion to the chance that they are best, and
 * exploration stops by itself once one arm is clearly fastest. The
 * statistics are in bandit.c; this file runs them across the ranks.
 *
 * Agreement: a collective deadlocks if ranks disagree on the algorithm, so
 * rank 0 alone decides and every rank follows. At the end of each window
 * of calls all ranks run one 64-byte MAX allreduce carrying each rank's
 * mean time over the window (the max is the slowest rank's, the time that
 * counts), each rank's vote for a short next window (its own time looks
 * like a drift strike), each rank's wait for a CPU (window_load), and
 * rank 0's orders: the arm for the next calls,
 * the incumbent (the arm a settled bucket exploits), what the agreement
 * costs against a call, and whether to re-measure the links.
 * Rank 0 decides the next arm from what it knows plus its own time of this
 * window (the agreed time arrives with the same message).
 *
 * Windows: 1 call while exploring. Once settled, long enough for the
 * agreement to cost at most TUNE_AGREE_SHARE of the window, a share halved
 * after every quiet window (no drift strike) down to an eighth; when any
 * rank's own time looks like a strike, the next window is the shortest. On T1 at
 * 64-256 KiB the agreement (50-230 us with the wait for the slowest rank)
 * against 1.6-6.4 ms calls costs `auto` 0.4-1% at a fixed share; halved,
 * a quiet bucket pays about 0.2%. Drift shows in the first long window after it, and the
 * second strike comes 4 calls later, the order to measure the links 4
 * calls after that.
 *
 * Refining: 32 calls do not tell every near tie apart at a few percent of
 * noise, so the job that learned a bucket goes on, once settled, to run
 * every other window a measured arm that may still be 2% faster than the
 * incumbent (bandit_rival), for at most AUTOINFRA_TUNE_REFINE calls; what
 * it finds is what later jobs start from, and they explore nothing.
 *
 * Drift: once settled, an agreed window time more than TUNE_DRIFT (log;
 * TUNE_DRIFT_HOST on one host) away from the arm's posterior, twice
 * running, means the cluster changed: the links are measured again, the
 * fingerprint recomputed (a changed link rate gives another fingerprint,
 * whose knowledge may already be in the KB) and the bucket learned again.
 *
 * Rank 0 writes every agreed measurement and the posteriors to the
 * knowledge base, batched (kb_flush); a later job with the same
 * fingerprint starts warm.
 */
#include "comm/algo_registry.h"
#include "comm/select/probe.h"
#include "comm/select/select.h"
#include "tune/tune.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define TUNE_BUCKETS 64
#define TUNE_WINDOW 4          /* calls per agreement once settled, at least */
#define TUNE_WINDOW_MAX 32     /* ... and at most: drift shows within 2 */
#define TUNE_AGREE_SHARE 0.015 /* settled windows are long enough for the
                                * agreement to cost at most this share */
#define TUNE_QUIET_MAX 3       /* ... halved per quiet window, this often */
#define TUNE_HORIZON 32        /* calls after which a bucket settles anyway */
#define TUNE_DRIFT 0.223     /* log: a 1.25x change, across hosts */
#define TUNE_DRIFT_HOST 0.4  /* log: a 1.5x change, on one host */
#define TUNE_SWITCH 0.02     /* log: a settled bucket leaves its arm only
                              * for one expected this much faster */
#define TUNE_REFINE_GAIN 0.02 /* refining runs an arm while P(it is this
                               * much faster, log) >= TUNE_REFINE_P */
#define TUNE_REFINE_P 0.1
#define TUNE_DRIFT_STRIKES 2
#define TUNE_LOAD_MEMORY 16   /* calls: the CPU wait's average decays as the
                               * posteriors' evidence (bandit.c) */
#define TUNE_DRIFT_MIN_S 0.04 /* ... whose windows last this long together */
#define TUNE_TURN_RISE 0.095 /* log: more load makes each turn on a CPU
                              * wait at least 1.1x longer (a drift left it
                              * 0.73-1.3x under a load of 20-30) */
#define TUNE_SHARE_HIGH 0.7 /* ... and asked only where the CPU wait's share
                             * of a call is this high: below, a drift
                             * lowers the share (0.75-0.8 to 0.1-0.55) */
#define TUNE_LOAD_PART 0.3   /* the CPU wait's change matches at least this
                              * part of the call's */
#define TUNE_SHARE_TOL 0.1    /* the CPU wait's share of a call is this noisy
                               * (0.75-0.84 under a steady load) */
#define TUNE_SAVE_WINDOWS 1024 /* rank 0 writes the KB when this many
                                * windows wait, or every AUTOINFRA_TUNE_SAVE_S */
#define TUNE_KB_CLOSE_MS 5000 /* at release, a busy KB is waited for this long */
#define TUNE_FIRST_CALLS 3    /* a bucket's first calls, not learned from */
#define TUNE_THIN 8           /* a rival measured in fewer calls (a third of an
                               * exploration's budget) may have been timed in
                               * one passing state (rivals_stale) */
#define TUNE_KB_OPEN_MS 20    /* at the job's first call, a KB locked against
                               * reading is waited for this long; then its
                               * opening is retried at each save */
#define TUNE_DIRECT_READS ((size_t)1 << 20) /* direct's reads per rank from the others'
                                             * slots (comm_direct_reads) up to which it
                                             * is an arm; beyond, while they are at most
                                             * 2 x bytes (2 ranks, or a reduce-scatter) */
#define TUNE_SINGLE_COPY_MIN ((size_t)32 << 10) /* single_copy's three board exchanges
                                                 * and kernel calls outweigh its saved
                                                 * copy below this */
#define TUNE_BIG 1e300
#define TUNE_BIG_RATIO 1e9 /* sanity limit on an agreed cost ratio */

enum { CMD_NONE = 0, CMD_REPROBE = 1, CMD_RELEARN = 2 };

typedef struct tune_bucket {
    int ready;
    tune_bandit s;  /* the arms' posteriors; s.rng: rank 0's draws */
    const coll_algo *algo[TUNE_MAX_ARMS];
    int cur;        /* arm of the current window, same on every rank */
    int inc;        /* settled: the arm exploited (cur, but for refining) */
    int exploring;  /* rank 0: cur was not the best measured arm when chosen */
    double agree_s; /* rank 0: what the last agreement took */
    int quiet;      /* rank 0: settled windows in a row without a strike */
    long explored;  /* rank 0: this job's exploratory calls and their seconds */
    double explore_s;
    long refined;   /* rank 0: ... of which settled ones, refining */
    int win_len;    /* calls per window, same on every rank */
    int win_calls;
    double win_sum;
    int settled;    /* exploiting */
    int warm;       /* started from the knowledge base */
    double ref_m;   /* rank 0, warm: the incumbent's log time when its rivals
                     * were judged (the KB's, or when it took over) */
    long calls;
    unsigned char used[TUNE_MAX_ARMS]; /* arms that ran a call in this bucket */
    int strikes;    /* settled windows in a row that looked like drift */
    double strike_s; /* ... and the seconds of calls they cover */
    int held_arm, held_calls; /* strike windows not learned yet (teaches) */
    double held_sy;           /* ... their log times times their calls */
    /* CPU contention (window_load): the seconds per call the slowest
     * rank waited for a CPU, averaged over the windows the posterior
     * learned from; and where this thread's count of that wait stood at
     * the end of its last window. */
    double load_m, share_m; /* ... and its share of the call's time */
    int load_known;
    double rd_at, rd_s, rd_n;
    double turn_m; /* the wait for a CPU per turn on one (window_load) */
    int dirty;      /* rank 0: changed since the KB last saw it */
    tune_bucket_info info;
} tune_bucket;

/* Rank 0: a choice of a bucket's arm, waiting to be written to the KB. */
typedef struct tune_choice {
    ai_coll coll;
    size_t bytes;
    tune_arm_stat arm, runner;
    int has_runner;
    double confidence;
    const char *reason;
    double when; /* seconds since the epoch */
} tune_choice;

/* Rank 0: one agreed window, waiting to be written to the KB. */
typedef struct tune_window {
    ai_coll coll;
    size_t bytes;
    tune_arm_stat arm;
    double seconds;
    const char *phase;
    double when; /* seconds since the epoch */
} tune_window;

typedef struct tuner {
    ai_kb *kb;       /* rank 0's writer; NULL: none (or unavailable) */
    char kb_path[1024]; /* resolved when attached: config, AUTOINFRA_KB or the default */
    int kb_tried;
    int kb_pending;   /* rank 0: the KB was locked when opened: open it at a save */
    int kb_busy_said; /* rank 0 said the KB is locked elsewhere */
    char fp[17];
    char desc[256];
    unsigned links_gen;
    int have_fp;
    int reprobe;     /* ordered by rank 0: measure links before the next call */
    int relearn;     /* drift without a new fingerprint: ignore the KB */
    size_t min_bytes;
    int budget;
    int refine;      /* refining calls per bucket, at most (0: none) */
    double bound;
    double save_s;   /* rank 0 writes the KB at most this often (seconds) */
    double agree_s;  /* rank 0: what the job's last agreement took */
    int nranks, nhosts; /* of the fingerprint, for the KB */
    double saved_at;    /* rank 0: last KB write (ai_now) */
    tune_window *log;   /* rank 0: agreed windows the KB has not seen */
    tune_choice *choice; /* rank 0: choices the KB has not seen */
    int nchoice, choice_cap;
    int nlog, log_cap;
    tune_bucket draft; /* rank 0's scratch copy for decisions */
    tune_bucket *b[AI_COLL_COUNT][TUNE_BUCKETS];
} tuner;

static int bucket_of(size_t bytes)
{
    int b = 0;
    while (b < TUNE_BUCKETS - 1 && ((size_t)2 << b) <= bytes)
        b++;
    return b;
}

/* ---------------------------------------------------------- fingerprint */

/* What identifies a communicator's performance: ranks, their placement on
 * hosts, and (several hosts) each host's measured bottleneck rate rounded
 * to a power of two, coarse enough that probe noise does not change it and
 * fine enough that a link at a quarter of its rate does. */
static uint64_t shape_hash(const ai_comm *c)
{
    uint64_t h = util_hash64("autoinfra-fp-1", 14, 0);
    h = util_hash64(&c->size, sizeof c->size, h);
    h = util_hash64(&c->nhosts, sizeof c->nhosts, h);
    return util_hash64(c->host_of, (size_t)c->size * sizeof *c->host_of, h);
}

/* The fingerprint (16 hex digits) and a description of what it stands for. */
static void fingerprint(const ai_comm *c, char fp[17], char *desc, size_t len)
{
    uint64_t h = shape_hash(c);
    int n = snprintf(desc, len, "%d ranks on %d host%s", c->size, c->nhosts,
                     c->nhosts > 1 ? "s" : "");
    if (c->links && c->nhosts > 1) {
        n += snprintf(desc + n, len - (size_t)n, "; Gbit/s:");
        for (int i = 0; i < c->nhosts; i++) {
            double bps = c->links->host_Bps[i];
            int q = isfinite(bps) && bps > 0 ? (int)lround(log2(bps)) : -1;
            h = util_hash64(&q, sizeof q, h);
            if (n < (int)len - 16)
                n += snprintf(desc + n, len - (size_t)n, " %.2f", bps * 8e-9);
        }
    }
    snprintf(fp, 17, "%016llx", (unsigned long long)h);
}

/* Rank 0, with the KB: rounding to powers of two puts a rate that sits
 * near a boundary now on one side, now on the other (probe noise of 10-25%
 * on oversubscribed links). So a known fingerprint of the same shape whose
 * every host rate is within TUNE_FP_TOL (log2) of the measured one is
 * taken instead, the closest; the rates of a new one are recorded. */
#define TUNE_FP_TOL 0.5
static void match_fingerprint(const ai_comm *c, tuner *t)
{
    if (!t->kb || !c->links || c->nhosts < 2)
        return;
    char shape[17], known[17];
    snprintf(shape, sizeof shape, "%016llx", (unsigned long long)shape_hash(c));
    if (kb_match_rates(t->kb, shape, c->nhosts, c->links->host_Bps, TUNE_FP_TOL, known) == AI_OK &&
        known[0]) {
        if (strcmp(known, t->fp))
            util_log(AI_LOG_INFO, "learner: links close to those of known fingerprint %s (not %s)",
                     known, t->fp);
        memcpy(t->fp, known, sizeof known);
    } else if (!kb_is_readonly(t->kb) &&
               kb_note_rates(t->kb, t->fp, shape, c->nhosts, c->links->host_Bps) != AI_OK &&
               !kb_is_busy(t->kb)) {
        util_log(AI_LOG_WARN, "learner: %s", ai_last_error());
    }
}

static void reset_buckets(tuner *t)
{
    for (int k = 0; k < AI_COLL_COUNT; k++)
        for (int b = 0; b < TUNE_BUCKETS; b++)
            if (t->b[k][b])
                t->b[k][b]->ready = 0;
}

/* ----------------------------------------------------------------- arms */

/* Algorithms whose chunk_bytes changes what they do (coll_args). */
static int takes_chunk(ai_coll coll, const char *name)
{
    if (coll == AI_ALLREDUCE)
        return !strcmp(name, "weighted");
    if (coll == AI_BROADCAST)
        return !strcmp(name, "binary_tree") || !strcmp(name, "chain");
    if (coll == AI_REDUCE)
        return !strcmp(name, "binary_tree");
    return 0;
}

static int add_arm(tune_bucket *b, const coll_algo *al, size_t chunk, int channels)
{
    if (b->s.narms == TUNE_MAX_ARMS)
        return 0;
    tune_arm_stat *a = &b->s.arm[b->s.narms];
    memset(a, 0, sizeof *a);
    snprintf(a->algo, sizeof a->algo, "%s", al->name);
    a->chunk = chunk;
    a->channels = channels;
    b->algo[b->s.narms++] = al;
    return 1;
}

/* The arms of a bucket. Not reduce_bcast where every rank is on one host
 * with shared memory: between ranks that all reach each other alike its
 * 2 log2(p) steps of the whole vector are twice recursive_doubling's
 * log2(p), and forced on 2, 4 and 8 ranks of the 2-vCPU machine it took
 * 1.29-3.84x the best algorithm's time at every size from 16 KiB to 4
 * MiB (docs/learner.md, "Arms"); timed in a good moment, it held 128-512
 * KiB on 4 ranks for several jobs at 1.2-2x the others' time. */
static void enumerate_arms(const ai_comm *c, ai_coll coll, size_t bytes, tune_bucket *b)
{
    static const size_t chunks[] = {0, 64 << 10, 512 << 10};
    /* the default first (COMM_CALL_CHANNELS), then striping over all */
    int chans[2] = {COMM_CALL_CHANNELS, c->channels};
    int nch = c->nhosts > 1 && c->channels > COMM_CALL_CHANNELS ? 2 : 1;
    b->s.narms = 0;
    for (int i = 0; i < comm_algo_count(coll); i++) {
        const coll_algo *al = comm_algo_at(coll, i);
        if ((!strcmp(al->name, "hierarchical") && (c->nhosts == 1 || c->nhosts == c->size)) ||
            (!strcmp(al->name, "weighted") && c->nhosts == 1) ||
            (!strcmp(al->name, "direct") &&
             (!comm_shm_direct_ok(c) ||
              comm_direct_reads(c, bytes) > AI_MAX(TUNE_DIRECT_READS, 2 * bytes))) ||
            (!strcmp(al->name, "single_copy") &&
             (!comm_shm_direct_ok(c) || bytes < TUNE_SINGLE_COPY_MIN)) ||
            (!strcmp(al->name, "reduce_bcast") && comm_shm_direct_ok(c)))
            continue;
        for (size_t k = 0; k < AI_ARRAY_LEN(chunks); k++) {
            if (k > 0 && (!takes_chunk(coll, al->name) || 2 * chunks[k] > bytes))
                continue;
            for (int j = 0; j < nch; j++)
                add_arm(b, al, chunks[k], chans[j]);
        }
    }
    /* Another library's own collective (ai_comm_set_host_coll). */
    const coll_algo *host = comm_host_algo(c, coll);
    if (host)
        add_arm(b, host, 0, COMM_CALL_CHANNELS);
}

static int find_arm(const tune_bucket *b, const char *algo, size_t chunk, int channels)
{
    for (int i = 0; i < b->s.narms; i++)
        if (!strcmp(b->s.arm[i].algo, algo) && b->s.arm[i].chunk == chunk &&
            b->s.arm[i].channels == channels)
            return i;
    return -1;
}

/* Priors from the network model at the bucket's edge; blind (mean unset
 * until the first measurement) where it has nothing to say. */
static void set_priors(const ai_comm *c, ai_coll coll, size_t edge, tune_bucket *b)
{
    for (int i = 0; i < b->s.narms; i++) {
        const tune_arm_stat *a = &b->s.arm[i];
        double t = comm_select_model_time(c, coll, a->algo, edge);
        bandit_prior(&b->s, i, t, a->chunk != 0 || a->channels != COMM_CALL_CHANNELS);
        util_log(AI_LOG_DEBUG, "learner: %s %zu: prior %s/%zu/%d %.1f us (sd %.2f)",
                 ai_coll_name(coll), edge, a->algo, a->chunk, a->channels, t * 1e6, sqrt(a->v0));
    }
    bandit_update(&b->s);
}

/* Exploration ends when its budget is spent, after TUNE_HORIZON calls, or
 * when the best arm has been measured a few times and is the fastest with
 * high probability. */
static int settles(const tuner *t, const tune_bucket *b, int best, long explored)
{
    return explored >= t->budget || b->calls >= TUNE_HORIZON || bandit_confident(&b->s, best);
}

/* ------------------------------------------------------------ buckets */

/* One window's time y (log) into its arm: one slow call or window counts
 * less (bandit_cap while exploring, bandit_observe_settled after). */
static void learn_window(tune_bandit *s, int arm, double y, int calls, int settled)
{
    if (settled)
        bandit_observe_settled(s, arm, y, calls);
    else
        bandit_observe(s, arm, bandit_cap(s, arm, y, calls), calls);
}

/* Calls per settled window, from rank 0's agreed order: `ratio` is the
 * agreement's time over the share of a window's time it may cost. */
static int window(double ratio)
{
    return (int)AI_MAX(TUNE_WINDOW, AI_MIN(TUNE_WINDOW_MAX, ceil(ratio)));
}

/* This thread's time spent runnable but waiting for a CPU, seconds
 * (schedstat's run delay), and its turns on a CPU; -1 where the kernel
 * does not count them. */
static double run_delay_s(double *turns)
{
    char buf[128];
    *turns = -1;
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    unsigned long long run_ns, wait_ns, slices;
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    if (sscanf(buf, "%llu %llu %llu", &run_ns, &wait_ns, &slices) != 3)
        return -1;
    *turns = (double)slices;
    return (double)wait_ns * 1e-9;
}

/*
 * CPU contention is not drift. A user's job always has other work beside
 * it, and on a host with more runnable processes than cores a call slows
 * by the time its ranks wait for a CPU: two CPU-bound processes starting
 * beside test_tune's two ranks on 2 cores made settled 1 MiB windows
 * 2-3x slower for a few windows, which the learner took for a drift and
 * learned the bucket again (test_drift_relearns, before its drift, in 13
 * of 46 runs with two hogs switched on and off every 0.5-2.5 s). So every
 * rank measures how long it waited for a CPU over each window (its run
 * delay, spread over the window's calls in proportion to their share of
 * the window's span), the agreement carries the largest, and a window off
 * the posterior by a drift's margin whose change is matched at least 0.3
 * of the way by a change in that wait from its average, with the wait's
 * share of the call and its wait per turn on a CPU moved the same way
 * (load_explains), is no strike: slower or faster,
 * the machine's load moved, not the cluster. A slower network, a stalled
 * peer or a rank sleeping lowers that share: still a drift. The wait
 * measured is less than what contention costs (waking peers, caches):
 * +36 ms of it came with +50 ms of call time.
 */
static double window_load(tune_bucket *b, double mine, double *turn)
{
    double now = ai_now(), turns, rd = run_delay_s(&turns), load = 0;
    *turn = 0;
    if (rd >= 0 && b->rd_at > 0 && now > b->rd_at && rd >= b->rd_s) {
        load = AI_MIN(mine, (rd - b->rd_s) / (now - b->rd_at) * mine);
        if (turns > b->rd_n)
            *turn = (rd - b->rd_s) / (turns - b->rd_n);
    }
    b->rd_at = rd >= 0 ? now : 0;
    b->rd_s = rd;
    b->rd_n = turns;
    return load;
}

/* A settled window off the arm's posterior by a drift's margin, but
 * with at least 0.3 of that change matched by a change in the slowest
 * rank's CPU wait from its average, and the wait's share of the call and
 * (where that share is high) its wait per turn moved the same way: the
 * machine's load moved, not the cluster. Share and turn tell a drift under load apart. A rank waiting for a slowed peer
 * sleeps, and every wake-up waits for a CPU on a loaded machine: its wait
 * per call grows with the longer call (by 0.1-0.4 of the extra time with
 * 4 CPU-bound processes beside test_tune's 2 ranks on 2 cores, at times
 * more than half), but as a share of the call it falls (0.75-0.8 before
 * the drift, 0.1-0.55 after); more load raises both. */
static int load_explains_why(const ai_comm *c, const tune_bucket *b, int arm, double y,
                             double load, double turn, const char **why)
{
    *why = "no drift";
    if (!b->load_known || !b->settled) {
        *why = "no CPU wait known yet";
        return 0;
    }
    if (!bandit_drifted(&b->s, arm, y, c->nhosts > 1 ? TUNE_DRIFT : TUNE_DRIFT_HOST))
        return 0;
    double t = exp(y), dt = t - exp(b->s.mean_m[arm]), dl = load - b->load_m, sign = dt > 0 ? 1 : -1;
    double dshare = (load / t - b->share_m) * sign;
    /* Each turn's wait, where both are known, for a slower window on a
     * machine so loaded that the share cannot fall (at a load of 30-40 on
     * 2 cores it stayed 0.8-0.97 through a drift): a rank woken more
     * often (waiting for a slow peer in short sleeps) waits more in all,
     * but no longer per turn. Not below that: more preemptions by the
     * same competitors are more turns, each no longer, and beside two
     * steady hogs (share 0.45) windows 1.5x slower with 1.5x the CPU wait
     * had it 0.78-0.95x its average, and were struck, and learned again
     * (test_drift_relearns, once in 40 runs). Not for a faster window:
     * with fewer turns the wait per turn is noise, and two windows beside
     * two steady hogs, 0.57x and 0.51x the posterior with half the CPU
     * wait, had it 1.13x and 1.46x their average, and were struck. */
    int turn_moved = sign < 0 || b->share_m < TUNE_SHARE_HIGH || !(turn > 0 && b->turn_m > 0) ||
                     log(turn / b->turn_m) > TUNE_TURN_RISE;
    *why = dt * dl <= 0                                 ? "the CPU wait moved the other way"
           : fabs(dl) < TUNE_LOAD_PART * fabs(dt)       ? "the CPU wait moved too little"
           : dshare <= -TUNE_SHARE_TOL                  ? "the CPU wait's share moved the other way"
           : !turn_moved                                ? "the wait per turn did not move"
                                                        : "the load explains it";
    return dt * dl > 0 && fabs(dl) >= TUNE_LOAD_PART * fabs(dt) && dshare > -TUNE_SHARE_TOL &&
           turn_moved;
}

static int load_explains(const ai_comm *c, const tune_bucket *b, int arm, double y, double load,
                         double turn)
{
    const char *why;
    return load_explains_why(c, b, arm, y, load, turn, &why);
}

/* Is a settled window's time y (log, the mean of its calls) a drift strike?
 * Not in a bucket's first TUNE_HORIZON calls of a job: a fresh process's
 * first calls run slower (cold caches and buffers, TCP windows growing),
 * which a warm bucket's posterior from another job would take for drift.
 * Across hosts a 1.25x change counts: on T4 a NIC from 1 to 0.25 Gbit/s
 * made `weighted` (shards sized for the old rates) 1.35-1.6x slower, which
 * 1.5x missed at 64 KiB and 1 MiB; measuring the links again took 1.3-1.4x
 * off. On one host there are no links to measure, and a new process runs
 * up to 1.3x off an earlier one's posterior (test_tune's drift test at
 * 1.25x relearned before its drift in 2 of 3 runs): 1.5x there. */
static int strikes_out(const ai_comm *c, const tune_bucket *b, int arm, double y)
{
    return b->settled && b->calls > TUNE_HORIZON &&
           bandit_drifted(&b->s, arm, y, c->nhosts > 1 ? TUNE_DRIFT : TUNE_DRIFT_HOST);
}

/* Does a settled window teach the arm's posterior and the CPU wait's
 * averages now? Not a strike: it is judged against the posterior, and one
 * strike learned at once moves the posterior and widens its noise so far
 * (under a load of 20 on 2 cores a 2.9x window took a posterior from 86 to
 * 216 ms, or from 19 to 29 ms with the next windows no longer 3 sd off)
 * that the second strike, and the drift, is missed. A strike is held
 * until a window that teaches comes (then it is learned, a spike like any
 * other) or a second strike relearns the bucket. Not a window slowed by
 * more load: the posterior keeps the quieter machine's time, so a drift
 * that comes while the load lasts still stands out. But one sped up by
 * less load does: the quieter machine is the reference, and a posterior
 * learned under a load that has gone would explain any later slowdown (a
 * job that starts beside other work must still see a drift after that
 * work ends). */
static int teaches(const ai_comm *c, const tune_bucket *b, int arm, double y, double load,
                   double turn)
{
    if (load_explains(c, b, arm, y, load, turn))
        return y < b->s.mean_m[arm];
    return !strikes_out(c, b, arm, y);
}

/* Rank 0 opens the knowledge base once; without one it goes on. */
static void kb_ready(tuner *t, const ai_comm *c)
{
    if (c->rank != 0 || t->kb || t->kb_tried)
        return;
    t->kb_tried = 1;
    /* Inside a collective: a lock held elsewhere is waited for briefly,
     * then the job learns without what the KB knows and opens it at a
     * later save, so that what it learns is not lost. */
    ai_status_t st = t->kb_path[0] ? kb_open_writer_wait(t->kb_path, TUNE_KB_OPEN_MS, &t->kb)
                                   : util_fail(AI_ERR_INVALID, "no knowledge base path (AUTOINFRA_KB "
                                               "unset, no home directory) or it is too long");
    if (st == AI_ERR_TIMEOUT) {
        t->kb = NULL;
        t->kb_pending = 1;
        util_log(AI_LOG_WARN,
                 "learner: %s: learning without what it knows; opening it again at the next save "
                 "(every %g s) and at the end", ai_last_error(), t->save_s);
    } else if (st != AI_OK) {
        util_log(AI_LOG_WARN, "learner: going on without a knowledge base: %s", ai_last_error());
        t->kb = NULL;
    } else if (kb_is_readonly(t->kb)) {
        util_log(AI_LOG_WARN,
                 "learner: knowledge base %s cannot be written (%s): reading it; what this job "
                 "learns will not be saved", kb_path(t->kb), kb_readonly_why(t->kb));
    }
}

/* Rank 0, at a save: open the KB that was locked at the job's first call;
 * wait_ms: how long a lock is waited for now. 0: still pending or none. */
static int kb_reopen(tuner *t, int wait_ms)
{
    if (!t->kb_pending)
        return t->kb != NULL;
    ai_status_t st = kb_open_writer_wait(t->kb_path, wait_ms, &t->kb);
    if (st == AI_ERR_TIMEOUT) {
        t->kb = NULL;
        return 0;
    }
    t->kb_pending = 0;
    if (st != AI_OK) {
        t->kb = NULL;
        util_log(AI_LOG_WARN, "learner: %d measurements not saved: %s", t->nlog, ai_last_error());
    } else if (kb_is_readonly(t->kb)) {
        util_log(AI_LOG_WARN, "learner: knowledge base %s cannot be written (%s): %d measurements "
                            "not saved", kb_path(t->kb), kb_readonly_why(t->kb), t->nlog);
    } else {
        util_log(AI_LOG_INFO, "learner: knowledge base %s is no longer locked: saving what this "
                            "job learned", kb_path(t->kb));
    }
    return t->kb && !kb_is_readonly(t->kb);
}

/* Rank 0: the changed buckets and the waiting windows, one transaction.
 * Writing takes 0.3-0.6 ms (and 20 ms when SQLite checkpoints its WAL),
 * and the other ranks wait for it in the next call: on T1 at 64 KiB a
 * write per window costs `auto` 2.5%. So a job writes at most every
 * save_s (1 s) and when the communicator is released; a crash loses at
 * most that much of its learning, never the KB's consistency. `final`:
 * why what cannot be written now is dropped (the end of the job, a new
 * fingerprint its windows would be filed under); NULL: a KB locked by
 * another process keeps it all for the next save. */
static void kb_flush_at(tuner *t, const char *final, int wait_ms)
{
    t->saved_at = ai_now();
    int pending = t->nlog + t->nchoice; /* every changed bucket has a window waiting */
    if (t->kb_pending && pending && !kb_reopen(t, wait_ms) && t->kb_pending) {
        if (final) {
            util_log(AI_LOG_WARN, "learner: %d measurements not saved (%s): the knowledge base "
                                "is still locked by another process", t->nlog, final);
            t->nlog = 0;
            t->nchoice = 0;
        }
        return;
    }
    if (!t->kb || !pending || kb_is_readonly(t->kb)) {
        t->nlog = 0;
        t->nchoice = 0;
        return;
    }
    int nb = 0;
    ai_status_t st = kb_begin(t->kb, t->fp, t->nranks, t->nhosts, t->desc);
    int began = st == AI_OK;
    for (int k = 0; k < AI_COLL_COUNT; k++)
        for (int i = 0; i < TUNE_BUCKETS; i++) {
            tune_bucket *b = t->b[k][i];
            if (!b || !b->dirty)
                continue;
            /* Only the arms this job measured: an arm known from the KB
             * that it did not run has this job's level in its posterior
             * (bandit_update), a guess, not a measurement. Written back,
             * a warm job on T1 would move every other arm of each bucket
             * by 0.4-2.5%, their sample counts unchanged, for the jobs
             * after it to take as knowledge. */
            tune_arm_stat ran[TUNE_MAX_ARMS];
            int nran = 0;
            for (int a = 0; a < b->s.narms; a++)
                if (b->s.arm[a].w > 0)
                    ran[nran++] = b->s.arm[a];
            if (st == AI_OK)
                st = kb_put_bucket(t->kb, t->fp, (ai_coll)k, (size_t)1 << i, ran, nran, &b->info);
            nb++;
        }
    for (int i = 0; i < t->nlog && st == AI_OK; i++) {
        const tune_window *w = &t->log[i];
        st = kb_put_measurement(t->kb, t->fp, w->coll, w->bytes, &w->arm, w->seconds, w->phase,
                                w->when);
    }
    for (int i = 0; i < t->nchoice && st == AI_OK; i++) {
        const tune_choice *h = &t->choice[i];
        st = kb_put_choice(t->kb, t->fp, h->coll, h->bytes, &h->arm,
                           h->has_runner ? &h->runner : NULL, h->confidence, h->reason, h->when);
    }
    if (began)
        st = kb_end(t->kb, st); /* commits, or rolls back a failed put */
    if (st != AI_OK && kb_is_busy(t->kb) && !final) {
        /* Locked by another process: keep it all for the next save. */
        if (!t->kb_busy_said++)
            util_log(AI_LOG_WARN,
                     "learner: knowledge base %s is locked by another process: keeping %d "
                     "buckets and %d measurements in memory, retrying every %g s and at the end",
                     kb_path(t->kb), nb, t->nlog, t->save_s);
        return;
    }
    if (st != AI_OK)
        util_log(AI_LOG_WARN, "learner: %d buckets and %d measurements not saved%s%s%s: %s", nb,
                 t->nlog, final ? " (" : "", final ? final : "", final ? ")" : "", ai_last_error());
    else if (t->kb_busy_said)
        util_log(AI_LOG_INFO, "learner: saved %d buckets and %d measurements kept while %s was "
                            "locked", nb, t->nlog, kb_path(t->kb));
    else
        util_log(AI_LOG_DEBUG, "learner: saved %d buckets and %d measurements in %.1f us", nb,
                 t->nlog, (ai_now() - t->saved_at) * 1e6);
    for (int k = 0; k < AI_COLL_COUNT; k++)
        for (int i = 0; i < TUNE_BUCKETS; i++)
            if (t->b[k][i])
                t->b[k][i]->dirty = 0;
    t->nlog = 0;
    t->nchoice = 0;
    t->kb_busy_said = 0;
}

static void kb_flush(tuner *t)
{
    kb_flush_at(t, NULL, 0);
}

/* Rank 0: the KB will take what this job learns (or may, once the lock
 * that kept it from opening goes). */
static int kb_wanted(const tuner *t)
{
    return t->kb_pending || (t->kb && !kb_is_readonly(t->kb));
}

/* Rank 0: note that bucket b now runs arm `arm` for `reason`, with the
 * runner-up of the moment, for the KB's choices table. Rare: when a bucket
 * settles, switches or starts warm. */
static void kb_note_choice(tuner *t, ai_coll coll, int bi, const tune_bucket *b, int arm,
                           const char *reason)
{
    if (!kb_wanted(t))
        return;
    if (t->nchoice == t->choice_cap) {
        int cap = t->choice_cap ? 2 * t->choice_cap : 16;
        tune_choice *h = realloc(t->choice, (size_t)cap * sizeof *h);
        if (!h)
            return; /* the decision log only: the learning itself is kept */
        t->choice = h;
        t->choice_cap = cap;
    }
    int runner = -1;
    for (int i = 0; i < b->s.narms; i++)
        if (i != arm && b->s.arm[i].n > 0 && (runner < 0 || b->s.arm[i].m < b->s.arm[runner].m))
            runner = i;
    tune_choice *h = &t->choice[t->nchoice++];
    *h = (tune_choice){.coll = coll,
                       .bytes = (size_t)1 << bi,
                       .arm = b->s.arm[arm],
                       .has_runner = runner >= 0,
                       .confidence = tune_confidence(b->s.arm, b->s.narms, arm),
                       .reason = reason,
                       .when = (double)time(NULL)};
    if (runner >= 0)
        h->runner = b->s.arm[runner];
    util_log(AI_LOG_INFO, "learner: %s %zu: %s %s/%zu/%d%s%s", ai_coll_name(coll), (size_t)1 << bi,
             reason, b->s.arm[arm].algo, b->s.arm[arm].chunk, b->s.arm[arm].channels,
             runner >= 0 ? "; runner-up " : "", runner >= 0 ? b->s.arm[runner].algo : "");
}

/* Rank 0: note an agreed window for the KB, and write when it is time. */
static void kb_note(tuner *t, ai_coll coll, int bi, tune_bucket *b, int arm, double seconds,
                    const char *phase)
{
    if (!kb_wanted(t))
        return;
    b->dirty = 1;
    if (t->nlog == t->log_cap) {
        int cap = t->log_cap ? 2 * t->log_cap : 64;
        tune_window *l = realloc(t->log, (size_t)cap * sizeof *l);
        if (!l) {
            util_log(AI_LOG_WARN, "learner: no memory for a measurement; writing the KB now");
            kb_flush(t);
            return;
        }
        t->log = l;
        t->log_cap = cap;
    }
    t->log[t->nlog++] = (tune_window){coll, (size_t)1 << bi, b->s.arm[arm], seconds, phase,
                                      (double)time(NULL)};
    if ((t->nlog >= TUNE_SAVE_WINDOWS && t->kb && !kb_is_busy(t->kb)) ||
        ai_now() - t->saved_at >= t->save_s)
        kb_flush(t);
}

/* Every rank: a fresh bucket's arms and priors; rank 0 adds what the KB
 * knows and names the first arm, sent to all in one small allreduce. */
static ai_status_t init_bucket(tuner *t, ai_comm *c, ai_coll coll, int bi, tune_bucket *b)
{
    size_t edge = (size_t)1 << bi;
    memset(b, 0, sizeof *b);
    enumerate_arms(c, coll, edge, b);
    set_priors(c, coll, edge, b);
    util_rng_seed(&b->s.rng, util_hash64(t->fp, 16, (uint64_t)coll * 64 + (uint64_t)bi));
    double order[3] = {-TUNE_BIG, -TUNE_BIG, -TUNE_BIG};
    if (c->rank == 0) {
        kb_ready(t, c);
        tune_arm_stat known[TUNE_MAX_ARMS];
        int nk = 0;
        if (t->kb && !t->relearn &&
            kb_load_bucket(t->kb, t->fp, coll, edge, known, TUNE_MAX_ARMS, &nk, &b->info) != AI_OK) {
            util_log(AI_LOG_WARN, "learner: %s", ai_last_error());
            nk = 0;
        }
        long samples = 0;
        for (int k = 0; k < nk; k++) {
            int i = find_arm(b, known[k].algo, known[k].chunk, known[k].channels);
            if (i >= 0) { /* what was learned is this job's prior */
                bandit_prior_known(&b->s, i, &known[k]);
                samples += known[k].n;
            }
        }
        bandit_update(&b->s);
        /* Imported knowledge has no bucket row: enough samples settle it. */
        int best = bandit_best_measured(&b->s);
        b->warm = best >= 0 && (b->info.settled || b->info.explored >= t->budget ||
                                samples >= t->budget);
        int first = b->warm ? best : -1;
        /* Warm: the arm the last job ran, as that job would have gone on,
         * unless another is expected TUNE_SWITCH faster. The KB's best
         * estimate can be a near tie the job did not take: on T3 at 4 MiB
         * a learned job runs hierarchical on 2 channels, the oracle's arm,
         * where the KB's best estimate is a ring 5% slower. */
        int last = b->warm && b->info.algo[0]
                       ? find_arm(b, b->info.algo, b->info.chunk, b->info.channels)
                       : -1;
        if (last >= 0 && b->s.arm[last].n > 0 &&
            b->s.arm[last].m - b->s.arm[best].m < TUNE_SWITCH)
            first = last;
        if (first < 0) {
            /* No model: the fixed rule's choice goes first. */
            const char *rule = b->s.source[0] == PRIOR_BLIND ? ai_coll_auto_algo(c, coll, edge) : NULL;
            first = rule ? find_arm(b, rule, 0, COMM_CALL_CHANNELS) : -1;
            if (first < 0)
                first = best >= 0 ? best : bandit_best_prior(&b->s);
        }
        order[0] = first;
        order[1] = b->warm;
        b->ref_m = b->s.arm[first].m;
        /* A warm bucket is trusted: quiet from the start, its first window
         * as long as the job's agreements allow against the KB's time. */
        b->quiet = b->warm ? TUNE_QUIET_MAX : 0;
        b->agree_s = t->agree_s;
        double ratio = t->agree_s / (TUNE_AGREE_SHARE * exp(b->s.arm[first].m));
        order[2] = !b->warm ? 1 : t->agree_s > 0 ? window(ratio * (1 << b->quiet)) : TUNE_WINDOW;
    }
    ai_algo_opts o = {.algo = "recursive_doubling"};
    ai_status_t st = ai_allreduce(c, AI_IN_PLACE, order, 3, AI_F64, AI_MAX, &o);
    if (st != AI_OK)
        return st;
    if (!(order[0] >= 0 && order[0] < b->s.narms && order[2] >= 1 && order[2] <= TUNE_WINDOW_MAX))
        return util_fail(AI_ERR_PROTO,
                         "learner: rank 0 sent an invalid first arm (%g of %d) or window (%g)",
                         order[0], b->s.narms, order[2]);
    b->cur = b->inc = (int)order[0];
    b->settled = b->warm = order[1] > 0;
    b->win_len = (int)order[2];
    b->ready = 1;
    if (c->rank == 0 && b->warm)
        kb_note_choice(t, coll, bi, b, b->inc, "warm");
    util_log(AI_LOG_DEBUG, "learner: %s bucket %zu: %d arms, first %s/%zu/%d (%s)",
             ai_coll_name(coll), edge, b->s.narms, b->s.arm[b->cur].algo, b->s.arm[b->cur].chunk,
             b->s.arm[b->cur].channels, b->warm ? "from the knowledge base" : "prior");
    return AI_OK;
}

/* ------------------------------------------------------------- the hook */

static ai_status_t tune_choose(void *ctx, ai_comm *c, ai_coll coll, size_t bytes, comm_arm *arm,
                               int *taken)
{
    tuner *t = ctx;
    ai_status_t st;
    *taken = 0;
    if (bytes < t->min_bytes || c->size < 2)
        return AI_OK;
    /* Links first: the model's priors and the fingerprint need them. */
    if (c->nhosts > 1 && (t->reprobe || !c->links)) {
        const comm_links *l;
        if ((st = comm_links_get(c, t->reprobe, &l)) != AI_OK)
            return st;
    }
    if (!t->have_fp || t->links_gen != c->links_gen || t->reprobe) {
        kb_flush_at(t, "the fingerprint changed", 0); /* learned under the old one */
        char old[17];
        memcpy(old, t->fp, sizeof old);
        int had = t->have_fp;
        fingerprint(c, t->fp, t->desc, sizeof t->desc);
        t->links_gen = c->links_gen;
        t->have_fp = 1;
        t->nranks = c->size;
        t->nhosts = c->nhosts;
        if (c->rank == 0) {
            kb_ready(t, c);
            match_fingerprint(c, t);
        }
        /* Drift that did not change the fingerprint: learn afresh. */
        t->relearn = t->reprobe && had && !strcmp(old, t->fp);
        if (t->reprobe && c->rank == 0)
            util_log(AI_LOG_INFO, "learner: links re-measured; fingerprint %s -> %s%s", old, t->fp,
                     t->relearn ? " (unchanged: learning again)" : "");
        t->reprobe = 0;
        reset_buckets(t);
    }
    int bi = bucket_of(bytes);
    tune_bucket *b = t->b[coll][bi];
    if (!b && !(b = t->b[coll][bi] = calloc(1, sizeof *b)))
        return util_fail(AI_ERR_NOMEM, "learner bucket");
    if (!b->ready && (st = init_bucket(t, c, coll, bi, b)) != AI_OK)
        return st;
    arm->algo = b->algo[b->cur];
    arm->chunk_bytes = b->s.arm[b->cur].chunk;
    arm->channels = b->s.arm[b->cur].channels;
    *taken = 1;
    return AI_OK;
}

/* One finished window as the ranks agree on it: what ran, for how many
 * calls, the state it ran in, and the agreement message (the slowest
 * rank's time; rank 0's next arm, cost share, order and incumbent; the
 * strike vote; the CPU wait and its turn). */
typedef struct obs_window {
    int bi;
    int ran, calls;
    int was_settled;
    int refining;         /* rank 0: this window ran a rival */
    int next_explores;
    double mine;          /* this rank's mean time a call */
    double msg[8];
} obs_window;

/* Rank 0, on a window of a warm bucket's incumbent: are its rivals' times
 * stale? The KB ranked the arms by times measured in one state of the
 * machine. If the incumbent now runs a drift's margin faster than the KB
 * knew it, the others were timed in a slower state, which need not have
 * slowed them alike, and nothing measures them again: a warm job explores
 * nothing, and an arm expected past the bound is never tried. On 4 ranks
 * on 2 cores a cold job settled `single_copy` at 512 KiB at 551 us against
 * `rabenseifner`'s 742 and `ring`'s 1178 (one call each, in a spell of
 * slow copies between the cores), and the 29 warm jobs after it ran
 * `single_copy` at 204-370 us where `ring` and `rabenseifner` take 105-135
 * (docs/learner.md, "Stale rivals"). Faster only: a slower state is what
 * the drift strikes are for, and learning in it is what went wrong. Only
 * where some rival rests on fewer than TUNE_THIN calls (those go back to
 * the model's priors and the bucket explores again): rivals measured often
 * were measured in more than one state, and a KB from another machine is
 * right about its arms against each other more than about their level
 * (bandit_update). Not in the bucket's first TUNE_HORIZON calls, which a
 * fresh process runs slower (strikes_out), and once per job (the bucket is
 * no longer warm after). `d` holds this window's time. */
static int thin(const tune_bucket *b, int inc, int i)
{
    return i != inc && b->s.arm[i].n > 0 && b->s.arm[i].n < TUNE_THIN;
}

static int rivals_stale(const ai_comm *c, const tune_bucket *b, const tune_bucket *d,
                        const obs_window *w)
{
    if (!b->warm || b->calls <= TUNE_HORIZON || w->ran != b->inc || w->refining ||
        d->s.arm[b->inc].m >= b->ref_m - (c->nhosts > 1 ? TUNE_DRIFT : TUNE_DRIFT_HOST))
        return 0;
    for (int i = 0; i < b->s.narms; i++)
        if (thin(b, b->inc, i))
            return 1;
    return 0;
}

/* Rank 0: the thin rivals of incumbent `inc` go back to the model's priors. */
static void forget_thin(const ai_comm *c, ai_coll coll, size_t edge, int inc, tune_bucket *b)
{
    for (int i = 0; i < b->s.narms; i++)
        if (thin(b, inc, i)) {
            const tune_arm_stat *a = &b->s.arm[i];
            bandit_prior(&b->s, i, comm_select_model_time(c, coll, a->algo, edge),
                         a->chunk != 0 || a->channels != COMM_CALL_CHANNELS);
        }
    bandit_update(&b->s);
}

/* Rank 0 decides the next window on a copy of the bucket that includes
 * its own time of this one: the arm, the incumbent, the settled window's
 * cost share and whether to measure the links again, into the message. */
static void decide_next(tuner *t, ai_comm *c, ai_coll coll, tune_bucket *b, obs_window *w)
{
    double *msg = w->msg;
    int ran = w->ran, calls = w->calls;
    double mine = w->mine;
    tune_bucket *d = &t->draft;
    *d = *b;
    if (teaches(c, b, ran, log(mine), msg[6], msg[7]))
        learn_window(&d->s, ran, log(mine), calls, w->was_settled);
    int best = bandit_best_measured(&d->s);
    /* Settled, near ties are not worth a switch: they flip with the
     * noise of a window (1-2% at small sizes), and a switch costs by
     * itself (a channel left idle restarts TCP's slow start). On T1 a
     * warm bucket had gone ring on 2 channels, ring on 1, rabenseifner
     * on 1 in its first 12 calls, each 1-2% slower back to back. */
    if (b->settled && d->s.arm[b->inc].m - d->s.arm[best].m < TUNE_SWITCH)
        best = b->inc;
    /* The best measured arm once confident or out of budget; before
     * that, the bandit's draw. */
    int next = b->settled || settles(t, d, best, b->info.explored)
                   ? best
                   : bandit_next(&d->s, t->bound);
    b->s.rng = d->s.rng; /* the draws must not repeat */
    int settle = b->settled ||
                 (next == best && settles(t, d, best, b->info.explored + (b->exploring ? calls : 0)));
    if (b->settled && best != b->inc)
        b->ref_m = d->s.arm[best].m;
    if (rivals_stale(c, b, d, w)) {
        /* Learn the bucket again from the model's priors (every rank
         * starts it in start_next_window). */
        util_log(AI_LOG_INFO,
                 "learner: %s %zu: %s/%zu/%d runs %.2fx faster than when its rivals were judged: "
                 "learning the bucket again",
                 ai_coll_name(coll), (size_t)1 << w->bi, d->s.arm[b->inc].algo,
                 d->s.arm[b->inc].chunk, d->s.arm[b->inc].channels,
                 exp(b->ref_m - d->s.arm[b->inc].m));
        forget_thin(c, coll, (size_t)1 << w->bi, b->inc, d);
        next = bandit_next(&d->s, t->bound);
        b->s.rng = d->s.rng;
        w->next_explores = 1;
        msg[1] = msg[4] = next;
        msg[2] = -1;
        msg[3] = CMD_RELEARN;
        return;
    }
    /* Refining: in the job that learned the bucket, once settled,
     * every other window runs a near tie that may still be faster
     * (bandit_rival), in short windows, within AUTOINFRA_TUNE_REFINE
     * calls. A warm job explores nothing. */
    int rival = settle && !b->warm && b->refined + (w->refining ? calls : 0) < t->refine
                    ? bandit_rival(&d->s, best, TUNE_REFINE_GAIN, TUNE_REFINE_P)
                    : -1;
    if (rival >= 0 && b->settled && ran == b->inc)
        next = rival;
    w->next_explores = next != best;
    msg[1] = next;
    msg[4] = best;
    /* The share shrinks while the bucket is quiet (the votes below
     * can still make the next window the shortest). */
    int quiet = rival >= 0 ? 0 : b->quiet;
    msg[2] = !settle ? -1 : b->agree_s / (TUNE_AGREE_SHARE * mine) * (1 << quiet);
    /* A drift must last: a few milliseconds of the OS's jitter made
     * two short windows on shared memory (4 calls of 0.5 ms) 1.5-2x
     * slow, and measuring the links and learning again costs far
     * more than that (counting rank 0's own time of this window as
     * a strike too, to order it a window earlier, made test_tune's
     * warm job on shared memory under ASan see a drift before its
     * drift in 1 of 24 runs). */
    msg[3] = b->strikes >= TUNE_DRIFT_STRIKES && b->strike_s >= TUNE_DRIFT_MIN_S
                 ? CMD_REPROBE
                 : CMD_NONE;
    util_log(AI_LOG_DEBUG,
             "learner: %s %zu: %s/%zu/%d took %.1f us (mine, %d calls; last agreement %.1f us); "
             "next %s/%zu/%d%s",
             ai_coll_name(coll), (size_t)1 << w->bi, d->s.arm[ran].algo, d->s.arm[ran].chunk,
             d->s.arm[ran].channels, mine * 1e6, calls, b->agree_s * 1e6, d->s.arm[next].algo,
             d->s.arm[next].chunk, d->s.arm[next].channels, settle ? " (settled)" : "");
}

/* Every rank takes the maximum of the messages (times, votes, rank 0's
 * orders, the others sending -TUNE_BIG) and checks what came back: a rank
 * that sent nonsense stops the learner with what it sent. */
static ai_status_t agree_window(tuner *t, ai_comm *c, tune_bucket *b, double msg[8])
{
    ai_algo_opts o = {.algo = "recursive_doubling"};
    double t0 = ai_now();
    ai_status_t st = ai_allreduce(c, AI_IN_PLACE, msg, 8, AI_F64, AI_MAX, &o);
    if (st != AI_OK)
        return st;
    b->agree_s = t->agree_s = ai_now() - t0;
    if (!(msg[0] > 0 && msg[1] >= 0 && msg[1] < b->s.narms && msg[4] >= 0 &&
          msg[4] < b->s.narms && (msg[2] == -1 || (msg[2] >= 0 && msg[2] <= TUNE_BIG_RATIO)) &&
          (msg[3] == CMD_NONE || msg[3] == CMD_REPROBE || msg[3] == CMD_RELEARN) &&
          (msg[5] == 0 || msg[5] == 1) && msg[6] >= 0 && msg[6] <= msg[0] && msg[7] >= 0 &&
          msg[7] <= TUNE_BIG_RATIO))
        return util_fail(AI_ERR_PROTO,
                         "learner: invalid agreement message (arm %g, incumbent %g, cost %g, "
                         "order %g, vote %g)",
                         msg[1], msg[4], msg[2], msg[3], msg[5]);
    return AI_OK;
}

/* The agreed time of log y against the posterior: a drift strike, or a
 * slow window the CPU load explains, or neither; the counts of strikes,
 * of quiet windows and of exploration follow. Returns whether it struck. */
static int judge_window(ai_comm *c, ai_coll coll, tune_bucket *b, const obs_window *w, double y)
{
    const double *msg = w->msg;
    int ran = w->ran, calls = w->calls;
    const char *why;
    int loaded = load_explains_why(c, b, ran, y, msg[6], msg[7], &why);
    int strike = !loaded && strikes_out(c, b, ran, y);
    if (strike) {
        b->strikes++;
        b->strike_s += msg[0] * calls;
    } else if (!w->refining) {
        /* A refining window that is no strike says nothing about the
         * incumbent: it must not reset the count, or refining (every
         * other window) could hide a drift. */
        b->strikes = 0;
        b->strike_s = 0;
    }
    /* A loaded window keeps the next ones short, as a strike does: a
     * drift must not start inside a long window, whose weight would
     * carry the posterior most of the way to it at once. */
    b->quiet = w->was_settled && !strike && !loaded ? AI_MIN(b->quiet + 1, TUNE_QUIET_MAX) : 0;
    if (b->exploring) {
        b->info.explored += calls;
        b->info.explore_s += msg[0] * calls;
        b->explored += calls;
        b->explore_s += msg[0] * calls;
        if (w->refining)
            b->refined += calls;
    }
    /* Every settled window on rank 0, at debug: what it was judged
     * against, and which test of load_explains decided (per window, not
     * per call; nothing is formatted below the debug level). */
    if (c->rank == 0 && w->was_settled)
        util_log(AI_LOG_DEBUG,
                 "learner: %s %zu: call %ld, %d calls of %s/%zu/%d %.1f us a call against %.1f us "
                 "(3 sd %.2fx); CPU wait %.1f us (share %.2f, %.1f us a turn) against %.1f us "
                 "(%.2f, %.1f us): %s%s, %s (strikes %d, %.1f ms)",
                 ai_coll_name(coll), (size_t)1 << w->bi, b->calls, calls, b->s.arm[ran].algo,
                 b->s.arm[ran].chunk, b->s.arm[ran].channels, msg[0] * 1e6,
                 exp(b->s.mean_m[ran]) * 1e6,
                 exp(3 * sqrt(b->s.mean_noise2 + b->s.mean_v[ran])), msg[6] * 1e6,
                 msg[6] / msg[0], msg[7] * 1e6, b->load_m * 1e6, b->share_m, b->turn_m * 1e6,
                 loaded ? "loaded" : strike ? "a drift strike" : "quiet",
                 b->calls > TUNE_HORIZON ? "" : " (within the horizon)", why, b->strikes,
                 b->strike_s * 1e3);
    return strike;
}

/* A struck window is held back (a drift not yet confirmed must not move
 * the posterior); a window that teaches releases what was held, is
 * learned, and moves the CPU load's running means, unless the posterior
 * takes it as a spike (counted capped): the CPU wait's averages are the
 * wait at the posterior's time, and must not move where it does not. A
 * warm job beside hogs switched on and off had a 32-call window at 67 ms
 * (the posterior 17 ms, its noise then 9.9x at 3 sd: no strike) capped as
 * a spike, but learned in full into the CPU wait's average (28 to 53 ms):
 * the next window as loaded, 52 ms with 48 ms of CPU wait, then read as
 * less load than usual and struck, 51 calls before its drift. */
static void learn_agreed(ai_comm *c, tune_bucket *b, const obs_window *w, double y, int strike)
{
    const double *msg = w->msg;
    int ran = w->ran, calls = w->calls;
    if (strike && (b->held_calls == 0 || b->held_arm == ran)) {
        b->held_arm = ran;
        b->held_sy += y * calls;
        b->held_calls += calls;
    }
    if (!teaches(c, b, ran, y, msg[6], msg[7]))
        return;
    if (b->held_calls > 0)
        learn_window(&b->s, b->held_arm, b->held_sy / b->held_calls, b->held_calls, 1);
    b->held_calls = 0;
    b->held_sy = 0;
    int spike = w->was_settled && bandit_settled_spike(&b->s, ran, y, calls);
    learn_window(&b->s, ran, y, calls, w->was_settled);
    if (spike && b->load_known)
        return;
    double keep = pow(1.0 - 1.0 / TUNE_LOAD_MEMORY, calls);
    b->load_m = b->load_known ? keep * b->load_m + (1 - keep) * msg[6] : msg[6];
    b->share_m = b->load_known ? keep * b->share_m + (1 - keep) * msg[6] / msg[0] : msg[6] / msg[0];
    b->turn_m = b->load_known ? keep * b->turn_m + (1 - keep) * msg[7] : msg[7];
    b->load_known = 1;
}

/* Every rank, on rank 0's order (rivals_stale): the bucket explores again
 * as a cold job's does, within its budget and horizon, and refines after;
 * rank 0 forgets its thin rivals' times. The bucket's first calls are not
 * skipped again (their costs are paid), nor each arm's first call where
 * it already ran. */
static void relearn_bucket(const ai_comm *c, ai_coll coll, int bi, int inc, tune_bucket *b)
{
    b->warm = 0;
    b->calls = TUNE_FIRST_CALLS;
    b->strikes = 0;
    b->strike_s = 0;
    b->held_calls = 0;
    b->held_sy = 0;
    b->quiet = 0;
    if (c->rank != 0)
        return;
    forget_thin(c, coll, (size_t)1 << bi, inc, b);
    b->explored = b->refined = 0;
    b->explore_s = 0;
    b->info.explored = 0;
    b->info.explore_s = 0;
}

/* The next window as agreed: its arm, incumbent and length, an order to
 * measure the links again, and on rank 0 the knowledge base's notes. */
static void start_next_window(tuner *t, ai_comm *c, ai_coll coll, tune_bucket *b, const obs_window *w)
{
    const double *msg = w->msg;
    int was_inc = b->inc;
    b->cur = (int)msg[1];
    b->inc = (int)msg[4];
    b->exploring = w->next_explores;
    b->settled = b->info.settled = msg[2] >= 0;
    b->win_len = !b->settled ? 1 : msg[5] > 0 ? TUNE_WINDOW : window(msg[2]);
    b->win_calls = 0;
    b->win_sum = 0;
    if (msg[3] == CMD_REPROBE) {
        t->reprobe = 1;
        b->strikes = 0;
        b->strike_s = 0;
    }
    if (c->rank == 0 && b->settled && (!w->was_settled || b->inc != was_inc))
        kb_note_choice(t, coll, w->bi, b, b->inc, w->was_settled ? "switched" : "settled");
    if (c->rank == 0)
        kb_note(t, coll, w->bi, b, w->ran, msg[0],
                !w->was_settled ? "explore" : w->refining ? "refine" : "exploit");
    if (msg[3] == CMD_RELEARN)
        relearn_bucket(c, coll, w->bi, was_inc, b);
}

static ai_status_t tune_observe(void *ctx, ai_comm *c, ai_coll coll, size_t bytes, double seconds)
{
    tuner *t = ctx;
    int bi = bucket_of(bytes);
    tune_bucket *b = t->b[coll][bi];
    /* A bucket's first TUNE_FIRST_CALLS calls, and each arm's first call
     * in it, teach nothing: they pay for first use (page faults in the
     * buffers and scratch, single_copy's first reads) and for a new
     * process's slow start. On 2 ranks in a new process, an arm's first
     * call at 256 KiB took up to 4x its later ones (recursive_doubling
     * 62-64 us against 24, single_copy 122-152 against 38), and direct's
     * second and third calls at 1 MiB 1.2-2.2x; one such sample put an
     * arm past the bound (1.5x the best), never to be tried again. Every
     * rank runs the same arm, so every rank skips the same calls. */
    if (b->calls++ < TUNE_FIRST_CALLS || !b->used[b->cur]) {
        b->used[b->cur] = 1;
        double turn;
        (void)window_load(b, 0, &turn); /* the first window's CPU wait counts from here */
        return AI_OK;
    }
    /* Times scale to the bucket's edge (calls in a bucket differ by < 2x). */
    b->win_sum += seconds * (double)((size_t)1 << bi) / (double)bytes;
    if (++b->win_calls < b->win_len)
        return AI_OK;
    obs_window w = {.bi = bi, .ran = b->cur, .calls = b->win_calls, .was_settled = b->settled};
    w.mine = b->win_sum / b->win_calls;
    w.refining = w.was_settled && b->exploring;
    /* Every rank's vote: when its own time of this window looks like a
     * strike, the next window is the shortest, so that a drift is
     * confirmed or not within a few calls. Deciding it on rank 0's time
     * alone misses drifts the slowest rank sees: on T4 at 64 KiB, g1000-0
     * at a quarter, the agreed windows are 1.25-1.7x slower, rank 0's own
     * less, and the windows after the first slow one would stay 18-32
     * calls long. The votes only shorten a window; strikes
     * and the order to measure the links stay with rank 0, whose
     * posteriors hold the KB's knowledge. */
    double my_turn, my_load = window_load(b, w.mine, &my_turn);
    double msg[8] = {w.mine, -TUNE_BIG, -TUNE_BIG, -TUNE_BIG, -TUNE_BIG,
                     strikes_out(c, b, w.ran, log(w.mine)), my_load, my_turn};
    memcpy(w.msg, msg, sizeof msg);
    if (c->rank == 0)
        decide_next(t, c, coll, b, &w);
    ai_status_t st = agree_window(t, c, b, w.msg);
    if (st != AI_OK)
        return st;
    /* Every rank: the agreed time is the slowest rank's. Strikes count on
     * rank 0 (the others' posteriors lack the KB's knowledge). */
    double y = log(w.msg[0]);
    int strike = judge_window(c, coll, b, &w, y);
    learn_agreed(c, b, &w, y, strike);
    start_next_window(t, c, coll, b, &w);
    return AI_OK;
}

static void tune_release(void *ctx)
{
    tuner *t = ctx;
    /* The end of the job is off every collective's path: a KB locked by
     * another process is waited for, a bounded time. */
    if (t->kb)
        kb_set_wait(t->kb, TUNE_KB_CLOSE_MS);
    kb_flush_at(t, "at the end of the job", TUNE_KB_CLOSE_MS);
    free(t->log);
    free(t->choice);
    for (int k = 0; k < AI_COLL_COUNT; k++)
        for (int b = 0; b < TUNE_BUCKETS; b++)
            free(t->b[k][b]);
    ai_kb_close(t->kb);
    free(t);
}

/* ------------------------------------------------------------ attaching */

ai_status_t tune_learner_attach(ai_comm *c, const char *path)
{
    int on;
    double bound;
    ai_status_t st;
    size_t min;
    if ((st = util_param_int(UTIL_PARAM_TUNE, &on)) != AI_OK)
        return st;
    if (!on)
        return AI_OK;
    if ((st = util_param_size(UTIL_PARAM_TUNE_MIN, &min)) != AI_OK)
        return st;
    tuner *t = calloc(1, sizeof *t);
    if (!t)
        return util_fail(AI_ERR_NOMEM, "learner");
    t->min_bytes = min;
    if ((st = util_param_int(UTIL_PARAM_TUNE_BUDGET, &t->budget)) != AI_OK ||
        (st = util_param_int(UTIL_PARAM_TUNE_REFINE, &t->refine)) != AI_OK ||
        (st = util_param_double(UTIL_PARAM_TUNE_BOUND, &bound)) != AI_OK ||
        (st = util_param_double(UTIL_PARAM_TUNE_SAVE_S, &t->save_s)) != AI_OK)
        goto err_tuner;
    /* The path is settled here, once: a job's communicators (shrunk,
     * grown) keep the KB their first one had. No path (no home
     * directory) is not an error: the learner goes on without a KB. */
    if (!path)
        path = util_param_str(UTIL_PARAM_KB);
    if (path && snprintf(t->kb_path, sizeof t->kb_path, "%s", path) >= (int)sizeof t->kb_path)
        t->kb_path[0] = '\0';
    if (!path && kb_default_path(t->kb_path, sizeof t->kb_path) != AI_OK)
        t->kb_path[0] = '\0';
    t->bound = bound;
    c->tuner = (comm_tuner){t, tune_choose, tune_observe, tune_release};
    return AI_OK;
err_tuner:
    free(t);
    return st;
}

const char *tune_kb_path(const ai_comm *c)
{
    const tuner *t = c && c->tuner.choose == tune_choose ? c->tuner.ctx : NULL;
    return t && t->kb_path[0] ? t->kb_path : NULL;
}

/* ------------------------------------------------ introspection (autoinfra.h) */

int ai_comm_arms(const ai_comm *c, ai_coll coll, size_t bytes, ai_algo_opts *out, int max)
{
    if (!c || (unsigned)coll >= AI_COLL_COUNT)
        return 0;
    tune_bucket *b = malloc(sizeof *b);
    if (!b)
        return 0;
    enumerate_arms(c, coll, bytes, b);
    int n = b->s.narms;
    for (int i = 0; i < n && i < max; i++)
        out[i] = (ai_algo_opts){b->algo[i]->name, b->s.arm[i].chunk, b->s.arm[i].channels};
    free(b);
    return n;
}

ai_status_t ai_comm_fingerprint(const ai_comm *c, char out[17])
{
    if (!c)
        return util_fail(AI_ERR_INVALID, "ai_comm_fingerprint: communicator is NULL");
    const tuner *t = c->tuner.choose == tune_choose ? c->tuner.ctx : NULL;
    char desc[256];
    if (t && t->have_fp)
        memcpy(out, t->fp, 17);
    else
        fingerprint(c, out, desc, sizeof desc);
    return AI_OK;
}

ai_status_t ai_comm_choice(const ai_comm *c, ai_coll coll, size_t bytes, ai_choice *out)
{
    if (!c || (unsigned)coll >= AI_COLL_COUNT)
        return util_fail(AI_ERR_INVALID, "ai_comm_choice: bad communicator or collective");
    const tuner *t = c->tuner.choose == tune_choose ? c->tuner.ctx : NULL;
    const tune_bucket *b = t && bytes >= t->min_bytes ? t->b[coll][bucket_of(bytes)] : NULL;
    ai_choice ch = {0};
    if (b && b->ready) {
        const tune_arm_stat *a = &b->s.arm[b->settled ? b->inc : b->cur];
        snprintf(ch.algo, sizeof ch.algo, "%s", a->algo);
        ch.chunk_bytes = a->chunk;
        ch.channels = a->channels;
        ch.source = b->warm ? "kb" : "learned";
        ch.settled = b->settled;
        ch.explored = (int)b->explored;
        int best = bandit_best_measured(&b->s);
        if (best >= 0)
            ch.explore_s = b->explore_s - (double)b->explored * exp(b->s.arm[best].m);
    } else {
        const char *name = ai_coll_auto_algo(c, coll, bytes);
        if (!name)
            return util_fail(AI_ERR_NOTFOUND, "no choice for %s", ai_coll_name(coll));
        snprintf(ch.algo, sizeof ch.algo, "%s", name);
        ch.channels = COMM_CALL_CHANNELS;
        ch.source = comm_select_model(c, coll, bytes) ? "model" : "rule";
    }
    *out = ch;
    return AI_OK;
}

void ai_fault_corrupt_next_frame(unsigned v) { comm_fault_corrupt_next(v); }
