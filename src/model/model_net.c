/*
 * Network cost model: lower bounds by cuts, and algorithm schedules costed
 * step by step with shared resources (model_net.h explains the model).
 */
#include "model/model_net.h"
#include "topo/topo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ai_status_t model_net_alloc(model_net *n, int nranks, int nhosts, int nracks)
{
    memset(n, 0, sizeof *n);
    n->nranks = nranks;
    n->nhosts = nhosts;
    n->nracks = nracks;
    n->host_of = calloc((size_t)nranks, sizeof(int));
    n->nic_Bps = calloc((size_t)nhosts, sizeof(double));
    n->lat_s = calloc((size_t)nhosts, sizeof(double));
    n->rack_of = malloc((size_t)nhosts * sizeof(int));
    n->up_Bps = calloc((size_t)(nracks > 0 ? nracks : 1), sizeof(double));
    if (!n->host_of || !n->nic_Bps || !n->lat_s || !n->rack_of || !n->up_Bps) {
        model_net_free(n);
        return util_fail(AI_ERR_NOMEM, "network model");
    }
    for (int h = 0; h < nhosts; h++)
        n->rack_of[h] = -1;
    n->mem_Bps = 4e9;
    n->mem_lat_s = 1e-6;
    return AI_OK;
}

void model_net_free(model_net *n)
{
    free(n->host_of);
    free(n->nic_Bps);
    free(n->lat_s);
    free(n->rack_of);
    free(n->up_Bps);
    memset(n, 0, sizeof *n);
}

ai_status_t model_net_from_cluster(const topo_cluster *cl, int ranks_per_node, model_net *out)
{
    int nranks = 0;
    for (int h = 0; h < cl->nnodes; h++)
        nranks += ranks_per_node > 0 ? ranks_per_node : cl->groups[cl->nodes[h].group].devices_per_node;
    ai_status_t st = model_net_alloc(out, nranks, cl->nnodes, cl->nracks);
    if (st != AI_OK)
        return st;
    int r = 0;
    double mem = INFINITY;
    for (int h = 0; h < cl->nnodes; h++) {
        const topo_node *nd = &cl->nodes[h];
        int k = ranks_per_node > 0 ? ranks_per_node : cl->groups[nd->group].devices_per_node;
        for (int i = 0; i < k; i++)
            out->host_of[r++] = h;
        out->nic_Bps[h] = nd->nic_count * nd->nic_bw_Gbps * 1e9 / 8;
        out->lat_s[h] = nd->nic_latency_us * 1e-6;
        out->rack_of[h] = nd->rack;
        mem = AI_MIN(mem, nd->intra_bw_GBps * 1e9);
    }
    for (int k = 0; k < cl->nracks; k++)
        out->up_Bps[k] = cl->racks[k].uplink_Gbps * 1e9 / 8;
    if (isfinite(mem) && mem > 0)
        out->mem_Bps = mem;
    return AI_OK;
}

/* ------------------------------------------------------------ bounds */

/* Bytes that must leave (out) and enter (in) a set of ranks holding the
 * fraction f of all ranks (0 < f < 1), root inside or not. */
static void cut_volume(ai_coll coll, double n, double f, int has_root, int p, double *out, double *in)
{
    switch (coll) {
    case AI_ALLREDUCE:
        *out = *in = n;
        break;
    case AI_ALLGATHER: /* n is the gathered total */
        *out = n * f;
        *in = n * (1 - f);
        break;
    case AI_REDUCE_SCATTER: /* n is each rank's input */
        *out = n * (1 - f);
        *in = n * f;
        break;
    case AI_ALLTOALL: /* n is each rank's send buffer */
        *out = *in = n * f * p * (1 - f);
        break;
    case AI_BROADCAST:
        *out = has_root ? n : 0;
        *in = has_root ? 0 : n;
        break;
    case AI_REDUCE:
        *out = has_root ? 0 : n;
        *in = has_root ? n : 0;
        break;
    default:
        *out = *in = 0;
    }
}

double model_net_bound(const model_net *n, ai_coll coll, double bytes)
{
    int p = n->nranks;
    if (p <= 1 || n->nhosts <= 1)
        return 0; /* within one host the network bound is void */
    double t = 0, minlat = INFINITY, total_bw = 0;
    int *count = calloc((size_t)n->nhosts + (size_t)n->nracks, sizeof(int));
    if (!count)
        return 0;
    int *rcount = count + n->nhosts;
    for (int r = 0; r < p; r++) {
        count[n->host_of[r]]++;
        if (n->rack_of[n->host_of[r]] >= 0)
            rcount[n->rack_of[n->host_of[r]]]++;
    }
    for (int h = 0; h < n->nhosts; h++) {
        double out, in, f = (double)count[h] / p;
        if (count[h] == 0 || count[h] == p)
            continue;
        cut_volume(coll, bytes, f, n->host_of[0] == h, p, &out, &in);
        t = AI_MAX(t, AI_MAX(out, in) / n->nic_Bps[h]);
        minlat = AI_MIN(minlat, n->lat_s[h]);
        total_bw += n->nic_Bps[h];
    }
    for (int k = 0; k < n->nracks; k++) {
        double out, in, f = (double)rcount[k] / p;
        if (rcount[k] == 0 || rcount[k] == p)
            continue;
        cut_volume(coll, bytes, f, n->rack_of[n->host_of[0]] == k, p, &out, &in);
        t = AI_MAX(t, AI_MAX(out, in) / n->up_Bps[k]);
    }
    /* Total traffic: every host's data must leave it and the result come
     * back, 2 (h-1) n in all (Patarasuk and Yuan). */
    if (coll == AI_ALLREDUCE && total_bw > 0)
        t = AI_MAX(t, 2.0 * (n->nhosts - 1) * bytes / total_bw);
    free(count);
    /* Latency: information from every rank must reach every other, which
     * takes ceil(log2 p) rounds at least for the symmetric collectives. */
    if (isfinite(minlat))
        t = AI_MAX(t, ceil(log2(p)) * minlat);
    return t;
}

/* ---------------------------------------------------- step schedules */

typedef struct sched {
    const model_net *n;
    double *load;  /* per resource bytes in the current step */
    double maxlat; /* of the current step's flows */
    int nflows;
    double total;  /* seconds so far */
} sched;

/* Resources: [0,h) NIC out, [h,2h) NIC in, [2h,3h) memory,
 * then racks: [3h, 3h+r) uplink out, [3h+r, 3h+2r) uplink in. */
static int nres(const model_net *n) { return 3 * n->nhosts + 2 * n->nracks; }

static void flow(sched *s, int src, int dst, double bytes)
{
    const model_net *n = s->n;
    if (src == dst || bytes <= 0)
        return;
    int hs = n->host_of[src], hd = n->host_of[dst], H = n->nhosts;
    s->nflows++;
    if (hs == hd) {
        s->load[2 * H + hs] += bytes;
        s->maxlat = AI_MAX(s->maxlat, n->mem_lat_s);
        return;
    }
    s->load[hs] += bytes;
    s->load[H + hd] += bytes;
    s->maxlat = AI_MAX(s->maxlat, AI_MAX(n->lat_s[hs], n->lat_s[hd]));
    int rs = n->rack_of[hs], rd = n->rack_of[hd];
    if (rs != rd) {
        if (rs >= 0)
            s->load[3 * H + rs] += bytes;
        if (rd >= 0)
            s->load[3 * H + n->nracks + rd] += bytes;
    }
}

/* The current step's bandwidth time (its busiest resource's load over its
 * capacity) and, in *lat, its latency; the step's loads start over. */
static double step_take(sched *s, double *lat)
{
    const model_net *n = s->n;
    int H = n->nhosts;
    double worst = 0;
    for (int i = 0; i < nres(n); i++) {
        if (s->load[i] <= 0)
            continue;
        double cap = i < H ? n->nic_Bps[i]
                   : i < 2 * H ? n->nic_Bps[i - H]
                   : i < 3 * H ? n->mem_Bps
                   : i < 3 * H + n->nracks ? n->up_Bps[i - 3 * H]
                   : n->up_Bps[i - 3 * H - n->nracks];
        worst = AI_MAX(worst, s->load[i] / cap);
        s->load[i] = 0;
    }
    *lat = s->nflows ? s->maxlat : 0;
    s->maxlat = 0;
    s->nflows = 0;
    return worst;
}

static void step_end(sched *s)
{
    double lat, w = step_take(s, &lat);
    s->total += lat + w;
}

static int pow2_floor(int p)
{
    int q = 1;
    while (q * 2 <= p)
        q *= 2;
    return q;
}

/* Ranks that are leaders (lowest rank) of their host, in rank order. */
static int leaders(const model_net *n, int *out)
{
    int k = 0;
    for (int r = 0; r < n->nranks; r++) {
        int first = 1;
        for (int q = 0; q < r && first; q++)
            first = n->host_of[q] != n->host_of[r];
        if (first)
            out[k++] = r;
    }
    return k;
}

static int leader_of(const model_net *n, int r)
{
    for (int q = 0;; q++)
        if (n->host_of[q] == n->host_of[r])
            return q;
}

static void ring_steps(sched *s, const int *ranks, int p, int steps, double bytes)
{
    for (int k = 0; k < steps; k++) {
        for (int i = 0; i < p; i++)
            flow(s, ranks[i], ranks[(i + 1) % p], bytes);
        step_end(s);
    }
}

/* The ring allreduce across hosts streams each block in K pieces, as the
 * runtime cuts them (core_ring.c: at least 32 KiB each, at most 16; under
 * two it runs lock-step): piece k of a step waits only for piece k of the
 * step before, so a link idles between steps only where one piece's trip
 * (latency and its own bytes) outlasts the whole block. With W one
 * step's bandwidth time: steps x max(W, latency + W/K) + latency, the
 * last for the last piece's arrival. */
#define RING_PIECE_MIN 32768.0
#define RING_PIECES 16.0

static void ring_stream_steps(sched *s, const int *ranks, int p, int steps, double bytes)
{
    int K = (int)AI_MIN(RING_PIECES, floor(bytes / RING_PIECE_MIN)), spans = 0;
    for (int i = 1; i < p; i++)
        spans |= s->n->host_of[ranks[i]] != s->n->host_of[ranks[0]];
    if (K < 2 || !spans) {
        ring_steps(s, ranks, p, steps, bytes);
        return;
    }
    for (int i = 0; i < p; i++)
        flow(s, ranks[i], ranks[(i + 1) % p], bytes);
    double lat, w = step_take(s, &lat);
    s->total += steps * AI_MAX(w, lat + w / K) + lat;
}

/* Fold the ranks beyond the largest power of two into partners (and back):
 * the usual way recursive algorithms handle any p. */
static void fold(sched *s, const int *ranks, int p, double bytes, int back)
{
    int q = pow2_floor(p);
    for (int i = q; i < p; i++)
        back ? flow(s, ranks[i - q], ranks[i], bytes) : flow(s, ranks[i], ranks[i - q], bytes);
    step_end(s);
}

static void recdbl(sched *s, const int *ranks, int p, double bytes_per_step, int grow)
{
    int q = pow2_floor(p);
    double b = bytes_per_step;
    for (int mask = 1; mask < q; mask <<= 1) {
        for (int i = 0; i < q; i++)
            flow(s, ranks[i], ranks[i ^ mask], b);
        step_end(s);
        if (grow)
            b *= 2;
    }
}

static void binomial(sched *s, const int *ranks, int p, double bytes, int to_root)
{
    int steps = 0;
    while ((1 << steps) < p)
        steps++;
    for (int k = 0; k < steps; k++) {
        int mask = to_root ? 1 << k : 1 << (steps - 1 - k);
        for (int i = 0; i < p; i++)
            if ((i & (mask - 1)) == 0 && (i & mask) == 0 && i + mask < p)
                to_root ? flow(s, ranks[i + mask], ranks[i], bytes) : flow(s, ranks[i], ranks[i + mask], bytes);
        step_end(s);
    }
}

int model_net_weighted_segments(double bytes, size_t seg_bytes)
{
    /* Default: 32 segments, none below 16 KiB (per-message costs). */
    double seg = seg_bytes ? (double)seg_bytes : AI_MAX(16.0 * 1024, bytes / 32);
    return (int)AI_MIN(32.0, AI_MAX(1.0, floor(bytes / seg)));
}

typedef struct rate_at {
    double bps;
    int host;
} rate_at;

static int faster_first(const void *a, const void *b)
{
    double x = ((const rate_at *)a)->bps, y = ((const rate_at *)b)->bps;
    return (x < y) - (x > y);
}

/* Rates within MODEL_NET_SAME_RATE of the fastest of their group are one
 * rate measured with noise (the link probe's spread is 10-25%): each group
 * gets its mean. Unequal shards between equal NICs only load the NIC that
 * happened to measure faster: on the testbed's T1 (four 0.5 Gbit/s NICs,
 * probed at 0.51-0.55) they made weighted 2-3% slower than the ring. */
static void equal_rates(int nh, const double *bw, double *out)
{
    rate_at *r = malloc((size_t)nh * sizeof *r);
    memcpy(out, bw, (size_t)nh * sizeof *out);
    if (!r)
        return;
    for (int h = 0; h < nh; h++)
        r[h] = (rate_at){bw[h], h};
    qsort(r, (size_t)nh, sizeof *r, faster_first);
    for (int g = 0, end; g < nh; g = end) {
        double sum = 0;
        for (end = g; end < nh && r[end].bps * MODEL_NET_SAME_RATE >= r[g].bps; end++)
            sum += r[end].bps;
        for (int k = g; k < end; k++)
            out[r[k].host] = sum / (end - g);
    }
    free(r);
}

void model_net_weighted_shards(int nh, const double *rates, double *frac)
{
    /* frac holds the rates used until it turns into the shards (each
     * element is read before it is written). */
    double *bw = frac, sum = 0;
    equal_rates(nh, rates, bw);
    for (int h = 0; h < nh; h++)
        sum += bw[h];
    if (nh <= 2 || sum <= 0) {
        for (int h = 0; h < nh; h++)
            frac[h] = sum > 0 ? bw[h] / sum : 1.0 / nh;
        return;
    }
    /* Per unit vector, host h moves 1 + (nh-2) s_h each way; find the
     * smallest T with sum_h max(0, (T bw_h - 1) / (nh-2)) >= 1. */
    double lo = 0, hi = 1;
    for (int h = 0; h < nh; h++)
        hi = AI_MAX(hi, (double)(nh - 1) / bw[h]);
    for (int it = 0; it < 100; it++) {
        double t = (lo + hi) / 2, tot = 0;
        for (int h = 0; h < nh; h++)
            tot += AI_MAX(0.0, (t * bw[h] - 1) / (nh - 2));
        if (tot >= 1)
            hi = t;
        else
            lo = t;
    }
    double tot = 0;
    for (int h = 0; h < nh; h++)
        tot += frac[h] = AI_MAX(0.0, (hi * bw[h] - 1) / (nh - 2));
    for (int h = 0; h < nh; h++)
        frac[h] /= tot;
}

/* Within every host at once: members send `bytes` to their leader (up) or
 * the leader to members (down), as one step. */
static void intra(sched *s, double bytes, int up)
{
    const model_net *n = s->n;
    for (int r = 0; r < n->nranks; r++) {
        int l = leader_of(n, r);
        if (l != r)
            up ? flow(s, r, l, bytes) : flow(s, l, r, bytes);
    }
    step_end(s);
}

static double algo_time(const model_net *n, ai_coll coll, const char *algo, double bytes)
{
    int p = n->nranks;
    int *ranks = malloc((size_t)p * 2 * sizeof(int));
    double *load = calloc((size_t)nres(n), sizeof(double));
    double *frac = malloc((size_t)n->nhosts * sizeof(double));
    if (!ranks || !load || !frac) {
        free(ranks);
        free(load);
        free(frac);
        return INFINITY;
    }
    int *lead = ranks + p;
    for (int i = 0; i < p; i++)
        ranks[i] = i;
    int nl = leaders(n, lead);
    sched s = {.n = n, .load = load};
    double known = 1;
    int q = pow2_floor(p);
    if (!strcmp(algo, "ring")) {
        if (coll == AI_ALLREDUCE)
            ring_stream_steps(&s, ranks, p, 2 * (p - 1), bytes / p);
        else if (coll == AI_ALLGATHER || coll == AI_REDUCE_SCATTER)
            ring_steps(&s, ranks, p, p - 1, bytes / p);
        else
            known = 0;
    } else if (!strcmp(algo, "recursive_doubling") && (coll == AI_ALLREDUCE || coll == AI_ALLGATHER)) {
        double unit = coll == AI_ALLREDUCE ? bytes : bytes / p;
        if (q != p)
            fold(&s, ranks, p, coll == AI_ALLREDUCE ? bytes : bytes * (p - q) / p, 0);
        recdbl(&s, ranks, p, unit * (coll == AI_ALLGATHER ? (double)p / q : 1), coll == AI_ALLGATHER);
        if (q != p)
            fold(&s, ranks, p, bytes, 1);
    } else if ((!strcmp(algo, "rabenseifner") && coll == AI_ALLREDUCE) ||
               (!strcmp(algo, "recursive_halving") && coll == AI_REDUCE_SCATTER)) {
        if (q != p)
            fold(&s, ranks, p, bytes, 0);
        double b = bytes / 2;
        for (int mask = q / 2; mask >= 1; mask >>= 1, b /= 2) {
            for (int i = 0; i < q; i++)
                flow(&s, ranks[i], ranks[i ^ mask], b);
            step_end(&s);
        }
        if (coll == AI_ALLREDUCE)
            recdbl(&s, ranks, p, bytes / q, 1);
        if (q != p)
            fold(&s, ranks, p, coll == AI_ALLREDUCE ? bytes : bytes / p, 1);
    } else if (!strcmp(algo, "reduce_bcast") && coll == AI_ALLREDUCE) {
        binomial(&s, ranks, p, bytes, 1);
        binomial(&s, ranks, p, bytes, 0);
    } else if (!strcmp(algo, "binomial") && (coll == AI_BROADCAST || coll == AI_REDUCE)) {
        binomial(&s, ranks, p, bytes, coll == AI_REDUCE);
    } else if (!strcmp(algo, "pairwise") && (coll == AI_REDUCE_SCATTER || coll == AI_ALLTOALL)) {
        for (int k = 1; k < p; k++) {
            for (int i = 0; i < p; i++)
                flow(&s, i, (i + k) % p, bytes / p);
            step_end(&s);
        }
    } else if (!strcmp(algo, "bruck") && coll == AI_ALLGATHER) {
        for (int d = 1; d < p; d *= 2) {
            double blocks = AI_MIN(d, p - d);
            for (int i = 0; i < p; i++)
                flow(&s, i, (i - d + p) % p, bytes / p * blocks);
            step_end(&s);
        }
    } else if ((!strcmp(algo, "hierarchical") || !strcmp(algo, "weighted")) && coll == AI_ALLREDUCE) {
        /* reduce to host leaders, allreduce among leaders, broadcast back */
        intra(&s, bytes, 1);
        if (!strcmp(algo, "hierarchical")) {
            ring_stream_steps(&s, lead, nl, 2 * (nl - 1), bytes / nl);
        } else {
            double *bw = malloc((size_t)nl * sizeof(double));
            if (bw) {
                for (int i = 0; i < nl; i++)
                    bw[i] = n->nic_Bps[n->host_of[lead[i]]];
                model_net_weighted_shards(nl, bw, frac);
                free(bw);
                /* As the runtime does it: m segments, the reduce-scatter
                 * of segment t overlapping the allgather of segment t-1. */
                int m = model_net_weighted_segments(bytes, 0);
                for (int t = 0; t <= m; t++) {
                    for (int i = 0; i < nl; i++)
                        for (int j = 0; j < nl; j++) {
                            if (i == j)
                                continue;
                            if (t < m)
                                flow(&s, lead[i], lead[j], bytes * frac[j] / m);
                            if (t > 0)
                                flow(&s, lead[i], lead[j], bytes * frac[i] / m);
                        }
                    step_end(&s);
                }
            } else {
                known = 0;
            }
        }
        intra(&s, bytes, 0);
    } else {
        known = 0;
    }
    free(ranks);
    free(load);
    free(frac);
    return known ? s.total : INFINITY;
}

double model_net_algo_time(const model_net *n, ai_coll coll, const char *algo, double bytes)
{
    if (n->nranks <= 1)
        return 0;
    return algo_time(n, coll, algo, bytes);
}
