/*
 * Transport internals shared by engine.c, shm.c, tcp.c, bootstrap.c and
 * comm.c. Not for algorithms: they use comm.h only.
 *
 * Every peer pair is connected by byte streams ("channels"): one shared
 * memory ring per direction between ranks of one host, or 1..channels TCP
 * connections between hosts. Messages on a stream are framed as
 *   header (16 bytes: magic, call sequence, payload length) | payload | pad
 * where pad brings the payload to a multiple of 8 bytes. Framing lets the
 * receiver refuse a message whose length or call sequence does not match
 * what it expects (mismatched collective arguments) instead of corrupting
 * memory, and the padding keeps every payload 8-byte aligned in the stream,
 * so elements never straddle a ring's wrap point or land misaligned.
 */
#ifndef AI_COMM_TRANSPORT_H
#define AI_COMM_TRANSPORT_H

#include "comm/comm.h"

#include <stdatomic.h>
#include <sys/types.h>

#define COMM_MSG_MAGIC 0x534d4941u /* "AIMS" */
#define COMM_HDR_BYTES 16
/* The call sequence point-to-point messages carry: they belong to no
 * collective call (only two ranks take part, so call_seq does not move). */
#define COMM_SEQ_P2P 0xffffffffu
#define COMM_PROTO_VERSION 2
#define COMM_HOST_MAX 64

typedef enum { CHAN_NONE, CHAN_SHM, CHAN_TCP } comm_chan_kind;

/* Single-producer single-consumer byte ring in shared memory. head and
 * tail count bytes since creation; they live on separate cache lines so the
 * producer and consumer do not false-share. */
typedef struct shm_ring {
    _Atomic uint64_t tail; /* bytes written (producer) */
    char pad0[56];
    _Atomic uint64_t head; /* bytes consumed (consumer) */
    char pad1[56];
} shm_ring;

typedef struct comm_chan {
    comm_chan_kind kind;
    /* shm */
    shm_ring *ring;        /* tx ring (send side) or rx ring (recv side) */
    unsigned char *data;
    uint64_t ring_bytes;
    /* tcp */
    int fd;
    unsigned char *bounce; /* received bytes not yet consumed: [start, end) */
    size_t bstart, bend, bcap;
    uint64_t spos;         /* stream offset of bstart */
} comm_chan;

/* One remote rank as seen from this rank. */
typedef struct comm_peer {
    comm_chan_kind kind;
    int nchan;                        /* 1 for shm, channels for tcp */
    comm_chan tx[COMM_MAX_CHANNELS];  /* to the peer */
    comm_chan rx[COMM_MAX_CHANNELS];  /* from the peer */
    pid_t pid;
    char host[COMM_HOST_MAX];
    uint32_t addr;                    /* IPv4, network order */
    uint16_t port;                    /* data listen port, host order */
    /* Posting order per direction: requests take places at posting, and
     * only the request whose place is next may move. */
    uint64_t tx_posted, tx_next, rx_posted, rx_next;
} comm_peer;

typedef struct comm_shm_header {
    uint64_t magic;
    uint64_t bytes;          /* whole segment */
    uint64_t ring_bytes;
    int32_t nlocal;
    _Atomic int32_t attached; /* ranks that mapped it (leader included) */
    _Atomic int32_t abort_rank; /* 0: running; r + 1: rank r aborted */
    _Atomic int32_t abort_claim; /* the first aborting rank + 1: it writes
                                  * abort_reason, then publishes abort_rank */
    char abort_reason[256];      /* why it aborted (names its failed peer) */
    _Atomic int32_t ready;
} comm_shm_header;

struct comm_transport {
    comm_peer *peers;       /* [size]; peers[rank] is self */
    int spin_passes;        /* idle passes before yielding the CPU */
    double tcp_spin_s;      /* a TCP-only wait polls (yielding) this long before it sleeps */
    int listen_fd;          /* data-plane listener, closed after setup */
    /* shared memory */
    void *shm_base;
    size_t shm_bytes;
    comm_shm_header *shm;
    char token_hash_hex[17];
    uint64_t token_hash;
    int no_shm;
};

/* What rank 0's store tells every rank about every rank. */
typedef struct comm_rank_info {
    uint32_t addr;  /* network order */
    uint16_t port;  /* host order */
    int32_t pid;
    uint64_t machine; /* the kernel's boot id, hashed: ranks that share
                       * one machine's cores, whatever their host ids */
    char host[COMM_HOST_MAX];
} comm_rank_info;

/* bootstrap.c: rendezvous through a small TCP store on rank 0. Fills
 * table[size] (caller-allocated) with every rank's info; `self` is this
 * rank's (addr may be 0: bootstrap fills in the address it reached rank 0
 * from). */
ai_status_t comm_bootstrap(const ai_comm_config *cfg, uint64_t token_hash,
                           comm_rank_info *self, comm_rank_info *table);

/* bootstrap.c: the same table exchanged through a key-value store the
 * caller shares with every rank (ai_comm_create_with_store). *nonce gets
 * rank 0's random value, the same on every rank, so that two communicators
 * made through one store by one set of processes never share a name. */
ai_status_t comm_bootstrap_store(const ai_comm_config *cfg, const ai_kv_store *kv,
                                 comm_rank_info *self, comm_rank_info *table, uint64_t *nonce);

/* tcp.c */
ai_status_t comm_tcp_listen(uint32_t addr, int *fd_out, uint16_t *port_out);
ai_status_t comm_tcp_mesh(ai_comm *c); /* connect every cross-host pair */
void comm_tcp_close(ai_comm *c);
/* sockets helpers shared with bootstrap */
ai_status_t comm_sock_connect(uint32_t addr, uint16_t port, double deadline, int *fd_out);
/* Read/write exactly n bytes before `deadline` (ai_now() seconds). */
ai_status_t comm_sock_read_full(int fd, void *buf, size_t n, double deadline);
ai_status_t comm_sock_write_full(int fd, const void *buf, size_t n, double deadline);
ai_status_t comm_resolve_ipv4(const char *host, uint32_t *addr_out);

/* shm.c */
ai_status_t comm_shm_setup(ai_comm *c);
void comm_shm_close(ai_comm *c);

static inline size_t comm_pad8(size_t n) { return (n + 7) & ~(size_t)7; }

#endif
