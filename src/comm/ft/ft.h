/*
 * The fault-tolerance room's shared pieces: agree.c (revoke, agreement,
 * failed set) and reshape.c (shrink, grow, join). Its public face is the
 * comm_ft_* section of comm/comm.h.
 */
#ifndef AI_COMM_FT_H
#define AI_COMM_FT_H

#include "comm/transport/transport.h"

/* Kinds of the "AIFT" control frames (wire.h). */
#define FT_KIND_AGREE 1      /* agreement state (agree.c) */
#define FT_KIND_GROW_ENTRY 2 /* a member's entry for the grown communicator, to rank 0 */
#define FT_KIND_GROW_TABLE 3 /* rank 0's answer: status, nonce, the grown table */

typedef struct comm_ft {
    uint32_t epoch;         /* agreements run on this communicator */
    int agreed;             /* failed holds an agreed set */
    unsigned char *failed;  /* [size] */
} comm_ft;

ai_status_t comm_ft_get(ai_comm *c, comm_ft **out);

#endif
