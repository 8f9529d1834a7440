/*
 * The public communicator (the "communicator" section of autoinfra.h):
 * creation with the learner attached, teardown, identity, and the
 * measured links. It lives in the tune layer because a public
 * communicator is comm's communicator plus tune's learner: comm knows the
 * learner only as the comm_tuner hook (comm.h), so comm stays below tune,
 * and this file is the one place where the two are put together and taken
 * apart.
 */
#include "comm/select/probe.h"
#include "comm/transport/engine.h"
#include "tune/tune.h"

#include <math.h>

/* c is only valid when st is AI_OK; on failure nothing is left. */
ai_status_t tune_with_learner(ai_status_t st, ai_comm *c, const char *kb_path, ai_comm **out)
{
    if (st != AI_OK)
        return st;
    if ((st = tune_learner_attach(c, kb_path)) != AI_OK)
        goto err_comm;
    *out = c;
    return AI_OK;
err_comm:
    comm_destroy(c);
    return st;
}

ai_status_t ai_comm_create(const ai_comm_config *cfg, ai_comm **out)
{
    ai_comm *c = NULL;
    util_param_refresh();
    ai_status_t st = comm_create(cfg, &c);
    return tune_with_learner(st, c, cfg ? cfg->kb_path : NULL, out);
}

ai_status_t ai_comm_create_env(ai_comm **out)
{
    ai_comm *c = NULL;
    util_param_refresh();
    ai_status_t st = comm_create_env(&c);
    return tune_with_learner(st, c, NULL, out);
}

ai_status_t ai_comm_config_env(ai_comm_config *out)
{
    if (!out)
        return util_fail(AI_ERR_INVALID, "ai_comm_config_env: no configuration to fill");
    util_param_refresh();
    return comm_config_env(out);
}

ai_status_t ai_comm_create_with_store(const ai_comm_config *cfg, const ai_kv_store *kv,
                                      ai_comm **out)
{
    ai_comm *c = NULL;
    util_param_refresh();
    ai_status_t st = comm_create_store(cfg, kv, &c);
    return tune_with_learner(st, c, cfg ? cfg->kb_path : NULL, out);
}

void ai_comm_destroy(ai_comm *c)
{
    comm_destroy(c);
}

ai_status_t ai_rendezvous_port(const char *host, int *port)
{
    int p = comm_tcp_free_port(host);
    if (p <= 0)
        return util_fail(AI_ERR_IO, "no free TCP port on %s (or it does not resolve)",
                         host ? host : "127.0.0.1");
    *port = p;
    return AI_OK;
}

int ai_comm_rank(const ai_comm *c) { return c->rank; }
int ai_comm_size(const ai_comm *c) { return c->size; }
int ai_comm_nhosts(const ai_comm *c) { return c->nhosts; }
int ai_comm_host_of(const ai_comm *c, int rank)
{
    return rank >= 0 && rank < c->size ? c->host_of[rank] : -1;
}
ai_status_t ai_comm_state(const ai_comm *c) { return c->state; }
void ai_comm_set_block_waits(ai_comm *c, int block) { comm_set_block_waits(c, block); }
void ai_comm_set_wait_hook(ai_comm *c, void (*fn)(void *arg), void *arg)
{
    comm_set_wait_hook(c, fn, arg);
}

/* ------------------------------------------------------ measured links */

ai_status_t ai_comm_probe(ai_comm *c, int refresh)
{
    if (c->state != AI_OK)
        return comm_state_error(c, "link probe");
    c->call_seq++;
    const comm_links *l;
    ai_status_t st = comm_links_get(c, refresh, &l);
    return st == AI_OK ? AI_OK : util_fail_prefix(st, "rank %d: link probe", c->rank);
}

ai_status_t ai_comm_link(const ai_comm *c, int from_host, int to_host, double *bw_GBps,
                         double *lat_us)
{
    const comm_links *m = c->links;
    if (!m)
        return util_fail(AI_ERR_INVALID, "no link measurements yet (call ai_comm_probe first)");
    if (from_host < 0 || to_host < 0 || from_host >= m->nhosts || to_host >= m->nhosts)
        return util_fail(AI_ERR_INVALID, "host %d or %d is not in 0..%d", from_host, to_host,
                         m->nhosts - 1);
    size_t at = (size_t)to_host * (size_t)m->nhosts + (size_t)from_host;
    *bw_GBps = m->bw_Bps[at] / 1e9;
    *lat_us = m->lat_s[at] * 1e6;
    return AI_OK;
}

double ai_comm_host_bw_GBps(const ai_comm *c, int host)
{
    const comm_links *m = c->links;
    return m && host >= 0 && host < m->nhosts ? m->host_Bps[host] / 1e9 : NAN;
}
