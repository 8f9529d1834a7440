/*
 * The fault-tolerance room's shared pieces: agree.c (revoke, agreement,
 * failed set), reshape.c (shrink, grow, join) and door.c (the join door).
 * Its face to the rest of the library is comm/ft/ft.h.
 */
#ifndef AI_COMM_FT_STATE_H
#define AI_COMM_FT_STATE_H

#include "comm/ft/ft.h"
#include "comm/transport/transport.h"

/* Kinds of the "AIFT" control frames (wire.h). */
#define FT_KIND_AGREE 1      /* agreement state (agree.c) */
#define FT_KIND_GROW_ENTRY 2 /* a member's entry for the grown communicator, to rank 0 */
#define FT_KIND_GROW_TABLE 3 /* rank 0's answer: status, nonce, the grown table */

typedef struct comm_ft {
    uint32_t epoch;         /* agreements run on this communicator */
    int agreed;             /* failed holds an agreed set */
    int excluded;           /* the others counted this rank failed: it must leave */
    unsigned char *failed;  /* [size] */
    struct comm_door *door; /* rank 0's join door (door.c), NULL until used */
} comm_ft;

ai_status_t comm_ft_get(ai_comm *c, comm_ft **out);

/* door.c: rank 0's join door and the newcomers waiting at it (the lobby).
 * A newcomer is held in the lobby, its hello read and its connection open,
 * until a grow admits it; one whose connection ends before that is
 * dropped. comm_door_get: c's door (made on first use, its own listener
 * opened when AUTOINFRA_JOIN_DOOR names one). comm_door_poll: accept and
 * read what arrived within ms, drop the newcomers that left; returns how
 * many wait. comm_door_take: the first n waiting newcomers' connections and
 * entries, out of the lobby. comm_door_move: from an old communicator to
 * the one that replaces it (both with this process as rank 0), so that the
 * door's address and the waiting newcomers outlive the old one. */
#define COMM_DOOR_LOBBY_MAX 64
typedef struct comm_door comm_door;
ai_status_t comm_door_get(ai_comm *c, comm_door **out);
ai_status_t comm_door_poll(ai_comm *c, comm_door *d, int ms, int *waiting);
void comm_door_take(comm_door *d, int n, int *fds, comm_rank_info *entries);
void comm_door_move(ai_comm *from, ai_comm *to);
/* The address newcomers should use: the door's own listener, else rank
 * 0's data listener (peers[0]); *own 1 for the former. */
ai_status_t comm_door_addr(const ai_comm *c, char *buf, size_t len);
void comm_door_free(comm_door *d);

#endif
