/*
 * The event engine of one simulated training run (sim.h, docs/sim.md).
 *
 * The run is always in one of four phases: running (progress at the
 * current capacity), stalled for a checkpoint, down (detection plus
 * restart, shrink or grow) or waiting for a node to restart on. Each loop
 * iteration takes the earliest of the pending event times, advances the
 * clock and the progress to it, and handles that one event; ties go to
 * the end of the run first, then failures, so a run that finishes exactly
 * when a failure would strike is finished.
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
    int fail_i;
    repair_q rq;
    sim_result r;
} state;

static double exp_draw(ai_rng *rng, double rate)
{
    if (rate <= 0)
        return INFINITY;
    double u = ai_rng_uniform(rng);
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

static void draw_next_fail(state *s)
{
    const sim_params *p = s->p;
    if (p->fail_at) {
        s->next_fail = s->fail_i < p->nfail_at ? p->fail_at[s->fail_i] : INFINITY;
        return;
    }
    s->next_fail = s->t + exp_draw(s->rng, job_rate(s));
}

/* Take one node from the spare pool into the job. */
static void take_spare(state *s)
{
    int lemon = s->spare_lemons > 0 &&
                ai_rng_uniform(s->rng) * s->spares_free < (double)s->spare_lemons;
    s->spares_free--;
    if (lemon) {
        s->spare_lemons--;
        s->job_lemons++;
    }
}

static void try_join(state *s)
{
    if (s->p->recovery != SIM_SHRINK || s->join_at >= 0)
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

static void go_down(state *s, double until)
{
    s->ph = PH_DOWN;
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
        go_down(s, s->t + after);
    }
}

static void on_failure(state *s)
{
    const sim_params *p = s->p;
    s->r.interruptions++;
    if (p->fail_at)
        s->fail_i++;
    int cause = 0;
    if (p->ncauses > 1) {
        double u = ai_rng_uniform(s->rng);
        while (cause < p->ncauses - 1 && u >= p->cause_cum[cause])
            cause++;
    }
    s->r.by_cause[cause]++;
    int repair = p->cause_repair[cause];

    /* Which node: a lemon with probability its share of the job's rate. */
    int lemon = 0;
    if (s->job_lemons > 0) {
        double rate = job_rate(s);
        lemon = ai_rng_uniform(s->rng) * rate < s->rn * p->lemon_factor * s->job_lemons;
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
        go_down(s, s->t + p->detect_s + p->shrink_s);
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
    if (p->interval_s <= 0)
        return INFINITY;
    double left = p->interval_s - s->since;
    return s->t + (left > 0 ? left : 0);
}

ai_status_t sim_run(const sim_params *p, ai_rng *rng, sim_result *out)
{
    if (!p || !out || (!rng && !p->fail_at))
        return ai_fail(AI_ERR_INVALID, "sim_run: NULL argument");
    if (!(p->work_s > 0) && !(p->horizon_s > 0))
        return ai_fail(AI_ERR_INVALID, "sim_run: neither work nor a horizon");
    if (p->nodes < 1 || p->units < 1 || p->units > p->nodes * 64 || !(p->step_s > 0) ||
        p->ncauses < 1 || p->ncauses > SIM_MAX_CAUSES || p->lemon_nodes < 0 ||
        p->lemon_nodes > p->nodes || p->spares < 0 || !(p->rate_per_node_s >= 0))
        return ai_fail(AI_ERR_INVALID, "sim_run: parameters out of range");

    state s;
    memset(&s, 0, sizeof s);
    s.p = p;
    s.rng = rng;
    s.active_units = p->units;
    s.spares_free = p->spares;
    s.job_lemons = p->lemon_nodes;
    s.pending_at = -1;
    s.join_at = -1;
    s.ph = PH_RUN;
    double lf = p->lemon_factor > 0 ? p->lemon_factor : 1;
    s.rn = p->rate_per_node_s * p->nodes / (p->nodes - p->lemon_nodes + lf * p->lemon_nodes);
    s.rq.cap = p->nodes + p->spares + 1;
    s.rq.at = malloc(sizeof(double) * (size_t)s.rq.cap);
    s.rq.lemon = malloc((size_t)s.rq.cap);
    if (!s.rq.at || !s.rq.lemon) {
        free(s.rq.at);
        free(s.rq.lemon);
        return ai_fail(AI_ERR_NOMEM, "sim_run: repair queue of %d", s.rq.cap);
    }
    double max_wall = p->max_wall_s > 0 ? p->max_wall_s : 1000 * (p->work_s > 0 ? p->work_s : 0);
    if (p->horizon_s > 0)
        max_wall = p->horizon_s;
    draw_next_fail(&s);

    for (;;) {
        double cap = (double)s.active_units / p->units;
        /* Candidate times. */
        double t_done = INFINITY, t_ck = INFINITY, t_phase = INFINITY;
        if (s.ph == PH_RUN) {
            if (p->work_s > 0)
                t_done = s.t + (p->work_s - s.done) / cap;
            t_ck = ckpt_due(&s);
        } else {
            t_phase = s.t_up;
        }
        double t_rep = s.rq.n > 0 ? s.rq.at[s.rq.head] : INFINITY;
        double t_join = s.join_at >= 0 ? s.join_at : INFINITY;
        double t_persist = s.pending_at >= 0 ? s.pending_at : INFINITY;
        double t_fail = s.next_fail;

        /* On ties the earlier test wins: a checkpoint that completes
         * exactly when a failure strikes is kept. */
        double tn = t_done;
        int ev = 0; /* 0 done, 1 fail, 2 phase end, 3 ckpt start, 4 repair, 5 join, 6 persist */
        if (t_phase < tn) { tn = t_phase; ev = 2; }
        if (t_persist < tn) { tn = t_persist; ev = 6; }
        if (t_fail < tn) { tn = t_fail; ev = 1; }
        if (t_ck < tn) { tn = t_ck; ev = 3; }
        if (t_rep < tn) { tn = t_rep; ev = 4; }
        if (t_join < tn) { tn = t_join; ev = 5; }
        int stop = 0;
        if (tn >= max_wall) {
            tn = max_wall;
            stop = 1;
        }

        double dt = tn - s.t;
        if (dt > 0) {
            if (s.ph == PH_RUN) {
                s.done += dt * cap;
                s.since += dt;
                if (cap < 1)
                    s.r.degraded_s += dt;
            } else if (s.ph == PH_CKPT) {
                s.r.ckpt_s += dt;
            } else {
                s.r.down_s += dt;
            }
        }
        s.t = tn;
        if (stop) {
            s.r.finished = p->horizon_s > 0 && !(p->work_s > 0);
            break;
        }
        if (ev == 0) {
            s.done = p->work_s;
            s.r.finished = 1;
            break;
        }
        switch (ev) {
        case 1:
            on_failure(&s);
            break;
        case 2:
            if (s.ph == PH_CKPT) {
                ckpt_end(&s);
                if (s.add_at_up > 0) /* joiners became ready during the stall */
                    go_down(&s, s.t + p->grow_s);
            } else {
                s.ph = PH_RUN;
                if (s.add_at_up > 0) {
                    s.active_units += s.add_at_up;
                    s.add_at_up = 0;
                    draw_next_fail(&s); /* more nodes: a higher rate from now on */
                }
            }
            break;
        case 3:
            ckpt_start(&s);
            break;
        case 4:
            on_repair(&s);
            break;
        case 5:
            if (s.ph == PH_RUN) {
                /* The joiners are ready: the group stalls for the grow. */
                s.add_at_up += s.joining;
                s.joining = 0;
                s.join_at = -1;
                go_down(&s, s.t + p->grow_s);
                try_join(&s);
            } else {
                /* Fold into the current stall: grown when it ends (after a
                 * checkpoint stall, by a grow of its own). */
                s.add_at_up += s.joining;
                s.joining = 0;
                s.join_at = -1;
                if (s.ph == PH_DOWN && s.t_up < s.t + p->grow_s)
                    s.t_up = s.t + p->grow_s;
                try_join(&s);
            }
            break;
        case 6:
            s.saved = s.pending;
            s.pending_at = -1;
            break;
        }
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
