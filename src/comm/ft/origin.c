/*
 * Which rank broke a failed communicator, as this rank knows it: what its
 * abort notice tells the others (transport/engine.c, comm_abort), read
 * back for the caller (ai_comm_failure_peer) instead of from the message.
 */
#include "comm/ft/state.h"

int comm_ft_failure_peer(const ai_comm *c)
{
    if (c->state == AI_OK || !c->tp)
        return -1;
    const struct comm_transport *tp = c->tp;
    /* As comm_abort picks the origin it passes on: a notice's first,
     * else the peer this rank's own error blamed. */
    int r = tp->abort_origin >= 0 ? tp->abort_origin : tp->blame;
    return r >= 0 && r < c->size && r != c->rank ? r : -1;
}
