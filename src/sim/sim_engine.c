/*
 * The event engine of one simulated training run (sim.h, docs/sim.md).
 *
 * The run is always in one of four phases: running (progress at the
 * current capacity), stalled for a checkpoint, down (detection plus
 * restart, shrink or grow) or waiting for a node to restart on. Each loop
 * iteration takes the earliest of the pending event times, advances the
 * clock and the progress to it, and handles that one event. Ties go to
 * the end of the run first, then the end of a stall and a background
 * write, then a failure: a run that finishes, or a checkpoint that
 * completes, exactly when a failure strikes is kept.
 */
#include "sim/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum { PH_RUN, PH_CKPT, PH_DOWN, PH_WAIT } phase;

typedef struct repair_q {
    double *at;
    unsigned char *lemon;
    int cap, head, n;
} repair_q;

/*
 * The learned policy's world and mind. Telemetry: before a failure of a
 * predictable cause (one that needs a repair: hardware degrades before it
 * breaks) a warning is raised with probability `recall`, a lead time
 * before it; warnings also come as false alarms. Each warning carries a
 * score in [0, 1] (true ones lean high, false ones low: the `separation`
 * exponent). The predictor knows none of these figures: per score bin it
 * keeps a Beta posterior of "a failure that rolls the job back follows
 * within window_s", updated as warnings resolve, the mean lead of the
 * right ones, and how many failures a believed warning announced. The
 * policy believes a warning whose probability lifts well above the base
 * chance of a failure in a window, checkpoints at it when the lift times
 * the work at stake exceeds the checkpoint's cost, and checkpoints at
 * Daly's interval for the rate it adds while it stands; otherwise at
 * Daly's interval for the failures no believed warning announces.
 */
#define LEARN_BINS 10
#define LEARN_OPEN 1024

typedef struct learner {
    double a[LEARN_BINS], b[LEARN_BINS]; /* Beta posterior per score bin */
    double warn_at;       /* the next failure's true warning (INFINITY: none) */
    double warn_score;
    double next_false;    /* the next false alarm */
    double open_t[LEARN_OPEN]; /* unresolved warnings, oldest first */
    unsigned char open_bin[LEARN_OPEN];
    unsigned char open_sure[LEARN_OPEN]; /* predicted more likely right than not */
    int open_head, open_n;
    long failures, warned; /* failures seen, and those a warning preceded */
    double lead_sum, lead_n; /* warning-to-failure times of the right warnings */
    double unwarned_mtbf_s; /* the MTBF of the failures no believed warning announces */
    double interval_s;    /* the periodic interval for those */
    double alert_until;   /* an alert lasts a window after a warning believed */
    double alert_interval_s; /* the interval while it lasts */
} learner;

typedef struct state {
    const sim_params *p;
    ai_rng *rng;
    double t;
    double done, saved;   /* progress now, and at the last durable checkpoint */
    double pending;       /* async checkpoint's progress, durable at pending_at */
    double pending_at;    /* < 0: none in flight */
    double since;         /* running time since the last checkpoint */
    phase ph;
    double t_up;          /* end of a down phase or checkpoint stall */
    double ckpt_of;       /* progress a stalled checkpoint captures */
    int active_units, missing_units, add_at_up;
    int joining;
    double join_at;       /* < 0: no join in progress */
    int spares_free, spare_lemons;
    int job_lemons;
    int need_nodes;       /* restart waits for this many replacements */
    double rn;            /* a normal node's rate */
    double next_fail;
    int next_cause;
    int fail_i;
    repair_q rq;
    learner lr;
    sim_rl_policy pol;    /* rl: the decoded action policy */
    double drain_at;      /* rl: a drain's spare is ready (< 0: none in flight) */
    int drain_true;       /* ... and the drained node is the one the next failure strikes */
    int warned_fired;     /* the next failure's warning has been raised */
    int rejoined;         /* rejoin_at_work_s has been reached */
    double cur_rate;      /* the job's failure rate the next failure was drawn at */
    sim_event_kind down_kind; /* what a down phase is doing, after detection */
    double detect_until;  /* the last failure's detection ends here */
    sim_result r;
} state;

/* ---- the timeline (sim_params.events) ---- */

static const char *const ev_names[SIM_EV_NKINDS] = {
    "compute", "degraded", "checkpoint", "failure", "detect",
    "restart", "wait", "shrink", "grow", "drain",
};

const char *sim_event_kind_name(sim_event_kind k)
{
    return k >= 0 && k < SIM_EV_NKINDS ? ev_names[k] : "?";
}

static void ev_add(state *s, sim_event_kind kind, double t0, double t1, int cause, double lost)
{
    const sim_params *p = s->p;
    if (!p->events || !(t1 >= t0))
        return;
    if (kind != SIM_EV_FAILURE && s->r.nevents > 0) {
        sim_event *last = &p->events[s->r.nevents - 1];
        if (last->kind == kind && last->t1 == t0) { /* the same state goes on */
            last->t1 = t1;
            return;
        }
    }
    if (s->r.nevents >= p->events_cap) {
        s->r.events_dropped++;
        return;
    }
    p->events[s->r.nevents++] = (sim_event){kind, cause, t0, t1, lost};
}

static double exp_draw(ai_rng *rng, double rate)
{
    if (rate <= 0)
        return INFINITY;
    double u = util_rng_uniform(rng);
    return -log1p(-u) / rate;
}

static double active_nodes(const state *s)
{
    const sim_params *p = s->p;
    return (double)p->nodes * s->active_units / p->units;
}

static double job_rate(const state *s)
{
    double lem = s->job_lemons;
    double normal = active_nodes(s) - lem;
    if (normal < 0)
        normal = 0;
    return s->rn * (normal + s->p->lemon_factor * lem);
}

static void draw_warning(state *s);

static void draw_next_fail(state *s)
{
    const sim_params *p = s->p;
    s->drain_true = 0; /* a node being drained is no longer the one that fails next */
    s->warned_fired = 0;
    if (p->fail_at)
        s->next_fail = s->fail_i < p->nfail_at ? p->fail_at[s->fail_i] : INFINITY;
    else
        s->next_fail = s->t + exp_draw(s->rng, s->cur_rate = job_rate(s));
    s->next_cause = 0;
    if (p->ncauses > 1) {
        double u = util_rng_uniform(s->rng);
        while (s->next_cause < p->ncauses - 1 && u >= p->cause_cum[s->next_cause])
            s->next_cause++;
    }
    if (p->learned || p->rl)
        draw_warning(s);
}

/* The job's rate changed (nodes joined or left): the next failure is drawn
 * again at the new rate, memoryless, unless its warning was already
 * raised: that failure stays, so that a warning raised is never left
 * without the failure it announced. */
static void redraw_for_rate(state *s)
{
    if (s->p->fail_at || s->warned_fired || !isfinite(s->next_fail))
        return;
    double rate = job_rate(s);
    if (!(rate > 0)) {
        s->next_fail = s->lr.warn_at = INFINITY;
        return;
    }
    /* The residual of an exponential clock at rate r, scaled by r / r',
     * is that of a clock at r': the failure and its cause stay, its time
     * moves, its warning keeps its lead. */
    double lead = s->next_fail - s->lr.warn_at;
    s->next_fail = s->t + (s->next_fail - s->t) * s->cur_rate / rate;
    s->cur_rate = rate;
    if ((s->p->learned || s->p->rl) && isfinite(s->lr.warn_at))
        s->lr.warn_at = s->next_fail - lead > s->t ? s->next_fail - lead : s->t;
}

/* ---- the learned policy ---- */

static int score_bin(double score)
{
    int b = (int)(score * LEARN_BINS);
    return b < 0 ? 0 : b >= LEARN_BINS ? LEARN_BINS - 1 : b;
}

/* The true warning of the failure just drawn, if its cause warns. */
static void draw_warning(state *s)
{
    const sim_params *p = s->p;
    learner *l = &s->lr;
    l->warn_at = INFINITY;
    if (!isfinite(s->next_fail) || !p->cause_repair[s->next_cause] ||
        util_rng_uniform(s->rng) >= p->warn_recall)
        return;
    double lead = p->warn_lead_fixed ? p->warn_lead_s : exp_draw(s->rng, 1 / p->warn_lead_s);
    l->warn_at = s->next_fail - lead > s->t ? s->next_fail - lead : s->t;
    l->warn_score = pow(util_rng_uniform(s->rng), 1 / p->warn_separation);
}

/* Warnings older than the window without a failure were false. */
static void learn_expire(state *s)
{
    learner *l = &s->lr;
    while (l->open_n > 0 && l->open_t[l->open_head] + s->p->warn_window_s < s->t) {
        l->b[l->open_bin[l->open_head]] += 1;
        l->open_head = (l->open_head + 1) % LEARN_OPEN;
        l->open_n--;
    }
}

/* A failure: the warnings still open were right. */
static void learn_failure(state *s)
{
    learner *l = &s->lr;
    learn_expire(s);
    l->failures++;
    int caught = 0;
    for (int i = 0; i < l->open_n; i++)
        caught |= l->open_sure[(l->open_head + i) % LEARN_OPEN];
    l->warned += caught;
    l->alert_until = -INFINITY;
    while (l->open_n > 0) {
        l->lead_sum += s->t - l->open_t[l->open_head];
        l->lead_n += 1;
        l->a[l->open_bin[l->open_head]] += 1;
        l->open_head = (l->open_head + 1) % LEARN_OPEN;
        l->open_n--;
    }
    /* Daly's interval for the failures no believed warning announces. */
    double unwarned = 1 - (l->warned + 1.0) / (l->failures + 2.0);
    l->unwarned_mtbf_s = s->p->mtbf_s / (unwarned > 1e-3 ? unwarned : 1e-3);
    l->interval_s = sim_daly_interval(s->p->ckpt_block_s + s->p->ckpt_persist_s, l->unwarned_mtbf_s);
}

static void ckpt_start(state *s);

/* A warning of this score arrives now. */
static void on_warning(state *s, double score)
{
    const sim_params *p = s->p;
    learner *l = &s->lr;
    learn_expire(s);
    int bin = score_bin(score);
    if (l->open_n == LEARN_OPEN) { /* full: the oldest counts as false */
        l->b[l->open_bin[l->open_head]] += 1;
        l->open_head = (l->open_head + 1) % LEARN_OPEN;
        l->open_n--;
    }
    /* What the warning tells beyond the base rate: the chance of a
     * failure within the window anyway is 1 - exp(-window / MTBF), high on
     * a large job, so the predictor's probability counts only above it. */
    double prob = l->a[bin] / (l->a[bin] + l->b[bin]);
    double base = -expm1(-p->warn_window_s / p->mtbf_s);
    double lift = base < 1 ? (prob - base) / (1 - base) : 0;
    int tail = (l->open_head + l->open_n) % LEARN_OPEN;
    l->open_t[tail] = s->t;
    l->open_bin[tail] = (unsigned char)bin;
    l->open_sure[tail] = lift >= 0.5;
    l->open_n++;
    if (lift < 0.5)
        return; /* more likely a false alarm: the periodic interval covers it */
    /* Believed: checkpoint now if the work at stake is worth it, and while
     * the warning stands (a window) checkpoint at Daly's interval for the
     * failure rate it adds, lift spread over the lead the predictor has
     * seen (prior: half a window). */
    double cost = p->ckpt_block_s + p->ckpt_persist_s;
    double lead = (l->lead_sum + p->warn_window_s / 2) / (l->lead_n + 1);
    double tau = sim_daly_interval(cost, 1 / (1 / l->unwarned_mtbf_s + lift / lead));
    if (s->t >= l->alert_until || tau < l->alert_interval_s)
        l->alert_interval_s = tau;
    l->alert_until = s->t + p->warn_window_s;
    if (s->ph == PH_RUN && lift * (s->done - s->saved) > cost)
        ckpt_start(s);
}

/* Take one node from the spare pool into the job. */
static void take_spare(state *s)
{
    int lemon = s->spare_lemons > 0 &&
                util_rng_uniform(s->rng) * s->spares_free < (double)s->spare_lemons;
    s->spares_free--;
    if (lemon) {
        s->spare_lemons--;
        s->job_lemons++;
    }
}

static void try_join(state *s)
{
    if ((s->p->recovery != SIM_SHRINK && !s->p->rl) || s->join_at >= 0)
        return;
    int k = AI_MIN(s->missing_units, s->spares_free);
    if (k <= 0)
        return;
    for (int i = 0; i < k; i++)
        take_spare(s);
    s->missing_units -= k;
    s->joining = k;
    s->join_at = s->t + s->p->join_s;
}

static void go_down(state *s, double until, sim_event_kind kind)
{
    s->ph = PH_DOWN;
    s->down_kind = kind;
    s->t_up = until;
}

static void try_restart(state *s, double after)
{
    while (s->need_nodes > 0 && s->spares_free > 0) {
        take_spare(s);
        s->need_nodes--;
    }
    if (s->need_nodes > 0) {
        s->ph = PH_WAIT;
        s->t_up = INFINITY;
    } else {
        go_down(s, s->t + after, SIM_EV_RESTART);
    }
}

static void on_failure(state *s)
{
    const sim_params *p = s->p;
    s->r.interruptions++;
    s->detect_until = s->t + p->detect_s;
    if (p->fail_at)
        s->fail_i++;
    int cause = s->next_cause;
    s->r.by_cause[cause]++;
    int repair = p->cause_repair[cause];

    /* Which node: a lemon with probability its share of the job's rate. */
    int lemon = 0;
    if (s->job_lemons > 0) {
        double rate = job_rate(s);
        lemon = util_rng_uniform(s->rng) * rate < s->rn * p->lemon_factor * s->job_lemons;
    }
    if (repair) {
        if (lemon)
            s->job_lemons--;
        repair_q *q = &s->rq;
        int tail = (q->head + q->n) % q->cap;
        q->at[tail] = s->t + p->repair_s;
        q->lemon[tail] = (unsigned char)lemon;
        q->n++;
    }
    /* A checkpoint still being persisted from host memory is lost with
     * the node's memory; a stalled one never completes. */
    s->pending_at = -1;

    /* Under live shrink the survivors drop the failed node's replica and
     * redo only the step in flight; a cause marked `restart` (a bug that
     * hits every rank, corrupted data) still rolls the whole job back. A
     * node that only lost its process (no repair) is healthy and can
     * rejoin as a spare at once. */
    int shrink_mode = p->recovery == SIM_SHRINK && s->active_units > 1;
    int rollback = !shrink_mode || p->cause_restart[cause];
    /* The predictor learns what costs a rollback: under a live shrink, a
     * warning before a survived failure counts as a false alarm. */
    if (p->learned && rollback)
        learn_failure(s);
    if (s->drain_at >= 0) { /* the swap in flight is abandoned; its spare goes back */
        s->drain_at = -1;
        s->spares_free++;
    }
    if (shrink_mode) {
        if (repair) {
            s->active_units--;
            s->missing_units++;
        } else if (!rollback) {
            s->active_units--;
            s->missing_units++;
            s->spares_free++;
        }
    } else if (repair) {
        s->need_nodes++;
    }
    if (rollback) {
        ev_add(s, SIM_EV_FAILURE, s->t, s->t, cause, s->done - s->saved);
        s->r.lost_s += s->done - s->saved;
        s->done = s->saved;
        s->since = 0;
        try_restart(s, p->detect_s + p->restart_s);
    } else {
        double partial = fmod(s->done, p->step_s);
        if (partial > s->done - s->saved)
            partial = s->done - s->saved;
        if (partial > 0) {
            s->r.lost_s += partial;
            s->done -= partial;
        }
        ev_add(s, SIM_EV_FAILURE, s->t, s->t, cause, partial > 0 ? partial : 0);
        go_down(s, s->t + p->detect_s + p->shrink_s, SIM_EV_SHRINK);
    }
    try_join(s);
    draw_next_fail(s);
}

static void on_repair(state *s)
{
    repair_q *q = &s->rq;
    int lemon = q->lemon[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    s->spares_free++;
    s->spare_lemons += lemon;
    if (s->ph == PH_WAIT) {
        try_restart(s, s->p->restart_s);
    } else {
        try_join(s);
    }
}

/* Start a checkpoint stall now. */
static void ckpt_start(state *s)
{
    const sim_params *p = s->p;
    double begin = s->t;
    if (p->ckpt_persist_s > 0 && s->pending_at > begin)
        begin = s->pending_at; /* host buffers busy: wait for the persist in flight */
    s->ph = PH_CKPT;
    s->ckpt_of = s->done;
    s->t_up = begin + p->ckpt_block_s;
    /* The oracle's checkpoint ends exactly at the failure (not a rounding
     * error after it). */
    if (p->oracle && p->ckpt_persist_s <= 0 && fabs(s->t_up - s->next_fail) <= 1e-9 * s->next_fail)
        s->t_up = s->next_fail;
}

static void ckpt_end(state *s)
{
    const sim_params *p = s->p;
    s->r.checkpoints++;
    s->since = 0;
    if (p->ckpt_persist_s > 0) {
        if (s->pending_at >= 0 && s->pending_at <= s->t)
            s->saved = s->pending;
        s->pending = s->ckpt_of;
        s->pending_at = s->t + p->ckpt_persist_s;
        if (p->oracle && fabs(s->pending_at - s->next_fail) <= 1e-9 * s->next_fail)
            s->pending_at = s->next_fail;
    } else {
        s->saved = s->ckpt_of;
    }
    s->ph = PH_RUN;
}

/* When the running job next starts a checkpoint (INFINITY: not before
 * another event). */
static double ckpt_due(const state *s)
{
    const sim_params *p = s->p;
    if (p->oracle) {
        if (!isfinite(s->next_fail))
            return INFINITY;
        double at = s->next_fail - p->ckpt_block_s - p->ckpt_persist_s;
        if (at > s->t)
            return at;
        return s->done > s->saved ? s->t : INFINITY; /* too late for a whole one: try */
    }
    double interval = p->interval_s;
    if (p->rl)
        interval *= s->pol.interval_mult;
    if (p->learned)
        interval = s->t < s->lr.alert_until ? s->lr.alert_interval_s : s->lr.interval_s;
    if (interval <= 0)
        return INFINITY;
    double left = interval - s->since;
    return s->t + (left > 0 ? left : 0);
}

/* ---- the action policy ---- */

/* The node warned about leaves the job for repair (or inspection, after a
 * false alarm: the policy cannot tell). When it was the node the next
 * failure was to strike, that failure never reaches the job. */
static void node_leaves(state *s, int was_true)
{
    repair_q *q = &s->rq;
    if (q->n < q->cap) {
        int tail = (q->head + q->n) % q->cap;
        q->at[tail] = s->t + s->p->repair_s;
        q->lemon[tail] = 0;
        q->n++;
    } else {
        s->spares_free++; /* no room to track it: it is back at once */
    }
    if (was_true) {
        s->r.averted++;
        if (s->p->fail_at)
            s->fail_i++;
        draw_next_fail(s);
    }
}

/* A warning of this score arrives now; was_true: it announces the next
 * failure. The policy acts only while the job runs. */
static void rl_on_warning(state *s, double score, int was_true)
{
    const sim_params *p = s->p;
    const sim_rl_policy *q = &s->pol;
    if ((s->ph == PH_DOWN || s->ph == PH_WAIT) && score >= q->drain_score && s->drain_at < 0 &&
        s->spares_free > 0 && s->spares_free > q->reserve * p->spares) {
        /* The job is down (a restart, shrink or grow rebuilds the group):
         * the spare replaces the node in that same rebuild, at no cost of
         * its own. */
        take_spare(s);
        s->r.drains++;
        node_leaves(s, was_true);
        return;
    }
    if (s->ph != PH_RUN)
        return;
    if (score >= q->drain_score && s->drain_at < 0 && s->spares_free > 0 &&
        s->spares_free > q->reserve * p->spares) {
        /* Drain: a spare is readied while the job runs (join_s), then the
         * group swaps the node out and the spare in (a shrink and a grow),
         * with no rollback. */
        take_spare(s);
        s->drain_at = s->t + p->join_s;
        s->drain_true = was_true;
        return;
    }
    if (score >= q->exclude_score && s->active_units > 1) {
        /* Exclude: drop the node's unit now and go on shrunk until a
         * spare (or a repaired node) joins. */
        s->r.excludes++;
        s->active_units--;
        s->missing_units++;
        node_leaves(s, was_true);
        if (!was_true)
            redraw_for_rate(s); /* fewer nodes: a lower rate from now on */
        go_down(s, s->t + p->shrink_s, SIM_EV_SHRINK);
        try_join(s);
        return;
    }
    double cost = p->ckpt_block_s + p->ckpt_persist_s;
    if (score >= q->ckpt_score && s->done - s->saved >= q->ckpt_stake * cost)
        ckpt_start(s);
}

/* The drain's spare is ready: swap at the next moment the job runs. */
static void rl_drain(state *s)
{
    if (s->ph != PH_RUN) {
        s->drain_at = s->t_up; /* after the stall in progress */
        if (!isfinite(s->drain_at)) {
            s->drain_at = -1;
            s->spares_free++;
        }
        return;
    }
    s->drain_at = -1;
    s->r.drains++;
    node_leaves(s, s->drain_true);
    go_down(s, s->t + s->p->shrink_s + s->p->grow_s, SIM_EV_DRAIN);
}

/* The parameters a run cannot start from, named before any state is
 * built, so that a caller's mistake never reads as a simulated outcome. */
static ai_status_t run_check(const sim_params *p, const ai_rng *rng, const sim_result *out)
{
    if (!p || !out || (!rng && !p->fail_at))
        return util_fail(AI_ERR_INVALID, "sim_run: NULL argument");
    if (!(p->work_s > 0) && !(p->horizon_s > 0))
        return util_fail(AI_ERR_INVALID, "sim_run: neither work nor a horizon");
    if (p->nodes < 1 || p->units < 1 || p->units > p->nodes * 64 || !(p->step_s > 0) ||
        p->ncauses < 1 || p->ncauses > SIM_MAX_CAUSES || p->lemon_nodes < 0 ||
        p->lemon_nodes > p->nodes || p->spares < 0 || !(p->rate_per_node_s >= 0))
        return util_fail(AI_ERR_INVALID, "sim_run: parameters out of range");
    return AI_OK;
}

/* The state at time 0: the whole job up, every spare free, the repair
 * queue sized for every node at once, the learner at its prior and the
 * first failure drawn. The draws come in a fixed order (false alarms,
 * then the failure) so that a seed gives the same run every time. */
static ai_status_t run_init(state *s, const sim_params *p, ai_rng *rng)
{
    memset(s, 0, sizeof *s);
    s->p = p;
    s->rng = rng;
    s->active_units = p->units;
    s->spares_free = p->spares;
    s->job_lemons = p->lemon_nodes;
    s->pending_at = -1;
    s->detect_until = -INFINITY;
    s->join_at = -1;
    s->drain_at = -1;
    s->ph = PH_RUN;
    double lf = p->lemon_factor > 0 ? p->lemon_factor : 1;
    s->rn = p->rate_per_node_s * p->nodes / (p->nodes - p->lemon_nodes + lf * p->lemon_nodes);
    s->rq.cap = p->nodes + p->spares + 1;
    s->rq.at = malloc(sizeof(double) * (size_t)s->rq.cap);
    s->rq.lemon = malloc((size_t)s->rq.cap);
    if (!s->rq.at || !s->rq.lemon) {
        free(s->rq.at);
        free(s->rq.lemon);
        return util_fail(AI_ERR_NOMEM, "sim_run: repair queue of %d", s->rq.cap);
    }
    if (p->learned) {
        for (int b = 0; b < LEARN_BINS; b++)
            s->lr.a[b] = s->lr.b[b] = 1;
        s->lr.next_false = exp_draw(rng, p->false_per_s);
        s->lr.unwarned_mtbf_s = 2 * p->mtbf_s; /* prior: half the failures warned */
        s->lr.interval_s = sim_daly_interval(p->ckpt_block_s + p->ckpt_persist_s, 2 * p->mtbf_s);
        s->lr.alert_until = -INFINITY;
    }
    if (p->rl) {
        sim_rl_decode(p->rl_theta, &s->pol);
        s->lr.next_false = exp_draw(rng, p->false_per_s);
    }
    draw_next_fail(s);
    return AI_OK;
}

/* The job's throughput now as a share of the whole job's: the units up,
 * or the cores they share, or a measured shrunk step time. */
static double run_capacity(const state *s)
{
    const sim_params *p = s->p;
    double cap = (double)s->active_units / p->units;
    if (p->shared_cores > 0) /* ranks beyond the cores only share them */
        cap = (double)AI_MIN(s->active_units, p->shared_cores) / AI_MIN(p->units, p->shared_cores);
    if (p->shrunk_step_s > 0 && s->active_units < p->units)
        cap = p->step_s / p->shrunk_step_s;
    return cap;
}

/* The events a run loop iteration chooses between. */
typedef enum {
    EV_DONE, EV_FAIL, EV_PHASE_END, EV_CKPT_START, EV_REPAIR, EV_JOIN, EV_PERSIST,
    EV_WARNING, EV_FALSE_ALARM, EV_DRAIN_READY, EV_REJOIN,
} run_event;

/* The earliest pending event and its time. The order of the tests is
 * the tie rule (the file's head): on equal times the earlier test wins,
 * so a checkpoint that completes exactly when a failure strikes is kept. */
static run_event next_event(const state *s, double cap, double *at)
{
    const sim_params *p = s->p;
    double t_done = INFINITY, t_ck = INFINITY, t_phase = INFINITY;
    if (s->ph == PH_RUN) {
        if (p->work_s > 0)
            t_done = s->t + (p->work_s - s->done) / cap;
        t_ck = ckpt_due(s);
    } else {
        t_phase = s->t_up;
    }
    double t_rep = s->rq.n > 0 ? s->rq.at[s->rq.head] : INFINITY;
    double t_join = s->join_at >= 0 ? s->join_at : INFINITY;
    double t_persist = s->pending_at >= 0 ? s->pending_at : INFINITY;
    int warns = p->learned || p->rl;
    double t_warn = warns ? s->lr.warn_at : INFINITY;
    double t_false = warns ? s->lr.next_false : INFINITY;
    double t_drain = s->drain_at >= 0 ? s->drain_at : INFINITY;
    double t_rejoin = INFINITY;
    if (p->rejoin_at_work_s > 0 && !s->rejoined && s->ph == PH_RUN && s->rq.n > 0)
        t_rejoin = s->t + AI_MAX(0.0, p->rejoin_at_work_s - s->done) / cap;
    double t_fail = s->next_fail;

    double tn = t_done;
    run_event ev = EV_DONE;
    if (t_phase < tn) { tn = t_phase; ev = EV_PHASE_END; }
    if (t_persist < tn) { tn = t_persist; ev = EV_PERSIST; }
    if (t_fail < tn) { tn = t_fail; ev = EV_FAIL; }
    if (t_ck < tn) { tn = t_ck; ev = EV_CKPT_START; }
    if (t_rep < tn) { tn = t_rep; ev = EV_REPAIR; }
    if (t_join < tn) { tn = t_join; ev = EV_JOIN; }
    if (t_warn < tn) { tn = t_warn; ev = EV_WARNING; }
    if (t_false < tn) { tn = t_false; ev = EV_FALSE_ALARM; }
    if (t_drain < tn) { tn = t_drain; ev = EV_DRAIN_READY; }
    if (t_rejoin < tn) { tn = t_rejoin; ev = EV_REJOIN; }
    *at = tn;
    return ev;
}

/* The clock moves to tn: the time between goes to progress, a checkpoint
 * stall or downtime, and onto the timeline as the state it was spent in
 * (a down phase's first part is detection). */
static void advance(state *s, double tn, double cap)
{
    const sim_params *p = s->p;
    double dt = tn - s->t;
    if (dt > 0) {
        if (s->ph == PH_RUN) {
            s->done += dt * cap;
            s->since += dt;
            if (cap < 1)
                s->r.degraded_s += dt;
            ev_add(s, s->active_units < p->units ? SIM_EV_DEGRADED : SIM_EV_COMPUTE, s->t, tn, -1, 0);
        } else if (s->ph == PH_CKPT) {
            s->r.ckpt_s += dt;
            ev_add(s, SIM_EV_CHECKPOINT, s->t, tn, -1, 0);
        } else {
            s->r.down_s += dt;
            double t = s->t;
            if (t < s->detect_until) { /* the failure is not yet detected */
                double e = s->detect_until < tn ? s->detect_until : tn;
                ev_add(s, SIM_EV_DETECT, t, e, -1, 0);
                t = e;
            }
            if (tn > t)
                ev_add(s, s->ph == PH_WAIT ? SIM_EV_WAIT : s->down_kind, t, tn, -1, 0);
        }
    }
    s->t = tn;
}

/* A stall ends: a checkpoint's completes (and joiners that became ready
 * during it grow the group next); a down phase's brings the job back up
 * with the units that joined meanwhile. */
static void on_phase_end(state *s)
{
    if (s->ph == PH_CKPT) {
        ckpt_end(s);
        if (s->add_at_up > 0) /* joiners became ready during the stall */
            go_down(s, s->t + s->p->grow_s, SIM_EV_GROW);
    } else {
        s->ph = PH_RUN;
        if (s->add_at_up > 0) {
            s->active_units += s->add_at_up;
            s->add_at_up = 0;
            redraw_for_rate(s); /* more nodes: a higher rate from now on */
        }
    }
}

/* Joiners are ready: a running group stalls for the grow; a stalled one
 * takes them in when its stall ends. */
static void on_join_ready(state *s)
{
    const sim_params *p = s->p;
    s->add_at_up += s->joining;
    s->joining = 0;
    s->join_at = -1;
    if (s->ph == PH_RUN) {
        go_down(s, s->t + p->grow_s, SIM_EV_GROW);
    } else if (s->ph == PH_DOWN && s->t_up < s->t + p->grow_s) {
        /* Fold into the current stall: grown when it ends (after a
         * checkpoint stall, by a grow of its own). */
        s->t_up = s->t + p->grow_s;
    }
    try_join(s);
}

/* A warning reaches the policy in force: the predictor's (learned) or
 * the action policy's (rl). */
static void on_any_warning(state *s, double score, int was_true)
{
    if (s->p->rl)
        rl_on_warning(s, score, was_true);
    else
        on_warning(s, score);
}

/* One event other than the end of the work, at the current time. */
static void handle_event(state *s, run_event ev)
{
    const sim_params *p = s->p;
    switch (ev) {
    case EV_DONE:
        break;
    case EV_FAIL:
        on_failure(s);
        break;
    case EV_PHASE_END:
        on_phase_end(s);
        break;
    case EV_CKPT_START:
        ckpt_start(s);
        break;
    case EV_REPAIR:
        on_repair(s);
        break;
    case EV_JOIN:
        on_join_ready(s);
        break;
    case EV_PERSIST:
        s->saved = s->pending;
        s->pending_at = -1;
        break;
    case EV_WARNING:
        s->lr.warn_at = INFINITY;
        s->warned_fired = 1;
        s->r.warnings_true++;
        on_any_warning(s, s->lr.warn_score, 1);
        break;
    case EV_FALSE_ALARM: {
        s->lr.next_false = s->t + exp_draw(s->rng, p->false_per_s);
        double score = 1 - pow(util_rng_uniform(s->rng), 1 / p->warn_separation);
        s->r.warnings_false++;
        on_any_warning(s, score, 0);
        break;
    }
    case EV_DRAIN_READY:
        rl_drain(s);
        break;
    case EV_REJOIN: /* the node first in repair is back now */
        s->rejoined = 1;
        s->rq.at[s->rq.head] = s->t;
        on_repair(s);
        break;
    }
}

ai_status_t sim_run(const sim_params *p, ai_rng *rng, sim_result *out)
{
    ai_status_t st = run_check(p, rng, out);
    if (st != AI_OK)
        return st;
    state s;
    if ((st = run_init(&s, p, rng)) != AI_OK)
        return st;
    double max_wall = p->max_wall_s > 0 ? p->max_wall_s : 1000 * (p->work_s > 0 ? p->work_s : 0);
    if (p->horizon_s > 0)
        max_wall = p->horizon_s;

    for (;;) {
        double cap = run_capacity(&s);
        double tn;
        run_event ev = next_event(&s, cap, &tn);
        int stop = 0;
        if (tn >= max_wall) {
            tn = max_wall;
            stop = 1;
        }
        advance(&s, tn, cap);
        if (stop) {
            s.r.finished = p->horizon_s > 0 && !(p->work_s > 0);
            break;
        }
        if (ev == EV_DONE) {
            s.done = p->work_s;
            s.r.finished = 1;
            break;
        }
        handle_event(&s, ev);
    }
    s.r.wall_s = s.t;
    s.r.useful_s = s.done;
    free(s.rq.at);
    free(s.rq.lemon);
    *out = s.r;
    return AI_OK;
}

double sim_young_interval(double delta, double m) { return sqrt(2 * delta * m); }

double sim_daly_interval(double delta, double m)
{
    if (delta >= 2 * m)
        return m;
    double x = delta / (2 * m);
    return sqrt(2 * delta * m) * (1 + sqrt(x) / 3 + x / 9) - delta;
}

double sim_ettr_first_order(double tau, double c, double r, double m)
{
    if (!(tau > 0) || !(m > 0))
        return NAN;
    return 1 - c / tau - (tau / 2 + r) / m;
}

double sim_checkpoint_bytes(const topo_model *m, const topo_training *t)
{
    int mixed = t->precision != TOPO_FP32;
    double weight = mixed ? 2 : 4;
    double opt = t->optimizer == TOPO_OPT_ADAM ? (mixed ? 12 : 8) : (mixed ? 8 : 4);
    return topo_model_params(m) * (weight + opt);
}
