/*
 * Rendezvous: a small TCP store run by rank 0 for the duration of
 * ai_comm_create. Every other rank connects, introduces itself (rank, size,
 * a fresh nonce, its data address, pid, host id), proves that it knows the
 * job token (the challenge-response of gate.c) and receives the table of
 * all ranks once everybody has joined.
 *
 * Frames: wire.h. Rank 0 validates every hello and refuses (with a
 * reason, sent back in a REJECT frame and logged) wrong versions, bad
 * sizes, duplicate ranks, bytes that are not a frame at all and, after
 * its challenge, a wrong proof of the token. Untrusted connections pass
 * through a gate (gate.c): a second to complete the handshake, a bounded
 * table that drops an entry when a new connection arrives while it is
 * full. A rank whose connection is closed unanswered (dropped from a full
 * gate, or rank 0 not up yet) tries again with backoff until its timeout;
 * a refusal with a reason is final.
 */
#include "comm/transport/transport.h"
#include "comm/transport/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ------------------------------------------------------------- rank 0 */

typedef struct bs_store {
    const ai_comm_config *cfg;
    comm_rank_info *table;
    int *fd;       /* [size] each joined rank's connection, -1 until then */
    int njoined;
} bs_store;

void comm_store_refuse(int fd, const char *why)
{
    unsigned char b[COMM_WIRE_HDR + COMM_WIRE_REASON_MAX];
    size_t n = strlen(why) < COMM_WIRE_REASON_MAX ? strlen(why) : COMM_WIRE_REASON_MAX;
    comm_wire_hdr_pack(b, COMM_WIRE_REJECT, (uint32_t)n);
    memcpy(b + COMM_WIRE_HDR, why, n);
    /* Best effort: the socket is fresh, a short frame fits its buffer. */
    (void)!send(fd, b, COMM_WIRE_HDR + n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* A hello's claims: the right size, a rank in range, not yet joined. */
static int bs_claims(bs_store *s, const unsigned char *b, size_t len, comm_wire_hello *h)
{
    size_t need;
    if (comm_wire_hello_parse(b, len, h, &need) != AI_OK)
        return -1;
    if (need)
        return 0;
    if (h->size != (uint32_t)s->cfg->size)
        return util_fail(AI_ERR_PROTO, "job size differs from rank 0's"), -1;
    if (h->rank == 0 || h->rank >= h->size)
        return util_fail(AI_ERR_PROTO, "rank out of range"), -1;
    if (s->fd[h->rank] >= 0)
        return util_fail(AI_ERR_PROTO, "rank already joined"), -1;
    return COMM_WIRE_HELLO_FRAME;
}

static int bs_open(void *arg, const unsigned char *b, size_t len)
{
    comm_wire_hello h;
    return bs_claims(arg, b, len, &h);
}

static int bs_admit(void *arg, int fd, const unsigned char *b, size_t len)
{
    bs_store *s = arg;
    comm_wire_hello h;
    if (bs_claims(s, b, len, &h) <= 0)
        return -1; /* a rank that joined meanwhile */
    s->table[h.rank] = h.entry;
    s->fd[h.rank] = fd;
    s->njoined++;
    return 1;
}

static ai_status_t store_serve(const ai_comm_config *cfg, const unsigned char *key, int lfd,
                               comm_rank_info *table, double deadline)
{
    ai_status_t st = AI_OK;
    bs_store s = {.cfg = cfg, .table = table, .njoined = 1};
    comm_gate *g = malloc(sizeof *g);
    s.fd = malloc((size_t)cfg->size * sizeof *s.fd);
    if (!g || !s.fd) {
        free(g);
        free(s.fd);
        return util_fail(AI_ERR_NOMEM, "rendezvous table");
    }
    for (int r = 0; r < cfg->size; r++)
        s.fd[r] = -1;
    comm_gate_init(g, lfd, "rendezvous", key, bs_open, bs_admit, comm_store_refuse, &s);
    while (s.njoined < cfg->size) {
        double now = ai_now();
        if (now >= deadline) {
            char missing[200] = "";
            size_t len = 0;
            for (int r = 1; r < cfg->size && len < sizeof missing - 12; r++)
                if (s.fd[r] < 0)
                    len += (size_t)snprintf(missing + len, sizeof missing - len, " %d", r);
            st = util_fail(AI_ERR_TIMEOUT, "rendezvous timed out after %.1f s: %d of %d ranks joined (missing:%s)",
                           cfg->timeout_s, s.njoined, cfg->size, missing);
            goto out;
        }
        int ms = (int)((deadline - now) * 1000) + 1;
        if ((st = comm_gate_pass(g, AI_MIN(ms, 200))) != AI_OK)
            goto out;
    }
    /* Everyone is here: send the table to each joined rank. */
    size_t body = (size_t)cfg->size * COMM_WIRE_ENTRY;
    unsigned char *msg = malloc(COMM_WIRE_HDR + body);
    if (!msg) {
        st = util_fail(AI_ERR_NOMEM, "rendezvous table");
        goto out;
    }
    comm_wire_hdr_pack(msg, COMM_WIRE_TABLE, (uint32_t)body);
    for (int r = 0; r < cfg->size; r++)
        comm_wire_entry_pack(msg + COMM_WIRE_HDR + (size_t)r * COMM_WIRE_ENTRY, &table[r]);
    for (int r = 1; r < cfg->size && st == AI_OK; r++) {
        st = comm_sock_write_full(s.fd[r], msg, COMM_WIRE_HDR + body, deadline);
        if (st != AI_OK)
            util_fail_prefix(st, "sending the rank table to rank %d", r);
    }
    free(msg);
out:
    comm_gate_close(g);
    for (int r = 1; r < cfg->size; r++)
        if (s.fd[r] >= 0)
            close(s.fd[r]);
    free(s.fd);
    free(g);
    return st;
}

/* ------------------------------------------------------- other ranks */

ai_status_t comm_store_ask(uint32_t addr, uint16_t port, const unsigned char key[COMM_KEY_BYTES],
                           uint32_t rank, uint32_t size, const comm_rank_info *self,
                           double deadline, comm_answer_parse parse, void *arg, int *retry)
{
    int fd, challenged;
    *retry = 0;
    ai_status_t st = comm_sock_connect(addr, port, deadline, &fd);
    if (st != AI_OK)
        return st;
    unsigned char hello[COMM_WIRE_HELLO_FRAME], nonce[COMM_WIRE_NONCE], first[COMM_AUTH_PEEK];
    util_random_bytes(nonce, sizeof nonce);
    comm_wire_hello_pack(hello, rank, size, nonce, self);
    st = comm_auth_connect(fd, key, hello, sizeof hello, deadline, &challenged, first);
    size_t want = COMM_WIRE_HDR, got = 0, need = 0;
    unsigned char *ans = NULL;
    while (st == AI_OK) {
        unsigned char *more = realloc(ans, want);
        if (!more) {
            st = util_fail(AI_ERR_NOMEM, "the answer to a hello");
            break;
        }
        ans = more;
        if (!challenged && got == 0) { /* refused before the challenge */
            memcpy(ans, first, COMM_AUTH_PEEK);
            got = COMM_AUTH_PEEK;
        }
        if ((st = comm_sock_read_full(fd, ans + got, want - got, deadline)) != AI_OK)
            break;
        got = want;
        if ((st = parse(arg, ans, got, &need)) != AI_OK) {
            util_fail_prefix(st, "answered with something that is not an autoinfra peer of "
                             "protocol version %d", COMM_PROTO_VERSION);
            break;
        }
        if (!need)
            break;
        want = got + need;
    }
    free(ans);
    close(fd);
    if (st == AI_ERR_PEER && got == 0)
        *retry = 1; /* closed unanswered */
    return st;
}

typedef struct join_answer {
    uint32_t size;
    comm_rank_info *table;
    char why[COMM_WIRE_REASON_MAX + 1];
    int rejected;
} join_answer;

static ai_status_t table_parse(void *arg, const unsigned char *b, size_t len, size_t *need)
{
    join_answer *a = arg;
    return comm_wire_reply_parse(b, len, a->size, a->table, a->why, &a->rejected, need);
}

/* One attempt: connect, say hello, prove the token, read the answer.
 * *retry is set when the store closed the connection without an answer
 * (it was full, or it is not up yet): worth another try; a refusal with a
 * reason is final. */
static ai_status_t join_once(const ai_comm_config *cfg, const unsigned char *key,
                             const comm_rank_info *self, uint32_t store_addr,
                             comm_rank_info *table, double deadline, int *retry)
{
    join_answer a = {.size = (uint32_t)cfg->size, .table = table};
    ai_status_t st = comm_store_ask(store_addr, (uint16_t)cfg->store_port, key, (uint32_t)cfg->rank,
                                    (uint32_t)cfg->size, self, deadline, table_parse, &a, retry);
    if (st != AI_OK)
        return util_fail_prefix(st, "rendezvous store (rank 0) at %s:%d", cfg->store_host,
                                cfg->store_port);
    if (a.rejected)
        st = util_fail(AI_ERR_PROTO, "rendezvous at %s:%d refused rank %d: %s", cfg->store_host,
                       cfg->store_port, cfg->rank, a.why);
    return st;
}

static ai_status_t store_join(const ai_comm_config *cfg, const unsigned char *key,
                              uint32_t store_addr, comm_rank_info *self, comm_rank_info *table,
                              double deadline)
{
    for (int attempt = 0;; attempt++) {
        int retry;
        ai_status_t st = join_once(cfg, key, self, store_addr, table, deadline, &retry);
        if (st == AI_OK || !retry || ai_now() >= deadline)
            return st == AI_OK ? AI_OK
                               : util_fail_prefix(st, "rendezvous with rank 0 at %s:%d (attempt %d)",
                                                  cfg->store_host, cfg->store_port, attempt + 1);
        util_log(AI_LOG_DEBUG, "rendezvous store closed the connection unanswered; retrying");
        comm_backoff(attempt, deadline);
    }
}

ai_status_t comm_bootstrap(const ai_comm_config *cfg, const unsigned char key[COMM_KEY_BYTES],
                           comm_rank_info *self, comm_rank_info *table)
{
    double deadline = ai_now() + cfg->timeout_s;
    uint32_t store_addr;
    ai_status_t st = comm_resolve_ipv4(cfg->store_host, &store_addr);
    if (st != AI_OK)
        return st;
    if (cfg->rank != 0)
        return store_join(cfg, key, store_addr, self, table, deadline);
    int lfd;
    uint16_t port = (uint16_t)cfg->store_port;
    st = comm_tcp_listen(store_addr, &lfd, &port);
    if (st != AI_OK)
        return util_fail_prefix(st, "rank 0 cannot open the rendezvous store");
    if (self->addr == 0)
        self->addr = store_addr;
    table[0] = *self;
    st = store_serve(cfg, key, lfd, table, deadline);
    close(lfd);
    return st;
}

/* ------------------------------------------- through the caller's store */

/* Each rank publishes "autoinfra/rank/<r>": its table entry and a nonce
 * (only rank 0's is used), then reads every other rank's. self->addr is
 * the address this rank's data listener is bound to (comm.c). */
ai_status_t comm_bootstrap_store(const ai_comm_config *cfg, const ai_kv_store *kv,
                                 comm_rank_info *self, comm_rank_info *table, uint64_t *nonce)
{
    double deadline = ai_now() + cfg->timeout_s;
    ai_status_t st;
    unsigned char val[COMM_WIRE_ENTRY + 8];
    uint64_t mine;
    util_random_bytes(&mine, sizeof mine);
    comm_wire_entry_pack(val, self);
    memcpy(val + COMM_WIRE_ENTRY, &mine, 8);
    char key[48];
    snprintf(key, sizeof key, "autoinfra/rank/%d", cfg->rank);
    if ((st = kv->set(kv->ctx, key, val, sizeof val)) != AI_OK)
        return util_fail(st, "rank %d: publishing its address in the store (key %s) failed: %s",
                         cfg->rank, key, ai_strerror(st));
    for (int r = 0; r < cfg->size; r++) {
        if (r == cfg->rank) {
            table[r] = *self;
            if (r == 0)
                *nonce = mine;
            continue;
        }
        snprintf(key, sizeof key, "autoinfra/rank/%d", r);
        double left = deadline - ai_now();
        st = left > 0 ? kv->get(kv->ctx, key, val, sizeof val, left) : AI_ERR_TIMEOUT;
        if (st == AI_ERR_TIMEOUT)
            return util_fail(st, "rank %d did not publish its address in the store (key %s) within "
                             "%.1f s", r, key, cfg->timeout_s);
        if (st != AI_OK)
            return util_fail(st, "reading rank %d's address from the store (key %s) failed: %s", r,
                             key, ai_strerror(st));
        comm_wire_entry_unpack(val, &table[r]);
        if (r == 0)
            memcpy(nonce, val + COMM_WIRE_ENTRY, 8);
    }
    return AI_OK;
}
