/*
 * The byte layouts that arrive from the network before a peer is trusted,
 * and their parsers. Every parser takes (bytes, len) of what has arrived so
 * far and returns AI_OK with *need = 0 when a whole valid frame is there,
 * AI_OK with *need > 0 (the bytes still missing) when what is there is a
 * valid beginning, or AI_ERR_PROTO with the reason (ai_last_error) as soon
 * as a byte is wrong. Integers are in the sender's byte order (every rank
 * of a job runs on little-endian x86-64 or arm64).
 *
 * Every door (the rendezvous store, the data listener, the join door)
 * takes a connection through the same challenge-response (gate.c): the
 * connecting side opens with a frame carrying a fresh random nonce; the
 * acceptor answers with a CHALLENGE of its own fresh nonce and its proof;
 * the connecting side checks that proof and sends its own. A proof is a
 * MAC, under the door's key (derived from the job token), of a label
 * naming the side, the opening frame's bytes and the acceptor's nonce, so
 * it vouches for the ranks, size, channel and entry the opening claims
 * and is worth nothing on another connection. The token and its key
 * never cross the network.
 *
 * Rendezvous store frames: magic "AIBS" | version u16 | type u16 |
 * body length u32 | body.
 *   HELLO  rank u32 | size u32 | nonce[16] | entry   (an opening)
 *   TABLE  size entries
 *   REJECT reason text (at most COMM_WIRE_REASON_MAX bytes)
 * entry: addr u32 | port u16 | pad u16 | pid i32 | machine u64 | host[64].
 *
 * Data hello (32 bytes, an opening): magic "AIDP" | version u16 |
 * channel u16 | from u32 | to u32 | nonce[16]; channel COMM_WIRE_CTL_CHAN
 * opens the pair's control connection. The listener answers an accepted
 * proof with the 4 bytes "AIOK"; a connection closed without them was not
 * accepted and is retried.
 *
 * Challenge (56 bytes): magic "AICH" | version u16 | pad u16 | nonce[16] |
 * the acceptor's proof[32]. Proof (40 bytes): magic "AIPR" | version u16 |
 * pad u16 | the connecting side's proof[32].
 *
 * Abort notice (control connection): magic "AIAB" ("AIRV": a revoke) |
 * version u16 | reason length u16 | origin rank i32 | reason.
 *
 * Fault-tolerance frames (control connection; comm/ft/): magic "AIFT" |
 * version u16 | kind u16 | body length u32 | body, the body the ft room's
 * (agreement state, grow entries and tables).
 *
 * Join (a newcomer to rank 0's join door): a HELLO store frame with rank
 * COMM_WIRE_JOIN_RANK and size 0; answered by REJECT or by
 *   JOINED rank u32 | size u32 | nonce u64 | channels u32 | no_shm u32 |
 *          size entries.
 */
#ifndef AI_COMM_WIRE_H
#define AI_COMM_WIRE_H

#include "comm/transport/transport.h"

#include <stddef.h>
#include <stdint.h>

#define COMM_WIRE_STORE_MAGIC 0x53424941u /* "AIBS" */
#define COMM_WIRE_DATA_MAGIC 0x50444941u  /* "AIDP" */
#define COMM_WIRE_ACK_MAGIC 0x4b4f4941u   /* "AIOK" */
#define COMM_WIRE_ABORT_MAGIC 0x42414941u /* "AIAB" */
#define COMM_WIRE_REVOKE_MAGIC 0x56524941u /* "AIRV" */
#define COMM_WIRE_FT_MAGIC 0x54464941u     /* "AIFT" */
#define COMM_WIRE_CHALLENGE_MAGIC 0x48434941u /* "AICH" */
#define COMM_WIRE_PROOF_MAGIC 0x52504941u     /* "AIPR" */
#define COMM_WIRE_NONCE 16
#define COMM_WIRE_MAC 32
#define COMM_WIRE_CHALLENGE (8 + COMM_WIRE_NONCE + COMM_WIRE_MAC)
#define COMM_WIRE_PROOF (8 + COMM_WIRE_MAC)
#define COMM_WIRE_FT_HDR 12
#define COMM_WIRE_FT_MAX_BODY (1u << 24)
#define COMM_WIRE_JOIN_RANK 0xffffffffu

#define COMM_WIRE_HELLO 1
#define COMM_WIRE_TABLE 2
#define COMM_WIRE_REJECT 3
#define COMM_WIRE_JOINED 4

#define COMM_WIRE_HDR 12
#define COMM_WIRE_ENTRY (4 + 2 + 2 + 4 + 8 + COMM_HOST_MAX)
#define COMM_WIRE_HELLO_BODY (4 + 4 + COMM_WIRE_NONCE + COMM_WIRE_ENTRY)
#define COMM_WIRE_HELLO_FRAME (COMM_WIRE_HDR + COMM_WIRE_HELLO_BODY)
#define COMM_WIRE_REASON_MAX 200
#define COMM_WIRE_DATA_HELLO (16 + COMM_WIRE_NONCE)
#define COMM_WIRE_ACK 4
#define COMM_WIRE_CTL_CHAN 0xffffu
#define COMM_WIRE_ABORT_HDR 12
#define COMM_WIRE_ABORT_REASON_MAX COMM_ABORT_REASON_MAX
/* The largest table a store sends: bounded so a malformed header cannot
 * make a rank allocate gigabytes. */
#define COMM_WIRE_MAX_RANKS (1 << 20)

typedef struct comm_wire_hello {
    uint32_t rank, size;
    comm_rank_info entry;
} comm_wire_hello;

/* Frame header at b; writes type and body length. */
void comm_wire_hdr_pack(unsigned char *b, uint16_t type, uint32_t len);
/* A store frame header: magic and version checked, type and length out. */
ai_status_t comm_wire_hdr_parse(const unsigned char *b, size_t len, uint16_t *type,
                                uint32_t *body_len, size_t *need);

void comm_wire_entry_pack(unsigned char *b, const comm_rank_info *e);
void comm_wire_entry_unpack(const unsigned char *b, comm_rank_info *e);

/* A whole hello frame (COMM_WIRE_HELLO_FRAME bytes) into b. */
void comm_wire_hello_pack(unsigned char *b, uint32_t rank, uint32_t size,
                          const unsigned char nonce[COMM_WIRE_NONCE], const comm_rank_info *self);
/* A hello as a door reads it: the layout; rank and size against the job
 * are the door's, the proof the gate's. */
ai_status_t comm_wire_hello_parse(const unsigned char *b, size_t len, comm_wire_hello *out,
                                  size_t *need);

/* The store's answer as a joining rank reads it: a table of `size`
 * entries into table[size], or a REJECT whose reason goes into
 * why[COMM_WIRE_REASON_MAX + 1] (then *rejected = 1, AI_OK). */
ai_status_t comm_wire_reply_parse(const unsigned char *b, size_t len, uint32_t size,
                                  comm_rank_info *table, char *why, int *rejected, size_t *need);

void comm_wire_data_hello_pack(unsigned char *b, const unsigned char nonce[COMM_WIRE_NONCE],
                               uint32_t from, uint32_t to, uint16_t chan);
ai_status_t comm_wire_data_hello_parse(const unsigned char *b, size_t len, uint32_t *from,
                                       uint32_t *to, uint16_t *chan, size_t *need);

/* The acceptor's challenge and the connecting side's proof. */
void comm_wire_challenge_pack(unsigned char *b, const unsigned char nonce[COMM_WIRE_NONCE],
                              const unsigned char mac[COMM_WIRE_MAC]);
ai_status_t comm_wire_challenge_parse(const unsigned char *b, size_t len,
                                      unsigned char nonce[COMM_WIRE_NONCE],
                                      unsigned char mac[COMM_WIRE_MAC], size_t *need);
void comm_wire_proof_pack(unsigned char *b, const unsigned char mac[COMM_WIRE_MAC]);
ai_status_t comm_wire_proof_parse(const unsigned char *b, size_t len,
                                  unsigned char mac[COMM_WIRE_MAC], size_t *need);

/* An abort notice into b (at least COMM_WIRE_ABORT_HDR +
 * COMM_WIRE_ABORT_REASON_MAX bytes); returns its length. */
size_t comm_wire_abort_pack(unsigned char *b, int32_t origin, int revoked, const char *reason);
/* reason: COMM_WIRE_ABORT_REASON_MAX + 1 bytes, NUL-terminated. */
ai_status_t comm_wire_abort_parse(const unsigned char *b, size_t len, int32_t *origin,
                                  int *revoked, char *reason, size_t *need);

/* A fault-tolerance frame's header into b (COMM_WIRE_FT_HDR bytes). */
void comm_wire_ft_hdr_pack(unsigned char *b, uint16_t kind, uint32_t body_len);
/* Its parse: magic, version, a body length of at most COMM_WIRE_FT_MAX_BODY. */
ai_status_t comm_wire_ft_hdr_parse(const unsigned char *b, size_t len, uint16_t *kind,
                                   uint32_t *body_len, size_t *need);

/* The JOINED answer's fixed part: the newcomer's rank, the grown size,
 * the nonce of the grown communicator's name, the members' settings. */
typedef struct comm_wire_joined {
    uint32_t rank, size;
    uint64_t nonce;
    uint32_t channels, no_shm;
} comm_wire_joined;
#define COMM_WIRE_JOINED_FIXED 24
size_t comm_wire_joined_pack(unsigned char *b, const comm_wire_joined *j,
                             const comm_rank_info *table);
/* The JOINED answer: j->size (at most max_size) entries into
 * table[max_size]; a REJECT as for comm_wire_reply_parse. */
ai_status_t comm_wire_joined_parse(const unsigned char *b, size_t len, uint32_t max_size,
                                   comm_wire_joined *j, comm_rank_info *table, char *why,
                                   int *rejected, size_t *need);

#endif
