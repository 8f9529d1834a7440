/*
 * Another library's collective as an arm of `auto` (ai_comm_set_host_coll
 * in autoinfra.h): the MPI shim registers the host MPI's own, so that the
 * learner hands a call back to MPI where MPI is faster.
 */
#include "comm/algo_registry.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ai_status_t comm_host_coll_run(ai_comm *c, const coll_args *a)
{
    const comm_host_coll *h = &c->host_coll[a->coll];
    ai_status_t st = h->fn(h->arg, a->coll, a->sendbuf, a->recvbuf, a->count, a->dt, a->op, a->root);
    if (st == AI_ERR_UNSUPPORTED) /* every rank alike: our first algorithm instead */
        return comm_algo_at(a->coll, 0)->run(c, a);
    if (st != AI_OK)
        return util_fail(st, "%s: the host collective '%s' failed", ai_coll_name(a->coll), h->name);
    return AI_OK;
}

ai_status_t ai_comm_set_host_coll(ai_comm *c, ai_coll coll, const char *name, ai_host_coll_fn fn,
                                  void *arg)
{
    if (!c || (unsigned)coll >= AI_COLL_COUNT || coll == AI_BARRIER)
        return util_fail(AI_ERR_INVALID, "ai_comm_set_host_coll: bad communicator or collective");
    if (!fn) {
        if (c->host_coll)
            memset(&c->host_coll[coll], 0, sizeof c->host_coll[coll]);
        return AI_OK;
    }
    if (!name || !name[0] || strlen(name) >= sizeof c->host_coll[coll].name)
        return util_fail(AI_ERR_INVALID, "ai_comm_set_host_coll: the name must have 1-%zu characters",
                         sizeof c->host_coll[coll].name - 1);
    if (comm_algo_find(coll, name))
        return util_fail(AI_ERR_INVALID, "ai_comm_set_host_coll: '%s' is an algorithm of %s", name,
                         ai_coll_name(coll));
    if (!c->host_coll && !(c->host_coll = calloc(AI_COLL_COUNT, sizeof *c->host_coll)))
        return util_fail(AI_ERR_NOMEM, "ai_comm_set_host_coll");
    comm_host_coll *h = &c->host_coll[coll];
    snprintf(h->name, sizeof h->name, "%s", name);
    h->algo = (coll_algo){coll, h->name, comm_host_coll_run};
    h->fn = fn;
    h->arg = arg;
    return AI_OK;
}
