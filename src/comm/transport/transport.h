/*
 * Transport internals shared by engine.c, shm.c, tcp.c, ctl.c, gate.c,
 * bootstrap.c, and by what builds and rebuilds the transports (comm.c,
 * ft/). The rest of comm uses the engine's face, engine.h, only.
 *
 * Every peer pair is connected by byte streams ("channels"): one shared
 * memory ring per direction between ranks of one host, or 1..channels TCP
 * connections between hosts. Messages on a stream are framed as
 *   header (48 bytes: magic, call sequence, payload length, the call's
 *   description, comm_call_sig, and the sender's previous call's) |
 *   payload | pad
 * where pad brings the payload to a multiple of 8 bytes. Framing lets the
 * receiver refuse a message whose length, call sequence or call does not
 * match what it expects (mismatched collective arguments) instead of
 * corrupting memory or returning another call's data, and the padding keeps every payload 8-byte aligned in the stream,
 * so elements never straddle a ring's wrap point or land misaligned.
 */
#ifndef AI_COMM_TRANSPORT_H
#define AI_COMM_TRANSPORT_H

#include "comm/object.h" /* the communicator object: its layout */
#include "comm/kernel/reduce.h"
#include "comm/transport/engine.h"

#include <stdatomic.h>
#include <sys/types.h>

#define COMM_MSG_MAGIC 0x534d4941u /* "AIMS" */
#define COMM_HDR_BYTES 48
#define COMM_PROTO_VERSION 4
#define COMM_HOST_MAX 64
#define COMM_KEY_BYTES AI_KEY_BYTES
#define COMM_ABORT_REASON_MAX 400

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
    void *priv;            /* a transport's own per-channel state, if it
                            * needs more than the fields below */
    /* shm */
    shm_ring *ring;        /* tx ring (send side) or rx ring (recv side) */
    shm_bell *bell;        /* the peer's doorbell: rung after every move */
    unsigned char *data;
    uint64_t ring_bytes;
    comm_spell spell;      /* send side: slow spells on this pair (shm.c) */
    /* tcp */
    int fd;
    unsigned char *bounce; /* received bytes not yet consumed: [start, end) */
    size_t bstart, bend, bcap;
    uint64_t spos;         /* stream offset of bstart */
} comm_chan;

struct comm_transport_ops;

/* One remote rank as seen from this rank. */
typedef struct comm_peer {
    comm_chan_kind kind;
    const struct comm_transport_ops *ops; /* the transport that carries the pair; NULL for self */
    int nchan;                        /* 1 for shm, channels for tcp */
    comm_chan tx[COMM_MAX_CHANNELS];  /* to the peer */
    comm_chan rx[COMM_MAX_CHANNELS];  /* from the peer */
    pid_t pid;
    char host[COMM_HOST_MAX];
    uint32_t addr;                    /* IPv4, network order */
    uint16_t port;                    /* data listen port, host order */
    uint64_t machine;                 /* comm_rank_info.machine */
    int ctl_fd;                       /* the pair's control connection (abort
                                       * and revoke notices, agreement; every
                                       * pair has one, shared memory or not),
                                       * -1 for self or once it failed */
    /* Control bytes received and not yet consumed (ctl.c): notices are
     * taken out as they complete, agreement frames wait for the agreement. */
    unsigned char *ctl_buf;
    size_t ctl_len, ctl_cap;
    int ctl_dead;                     /* the connection ended or failed */
    int notice;                       /* 1: this peer's abort notice arrived */
    int notice_revoked;               /* ... and it was a revoke */
    int32_t notice_origin;
    char notice_reason[COMM_ABORT_REASON_MAX + 1];
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
    _Atomic int32_t abort_rank; /* 0: running; -1: a notice is being
                                 * written; r + 1: rank r aborted and the
                                 * notice below is complete */
    _Atomic int32_t ready;
    int32_t abort_origin;       /* the rank that failed first */
    int32_t abort_revoked;      /* 1: the notice is a revoke (ai_comm_revoke) */
    char abort_reason[COMM_ABORT_REASON_MAX + 1]; /* and how */
} comm_shm_header;

struct comm_transport {
    comm_peer *peers;       /* [size]; peers[rank] is self */
    int spin_passes;        /* idle passes before yielding the CPU */
    /* Waiting, per mode ([0] polling first, [1] blocking at once; see
     * ai_comm_set_block_waits): a shared-memory wait yields yield_s, then
     * blocks; a TCP-only wait polls (yielding) tcp_spin_s before it sleeps.
     * block_waits picks the mode; another thread may set it during a wait,
     * which takes it up at its next idle pass. */
    double yield_s[2];
    double tcp_spin_s[2];
    _Atomic int block_waits;
    shm_bell *bells;        /* [local_size] in the segment; bells[local_rank] is mine */
    shm_flag *flags;        /* [local_size] */
    unsigned char *slots;   /* [slot_sets][local_size][COMM_SLOT_BYTES] */
    int slot_sets;          /* comm_slot_sets */
    uint32_t slot_calls;    /* slot exchanges run (comm_slot_board.calls) */
    size_t slot_cursor;     /* comm_slot_board.cursor */
    int cma;                /* comm_slot_board.cma */
    comm_spell spell;       /* slow spells, this rank's slot writes (shm.c) */
    int listen_fd;          /* data-plane listener, closed after setup */
    /* shared memory */
    void *shm_base;
    size_t shm_bytes;
    comm_shm_header *shm;
    /* Keys (util/crypto.c) that doors prove knowledge of (gate.c): this
     * communicator's (its data listener), and the job token's (the
     * rendezvous and the join door), kept by shrink and grow. */
    unsigned char key[COMM_KEY_BYTES];
    unsigned char job_key[COMM_KEY_BYTES];
    uint64_t token_hash;    /* this communicator's name (shared-memory segments),
                             * from its key: no secret, never a credential */
    int no_shm;
    /* What this rank tells its peers when it aborts: the rank that failed
     * first (as far as this rank knows) and the cause. An error naming a
     * peer sets blame before it returns; comm_abort takes it. */
    int blame;              /* -1: this rank itself */
    int abort_origin;
    int abort_revoked;      /* what this rank learned or did was a revoke */
    char abort_reason[COMM_ABORT_REASON_MAX + 1];
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
ai_status_t comm_bootstrap(const ai_comm_config *cfg, const unsigned char key[COMM_KEY_BYTES],
                           comm_rank_info *self, comm_rank_info *table);

/* bootstrap.c: connect to a store (or a join door) at addr:port, open
 * with a hello (rank, size, self; a fresh nonce), prove knowledge of key
 * (gate.c), read the framed answer as parse judges it (wire.h's
 * convention: *need > 0 for more). *retry is set when the connection
 * closed unanswered (a full gate, a listener not up yet): worth another
 * try. */
typedef ai_status_t (*comm_answer_parse)(void *arg, const unsigned char *b, size_t len,
                                         size_t *need);
ai_status_t comm_store_ask(uint32_t addr, uint16_t port, const unsigned char key[COMM_KEY_BYTES],
                           uint32_t rank, uint32_t size, const comm_rank_info *self,
                           double deadline, comm_answer_parse parse, void *arg, int *retry);

/* bootstrap.c: answer a refused hello with a REJECT frame naming why
 * (best effort, never blocks); a comm_gate answer function. */
void comm_store_refuse(int fd, const char *why);

/* bootstrap.c: the same table exchanged through a key-value store the
 * caller shares with every rank (ai_comm_create_with_store). *nonce gets
 * rank 0's random value, the same on every rank, so that two communicators
 * made through one store by one set of processes never share a name. */
ai_status_t comm_bootstrap_store(const ai_comm_config *cfg, const ai_kv_store *kv,
                                 comm_rank_info *self, comm_rank_info *table, uint64_t *nonce);

/* tcp.c */
ai_status_t comm_tcp_listen(uint32_t addr, int *fd_out, uint16_t *port_out);
/* sockets helpers shared with bootstrap */
ai_status_t comm_sock_connect(uint32_t addr, uint16_t port, double deadline, int *fd_out);
/* Read/write exactly n bytes before `deadline` (ai_now() seconds). */
ai_status_t comm_sock_read_full(int fd, void *buf, size_t n, double deadline);
ai_status_t comm_sock_write_full(int fd, const void *buf, size_t n, double deadline);
ai_status_t comm_resolve_ipv4(const char *host, uint32_t *addr_out);
/* "host:port" into host[cap] and a port in 1..65535; 0, or -1 if it is not that. */
int comm_split_hostport(const char *text, char *host, size_t cap, int *port);

/* gate.c: a listener's untrusted connections (see there). */
#define COMM_GATE_MAX 128
#define COMM_GATE_BUF 192
#define COMM_GATE_DEADLINE_S 1.0
/* A door's judgement of a connection's opening frame: its length once it
 * is whole and acceptable, 0 for a valid beginning (wait for more), -1
 * refused with the reason in ai_last_error(). */
typedef int (*comm_gate_open)(void *arg, const unsigned char *b, size_t len);
/* The connection proved the key: admit it on the strength of its opening
 * frame (b, len): 1 admitted (the callback now owns fd), -1 refused. */
typedef int (*comm_gate_admit)(void *arg, int fd, const unsigned char *b, size_t len);
typedef struct comm_gate_conn {
    int fd, ready;
    int challenged;  /* its opening was whole and answered with a challenge */
    size_t got, opening;
    double since;
    unsigned char nonce[AI_NONCE_BYTES];
    unsigned char buf[COMM_GATE_BUF];
} comm_gate_conn;
typedef struct comm_gate {
    int lfd, n;
    const char *what;
    const unsigned char *key;
    comm_gate_open open;
    comm_gate_admit admit;
    void (*answer)(int fd, const char *why); /* tell a refused peer, or NULL */
    void *arg;
    unsigned refused, dropped;
    comm_gate_conn conns[COMM_GATE_MAX];
} comm_gate;
/* key (COMM_KEY_BYTES) must outlive the gate. */
void comm_gate_init(comm_gate *g, int lfd, const char *what, const unsigned char *key,
                    comm_gate_open open, comm_gate_admit admit,
                    void (*answer)(int fd, const char *why), void *arg);
/* Wait up to ms for the listener or a pending connection, then accept,
 * read and judge what arrived. */
ai_status_t comm_gate_pass(comm_gate *g, int ms);
/* Close what is still pending; log a count of what was refused. */
void comm_gate_close(comm_gate *g);
/* The proof of a side of a connection (accept: the acceptor's) under
 * key, for the opening frame's bytes and the acceptor's nonce. */
void comm_auth_proof(unsigned char mac[AI_MAC_BYTES], const unsigned char *key, int accept,
                     const unsigned char *opening, size_t n,
                     const unsigned char nonce[AI_NONCE_BYTES]);
/* The connecting side of the handshake on fd: send the opening (n bytes),
 * read the acceptor's answer; a challenge whose proof is right is answered
 * with ours (*challenged = 1). Anything else (a refusal) is left for the
 * caller: its first COMM_AUTH_PEEK bytes are in first[] (*challenged = 0).
 * A wrong proof is AI_ERR_PROTO: the acceptor does not know the key. */
#define COMM_AUTH_PEEK 4
ai_status_t comm_auth_connect(int fd, const unsigned char *key, const unsigned char *opening,
                              size_t n, double deadline, int *challenged,
                              unsigned char first[COMM_AUTH_PEEK]);
/* The address this host would use to reach addr (network order). */
ai_status_t comm_local_addr_towards(uint32_t addr, uint32_t *out);
/* A short pause before the attempt-th retry, growing to 0.5 s, jittered. */
void comm_backoff(int attempt, double deadline);

/* ctl.c: the control connections. comm_ctl_pump reads what peer's
 * connection has without blocking, takes notices out (peer->notice) and
 * keeps the rest; AI_ERR_PEER once it ended (ctl_dead). comm_ctl_check:
 * every peer pumped, the first notice found (or the host's shared-memory
 * one) adopted as this rank's failure, as the engine's liveness checks do;
 * AI_OK when there is none. comm_ctl_notice: wait up to grace_s for
 * peer's notice; 1 if it came. */
ai_status_t comm_ctl_pump(ai_comm *c, int peer);
/* comm_ctl_pump's reading for a connection already counted dead (a send
 * failed, or it ended): what the peer sent before is kept all the same. */
void comm_ctl_drain(ai_comm *c, int peer);
ai_status_t comm_ctl_check(ai_comm *c);
int comm_ctl_notice(ai_comm *c, int peer, double grace_s);
/* The failure a notice tells this rank: origin failed first for reason
 * (AI_ERR_PEER), or revoked (AI_ERR_REVOKED), learned via `via`. */
ai_status_t comm_ctl_adopt(ai_comm *c, int32_t origin, const char *reason, int revoked, int via,
                           const char *how);
/* A whole frame of magic `magic` at the front of peer's kept bytes:
 * 1 with *frame and *len (header included) set; consume with
 * comm_ctl_consume. 0 when none is complete. */
int comm_ctl_frame(ai_comm *c, int peer, const unsigned char **frame, size_t *len);
/* The same for the frame starting off bytes in (off: the ends of the ones
 * before), to look past the first without consuming it. */
int comm_ctl_frame_at(ai_comm *c, int peer, size_t off, const unsigned char **frame, size_t *len);
void comm_ctl_consume(ai_comm *c, int peer, size_t len);
/* Send a whole control frame before deadline; AI_ERR_PEER (ctl_dead set)
 * if the connection failed. */
ai_status_t comm_ctl_send(ai_comm *c, int peer, const void *frame, size_t len, double deadline);

/* ------------------------------------------------------ the transports
 *
 * Each transport (shm.c, tcp.c) connects pairs of ranks and moves the
 * framed byte streams of their channels, behind one table of operations;
 * the engine (engine.c) posts, progresses and waits on requests through
 * it and knows no transport by name. comm_transports lists them in setup
 * order, from the fallback (TCP, whose setup also opens every pair's
 * control connection) to the most specific; a pair is carried by the last
 * one whose reaches() accepts it. */
typedef struct comm_transport_ops {
    const char *name;
    comm_chan_kind kind;
    /* 1: every move on its channels rings the other side's doorbell
     * (comm_bell_ring), so an idle wait on them may block in the futex;
     * 0: the engine polls poll_fd's descriptors instead. */
    int rings_bell;
    /* Can this transport connect this rank to peer? */
    int (*reaches)(const ai_comm *c, int peer);
    /* Connect every pair it carries (p->ops is this table); once, in
     * table order, after the pairs are assigned. */
    ai_status_t (*setup)(ai_comm *c);
    /* Move what channel k of r can take or has now (comm_frame_tx,
     * comm_frame_rx); *moved = 1 if any byte moved. Never blocks. */
    ai_status_t (*send)(ai_comm *c, comm_req *r, int k, comm_chan *ch, int *moved);
    ai_status_t (*recv)(ai_comm *c, comm_req *r, int k, comm_chan *ch, int *moved);
    /* The header of the next message waiting on p's channel 0, whole,
     * into h without consuming it: 1, or 0 if none is whole yet. */
    int (*peek)(comm_peer *p, unsigned char *h);
    /* Liveness beyond the control connection (a local process that died),
     * or NULL: a failure naming peer. */
    ai_status_t (*check)(ai_comm *c, int peer);
    /* The descriptor to poll for ch (rings_bell 0). */
    int (*poll_fd)(const comm_chan *ch);
    /* On abort: stop p's channels so that a peer blocked on this rank
     * fails now instead of at its timeout; NULL if the abort flag and the
     * notices already reach it. */
    void (*stop)(comm_peer *p);
    /* Release everything setup made; safe on a partly set up or never
     * set up communicator. */
    void (*close)(ai_comm *c);
} comm_transport_ops;

extern const comm_transport_ops comm_tcp_ops, comm_shm_ops;
/* engine.c: the table, and its length. */
extern const comm_transport_ops *const comm_transports[];
extern const int comm_ntransports;

/* engine.c: assign every pair its transport (p->ops, p->kind), then run
 * every transport's setup; comm_transports_close: every transport's close. */
ai_status_t comm_transports_setup(ai_comm *c);
void comm_transports_close(ai_comm *c);

/* engine.c: the framing, for the transports' send and recv. Channel k of
 * a request moves header | payload [chan_off[k], chan_off[k+1]) | pad. */
static inline size_t comm_chan_len(const comm_req *r, int k)
{
    return r->chan_off[k + 1] - r->chan_off[k];
}
static inline size_t comm_pad8(size_t n) { return (n + 7) & ~(size_t)7; }
static inline size_t comm_chan_total(const comm_req *r, int k)
{
    return COMM_HDR_BYTES + comm_pad8(comm_chan_len(r, k));
}
/* The next contiguous piece of channel k's outgoing stream at `pos`. */
const unsigned char *comm_frame_tx(const comm_req *r, int k, size_t pos, size_t *n);
/* Feed n contiguous incoming bytes to channel k of a receive (checking
 * the header, copying or reducing the payload). Returns the bytes used:
 * fewer than n when the channel's message ends, or when a reduce needs
 * the rest of an element first; *st the header's mismatch, if any. */
size_t comm_frame_rx(const ai_comm *c, comm_req *r, int k, const unsigned char *p, size_t n,
                     ai_status_t *st);

int comm_proc_is_dead(pid_t pid);

/* stall.c: comm_peer_stopped: peer's process is on this kernel and
 * stopped (SIGSTOP, a debugger); comm_stall_error is in engine.h. */
int comm_peer_stopped(const ai_comm *c, int peer);

#endif
