/*
 * The fault-tolerance room's face: the work behind the fault-tolerance
 * section of autoinfra.h (its semantics are documented there and in
 * docs/faults.md). The public wrappers in api/fault.c attach the learner
 * to what shrink, grow and join return; comm_destroy (comm.c) releases
 * the room's state with comm_ft_free. The room's own shared pieces are in
 * comm/ft/state.h.
 */
#ifndef AI_COMM_FT_H
#define AI_COMM_FT_H

#include "comm/comm.h"

ai_status_t comm_ft_revoke(ai_comm *c);
/* aux: a second per-rank value agreed along (shrink's new ports); out
 * NULL or [size]: every rank's aux as agreed (failed ranks' 0). */
ai_status_t comm_ft_agree(ai_comm *c, uint64_t *flags, uint64_t aux, uint64_t *aux_out);
ai_status_t comm_ft_failed(const ai_comm *c, int *ranks, int max, int *n);
ai_status_t comm_ft_shrink(ai_comm *c, ai_comm **out);
ai_status_t comm_ft_grow(ai_comm *c, int joiners, double timeout_s, ai_comm **out);
ai_status_t comm_ft_join_addr(const ai_comm *c, char *buf, size_t len);
ai_status_t comm_ft_join_pending(ai_comm *c, int *waiting);
ai_status_t comm_ft_join(const ai_comm_config *cfg, const char *job_addr, ai_comm **out);
int comm_ft_failure_peer(const ai_comm *c);
void comm_ft_free(ai_comm *c);

#endif
