/*
 * The fault-tolerance section of autoinfra.h: comm/ft/ does the work;
 * here the communicators that shrink, grow and join make get the learner
 * for their own topology fingerprint (a new set of ranks and hosts is a
 * new fingerprint, whose knowledge the KB may already hold), as
 * ai_comm_create's do, and the degraded links are read from what the
 * learner measured.
 */
#include "comm/ft/ft.h"
#include "comm/select/probe.h"
#include "tune/tune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Below this share of the median host's bottleneck bandwidth, or above
 * this multiple of its latency, a host counts as degraded. */
#define DEGRADED_BW_SHARE 0.5
#define DEGRADED_LAT_FACTOR 4.0

static ai_status_t need(const void *p, const char *what)
{
    return p ? AI_OK : util_fail(AI_ERR_INVALID, "%s: NULL argument", what);
}

ai_status_t ai_comm_revoke(ai_comm *c)
{
    ai_status_t st = need(c, "ai_comm_revoke");
    return st == AI_OK ? comm_ft_revoke(c) : st;
}

ai_status_t ai_comm_agree(ai_comm *c, uint64_t *flags)
{
    ai_status_t st = need(c && flags ? c : NULL, "ai_comm_agree");
    return st == AI_OK ? comm_ft_agree(c, flags, 0, NULL) : st;
}

ai_status_t ai_comm_failed(ai_comm *c, int *ranks, int max, int *n)
{
    return comm_ft_failed(c, ranks, max, n);
}

ai_status_t ai_comm_failure_peer(const ai_comm *c, int *rank)
{
    ai_status_t st = need(c && rank ? c : NULL, "ai_comm_failure_peer");
    if (st == AI_OK)
        *rank = comm_ft_failure_peer(c);
    return st;
}

ai_status_t ai_comm_shrink(ai_comm *c, ai_comm **out)
{
    ai_status_t st = need(c && out ? c : NULL, "ai_comm_shrink");
    if (st != AI_OK)
        return st;
    ai_comm *nc = NULL;
    st = comm_ft_shrink(c, &nc);
    return tune_with_learner(st, nc, tune_kb_path(c), out);
}

ai_status_t ai_comm_grow(ai_comm *c, int joiners, double timeout_s, ai_comm **out)
{
    ai_status_t st = need(c && out ? c : NULL, "ai_comm_grow");
    if (st != AI_OK)
        return st;
    ai_comm *nc = NULL;
    st = comm_ft_grow(c, joiners, timeout_s, &nc);
    return tune_with_learner(st, nc, tune_kb_path(c), out);
}

ai_status_t ai_comm_join_addr(const ai_comm *c, char *buf, size_t len)
{
    return comm_ft_join_addr(c, buf, len);
}

ai_status_t ai_comm_join_pending(ai_comm *c, int *waiting)
{
    return comm_ft_join_pending(c, waiting);
}

ai_status_t ai_comm_join(const ai_comm_config *cfg, const char *job_addr, ai_comm **out)
{
    ai_status_t st = need(out, "ai_comm_join");
    if (st != AI_OK)
        return st;
    ai_comm *nc = NULL;
    util_param_refresh();
    st = comm_ft_join(cfg, job_addr, &nc);
    return tune_with_learner(st, nc, cfg ? cfg->kb_path : NULL, out);
}

/* Over the public calls: the grown communicator gets its learner as
 * ai_comm_grow's do. The count travels as an allreduce (rank 0's count,
 * the others' 0), not a broadcast: every member's result waits for every
 * other's, so a member that died fails every admit before anyone grows. */
ai_status_t ai_comm_admit(ai_comm *c, double timeout_s, int *joined, ai_comm **out)
{
    ai_status_t st = need(c && joined && out ? c : NULL, "ai_comm_admit");
    if (st != AI_OK)
        return st;
    *joined = 0;
    *out = NULL;
    int32_t n = 0;
    if (ai_comm_rank(c) == 0) {
        int waiting = 0;
        if ((st = ai_comm_join_pending(c, &waiting)) != AI_OK)
            return st;
        n = waiting;
    }
    if ((st = ai_allreduce(c, AI_IN_PLACE, &n, 1, AI_I32, AI_SUM, NULL)) != AI_OK)
        return util_fail_prefix(st, "ai_comm_admit: rank %d: learning rank 0's count of newcomers",
                                ai_comm_rank(c));
    if (n < 0)
        return util_fail(AI_ERR_PROTO, "ai_comm_admit: rank 0 counted %d newcomers", (int)n);
    *joined = (int)n;
    return n > 0 ? ai_comm_grow(c, (int)n, timeout_s, out) : AI_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n, double *tmp)
{
    memcpy(tmp, v, (size_t)n * sizeof *tmp);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

ai_status_t ai_comm_degraded(const ai_comm *c, int *ranks, int max, int *n)
{
    if (!c || !n || (max > 0 && !ranks))
        return util_fail(AI_ERR_INVALID, "ai_comm_degraded: NULL communicator or output");
    *n = 0;
    const comm_links *l = c->links;
    if (!l || l->nhosts < 2)
        return AI_OK; /* nothing measured: nothing to tell */
    double *tmp = malloc((size_t)l->nhosts * sizeof *tmp);
    if (!tmp)
        return util_fail(AI_ERR_NOMEM, "degraded links");
    double bw = median(l->host_Bps, l->nhosts, tmp), lat = median(l->host_lat_s, l->nhosts, tmp);
    free(tmp);
    int me = c->host_of[c->rank], k = 0;
    for (int r = 0; r < c->size; r++) {
        int h = c->host_of[r];
        if (h == me)
            continue;
        if (l->host_Bps[h] < DEGRADED_BW_SHARE * bw || l->host_lat_s[h] > DEGRADED_LAT_FACTOR * lat) {
            if (k < max)
                ranks[k] = r;
            k++;
        }
    }
    *n = k;
    return AI_OK;
}
