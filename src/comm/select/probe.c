/*
 * Link probe: what the network between this communicator's hosts actually
 * delivers, measured, not declared.
 *
 * Host leaders (one rank per host) run H-1 rounds; in round k leader i
 * sends PROBE bytes to leader i+k and receives from leader i-k, so every
 * NIC carries exactly one flow in and one out and each flow is limited
 * only by its two ends. The receiver stamps when its message completed:
 * bw[src][dst] = bytes / (completion - round start). A few 8-byte
 * exchanges per round give the latency. Leaders then share their rows, so
 * every leader holds the same matrix (decisions derived from it, like the
 * weighted shards, are identical everywhere), and each host's bottleneck
 * bandwidth is the best rate it reached with any partner: on a switch
 * min(B_i, B_j) peaks at B_i once a partner is at least as fast.
 *
 * The result is cached in the communicator; ai_comm_links(refresh=1)
 * measures again (after the network changed).
 */
#include "comm/algo/core.h"
#include "comm/select/probe.h"
#include "model/model_net.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_LAT_REPS 5
#define PROBE_BW_REPS 2

void comm_links_free(comm_links *l)
{
    if (!l)
        return;
    free(l->bw_Bps);
    free(l);
}

static ai_status_t leaders_sync(ai_comm *c, const comm_group *g)
{
    /* A dissemination barrier among the leaders. */
    char x = 0, y;
    for (int d = 1; d < g->n; d *= 2) {
        ai_status_t st = comm_sendrecv(c, g_rank(g, (g->me + d) % g->n), &x, 1,
                                       g_rank(g, (g->me - d + g->n) % g->n), &y, 1);
        if (st != AI_OK)
            return st;
    }
    return AI_OK;
}

static ai_status_t measure(ai_comm *c, const comm_group *g, comm_links *l, size_t bytes)
{
    int H = g->n, me = g->me;
    double *row_bw = l->bw_Bps + (size_t)me * H;   /* my row: what I received */
    double *row_lat = l->lat_s + (size_t)me * H;
    unsigned char *sbuf, *rbuf;
    ai_status_t st = comm_scratch(c, ALGO_SLOT_WORK, 2 * bytes, (void **)&sbuf);
    if (st != AI_OK)
        return st;
    rbuf = sbuf + bytes;
    memset(sbuf, 0x5a, bytes);
    for (int k = 1; k < H; k++) {
        int to = g_rank(g, (me + k) % H), fromi = (me - k + H) % H, from = g_rank(g, fromi);
        double best = INFINITY;
        for (int rep = 0; rep < PROBE_LAT_REPS; rep++) {
            double t0 = ai_now();
            if ((st = comm_sendrecv(c, to, sbuf, 8, from, rbuf, 8)) != AI_OK)
                return st;
            best = AI_MIN(best, ai_now() - t0);
        }
        row_lat[fromi] = best;
        if ((st = leaders_sync(c, g)) != AI_OK)
            return st;
        /* Best of a few transfers: interference only ever slows one. */
        row_bw[fromi] = 0;
        for (int rep = 0; rep < PROBE_BW_REPS; rep++) {
            if (rep && (st = leaders_sync(c, g)) != AI_OK)
                return st;
            comm_req r[2];
            comm_isend(c, &r[0], to, sbuf, bytes);
            comm_irecv(c, &r[1], from, rbuf, bytes);
            r[1].stamp = 1;
            double t0 = ai_now();
            if ((st = comm_wait(c, r, 2)) != AI_OK)
                return st;
            row_bw[fromi] = AI_MAX(row_bw[fromi], (double)bytes / AI_MAX(r[1].t_done - t0, 1e-9));
        }
    }
    row_bw[me] = INFINITY;
    row_lat[me] = 0;
    return AI_OK;
}

/* Column j of the matrix (what leader j received) is filled by j; leaders
 * exchange rows so that all hold the whole matrix. */
static ai_status_t share(ai_comm *c, const comm_group *g, comm_links *l)
{
    size_t H = (size_t)g->n;
    /* Rows of bw and lat are interleaved per leader: [bw row | lat row]. */
    double *both;
    ai_status_t st = comm_scratch(c, ALGO_SLOT_AUX, 2 * H * H * sizeof(double), (void **)&both);
    if (st != AI_OK)
        return st;
    memcpy(both + 2 * H * (size_t)g->me, l->bw_Bps + H * (size_t)g->me, H * sizeof(double));
    memcpy(both + 2 * H * (size_t)g->me + H, l->lat_s + H * (size_t)g->me, H * sizeof(double));
    comm_blocks B = {NULL, H, 2 * H * sizeof(double)};
    if ((st = comm_core_ring_allgather(c, g, both, &B, g->me)) != AI_OK)
        return st;
    for (size_t i = 0; i < H; i++) {
        memcpy(l->bw_Bps + H * i, both + 2 * H * i, H * sizeof(double));
        memcpy(l->lat_s + H * i, both + 2 * H * i + H, H * sizeof(double));
    }
    return AI_OK;
}

static void summarize(comm_links *l)
{
    int H = l->nhosts;
    for (int i = 0; i < H; i++) {
        double best = 0, lat = INFINITY;
        for (int j = 0; j < H; j++) {
            if (i == j)
                continue;
            /* row = receiver: bw[j][i] is what j received from i. */
            double both = AI_MIN(l->bw_Bps[(size_t)i * H + j], l->bw_Bps[(size_t)j * H + i]);
            best = AI_MAX(best, both);
            lat = AI_MIN(lat, AI_MIN(l->lat_s[(size_t)i * H + j], l->lat_s[(size_t)j * H + i]));
        }
        l->host_Bps[i] = H > 1 ? best : INFINITY;
        l->host_lat_s[i] = H > 1 ? lat : 0;
    }
    /* Once per measurement, not per call of the weighted allreduce. */
    if (H > 1)
        model_net_weighted_shards(H, l->host_Bps, l->weighted_frac);
}

ai_status_t comm_links_get(ai_comm *c, int refresh, const comm_links **out)
{
    if (c->links && !refresh) {
        *out = c->links;
        return AI_OK;
    }
    int H = c->nhosts;
    comm_links *l = calloc(1, sizeof *l);
    if (!l || !(l->bw_Bps = calloc((size_t)H * (size_t)(2 * H + 3), sizeof(double)))) {
        free(l);
        return util_fail(AI_ERR_NOMEM, "link matrix");
    }
    l->nhosts = H;
    l->lat_s = l->bw_Bps + (size_t)H * H;
    l->host_Bps = l->lat_s + (size_t)H * H;
    l->host_lat_s = l->host_Bps + H;
    l->weighted_frac = l->host_lat_s + H;
    size_t bytes;
    ai_status_t st = util_param_size(UTIL_PARAM_PROBE_BYTES, &bytes);
    comm_group leaders = group_leaders(c, -1);
    if (st == AI_OK && H > 1 && leaders.me >= 0 && (st = measure(c, &leaders, l, bytes)) == AI_OK)
        st = share(c, &leaders, l);
    /* Every rank of a host learns its leader's copy. */
    comm_group local = group_host(c, c->host_of[c->rank]);
    if (st == AI_OK && local.n > 1)
        st = comm_core_binomial_bcast(c, &local, l->bw_Bps, 2 * (size_t)H * H * sizeof(double));
    if (st != AI_OK) {
        comm_links_free(l);
        return st;
    }
    summarize(l);
    comm_links_free(c->links);
    c->links = l;
    memset(c->auto_cache, 0, sizeof c->auto_cache); /* decided on old links */
    c->links_gen++;
    *out = l;
    return AI_OK;
}
