/*
 * New communicators from an old one (docs/faults.md): shrink to the
 * survivors, grow by newcomers, and a newcomer's join.
 *
 * None of them needs the rendezvous store (whose rank 0 may be the dead
 * rank): every rank already knows every other rank's address, pid and
 * host from the old communicator's table, and each opens a fresh listener
 * for the new one's mesh. Shrink agrees on the survivors and their new
 * ports in one agreement (the port is each rank's aux value). Grow goes
 * through rank 0: the members send it their new entries over the control
 * connections, newcomers prove that they know the job token at its join
 * door (its data listener, kept open for the communicator's life, whose
 * address every rank knows; the challenge-response of gate.c under the
 * job token's key), and rank 0 sends everyone the grown table. A new
 * communicator's key (its data listeners' proofs, hence its
 * shared-memory name) is derived from the old one's with the agreement's
 * number (shrink) or from the job token's with rank 0's nonce (grow), so
 * it never meets the old one's, and nobody without the token can derive
 * it from the nonce it may have seen.
 */
#include "comm/ft/state.h"
#include "comm/transport/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>


static comm_params params_of(const ai_comm *c)
{
    const struct comm_transport *tp = c->tp;
    return (comm_params){.timeout_s = c->timeout_s, .channels = c->channels,
                         .no_shm = tp->no_shm,
                         .yield_s = {tp->yield_s[0], tp->yield_s[1]},
                         .tcp_spin_s = {tp->tcp_spin_s[0], tp->tcp_spin_s[1]},
                         .block_waits = atomic_load(&tp->block_waits)};
}

/* A fresh listener on the address the job knows this rank by. */
static ai_status_t listen_again(const ai_comm *c, int *fd, uint16_t *port)
{
    uint32_t addr = c->tp->peers[c->rank].addr;
    if (addr == 0)
        addr = htonl(INADDR_LOOPBACK);
    *port = 0;
    return comm_tcp_listen(addr, fd, port);
}

static comm_rank_info entry_of(const ai_comm *c, int j, uint16_t port)
{
    const comm_peer *p = &c->tp->peers[j];
    comm_rank_info e = {.addr = p->addr ? p->addr : htonl(INADDR_LOOPBACK), .port = port,
                        .pid = p->pid, .machine = p->machine};
    snprintf(e.host, sizeof e.host, "%s", p->host);
    return e;
}

/* The new communicator from its table; lfd (this rank's listener) is
 * taken over, closed on failure too. */
static ai_status_t build(const comm_params *pp, int rank, int size, const unsigned char *job_key,
                         const unsigned char *key, int lfd, const comm_rank_info *table,
                         ai_comm **out)
{
    ai_comm *nc = NULL;
    ai_status_t st = comm_alloc(rank, size, pp, job_key, key, &nc);
    if (st != AI_OK) {
        close(lfd);
        return st;
    }
    nc->tp->listen_fd = lfd;
    if ((st = comm_build(nc, table)) != AI_OK) {
        comm_destroy(nc);
        return st;
    }
    util_log_set_rank(rank);
    *out = nc;
    return AI_OK;
}

/* ---------------------------------------------------------------- shrink */

ai_status_t comm_ft_shrink(ai_comm *c, ai_comm **out)
{
    int n = c->size, lfd = -1;
    uint16_t port;
    ai_status_t st = listen_again(c, &lfd, &port);
    if (st != AI_OK)
        return util_fail_prefix(st, "rank %d: shrink", c->rank);
    uint64_t flags = 0, *ports = calloc((size_t)n, sizeof *ports);
    comm_rank_info *table = calloc((size_t)n, sizeof *table);
    if (!ports || !table) {
        st = util_fail(AI_ERR_NOMEM, "shrink");
        goto err;
    }
    if ((st = comm_ft_agree(c, &flags, port, ports)) != AI_OK)
        goto err;
    /* Whoever has not heard of the failure yet hears it now; the old
     * communicator answers only agree, failed, shrink and destroy. */
    if (c->state == AI_OK) {
        util_fail(AI_ERR_REVOKED, "shrunk into a new communicator");
        comm_abort(c, AI_ERR_REVOKED);
    }
    int size = 0, rank = -1;
    for (int j = 0; j < n; j++) {
        if (c->ft->failed[j])
            continue;
        if (j == c->rank)
            rank = size;
        table[size++] = entry_of(c, j, (uint16_t)ports[j]);
    }
    unsigned char key[COMM_KEY_BYTES];
    util_key_derive(key, c->tp->key, "autoinfra shrink", &c->ft->epoch, sizeof c->ft->epoch);
    comm_params pp = params_of(c);
    st = build(&pp, rank, size, c->tp->job_key, key, lfd, table, out);
    lfd = -1;
    if (st != AI_OK)
        goto err;
    if (rank == 0) {
        /* Rank 0 survived: its door and lobby go on. A survivor that
         * becomes rank 0 opens the door again. */
        comm_door *d;
        comm_door_move(c, *out);
        (void)comm_door_get(*out, &d);
    }
    free(ports);
    free(table);
    return AI_OK;
err:
    if (lfd >= 0)
        close(lfd);
    free(ports);
    free(table);
    return util_fail_prefix(st, "rank %d of %d: shrink", c->rank, n);
}

/* ------------------------------------------------------------------ grow */

/* Body of a GROW_TABLE frame: status i32 | size u32 | nonce u64 | reason[128] | entries. */
#define GROW_REASON 128
#define GROW_FIXED (16 + GROW_REASON)

static ai_status_t send_table(ai_comm *c, int j, ai_status_t status, const char *why,
                              uint64_t nonce, const comm_rank_info *table, int size,
                              double deadline)
{
    int ns = status == AI_OK ? size : 0;
    size_t body = GROW_FIXED + (size_t)ns * COMM_WIRE_ENTRY;
    unsigned char *f = calloc(1, COMM_WIRE_FT_HDR + body);
    if (!f)
        return util_fail(AI_ERR_NOMEM, "grow table");
    comm_wire_ft_hdr_pack(f, FT_KIND_GROW_TABLE, (uint32_t)body);
    int32_t s32 = status;
    uint32_t u = (uint32_t)ns;
    memcpy(f + COMM_WIRE_FT_HDR, &s32, 4);
    memcpy(f + COMM_WIRE_FT_HDR + 4, &u, 4);
    memcpy(f + COMM_WIRE_FT_HDR + 8, &nonce, 8);
    snprintf((char *)f + COMM_WIRE_FT_HDR + 16, GROW_REASON, "%s", why ? why : "");
    for (int i = 0; i < ns; i++)
        comm_wire_entry_pack(f + COMM_WIRE_FT_HDR + GROW_FIXED + (size_t)i * COMM_WIRE_ENTRY,
                             &table[i]);
    ai_status_t st = comm_ctl_send(c, j, f, COMM_WIRE_FT_HDR + body, deadline);
    free(f);
    return st;
}

/* Wait for peer j's next control frame of `kind`, until deadline. */
static ai_status_t ctl_await(ai_comm *c, int j, uint16_t kind, double deadline,
                             const unsigned char **frame, size_t *len)
{
    for (;;) {
        ai_status_t pst = comm_ctl_pump(c, j);
        while (comm_ctl_frame(c, j, frame, len)) {
            uint16_t k;
            memcpy(&k, *frame + 6, 2);
            if (k == kind)
                return AI_OK;
            comm_ctl_consume(c, j, *len); /* a leftover agreement frame */
        }
        if (pst != AI_OK)
            return util_fail(AI_ERR_PEER, "rank %d's control connection ended", j);
        double left = deadline - ai_now();
        if (left <= 0)
            return util_fail(AI_ERR_TIMEOUT, "rank %d did not answer in time", j);
        struct pollfd pfd = {.fd = c->tp->peers[j].ctl_fd, .events = POLLIN};
        (void)poll(&pfd, 1, (int)AI_MIN(left * 1000 + 1, 100));
    }
}

/* Rank 0: the members' entries into table, until `want` live newcomers
 * wait at the door. Every member's control connection is watched all the
 * while: one that ends is a member that died, named as such. */
static ai_status_t grow_gather(ai_comm *c, comm_door *door, int want, comm_rank_info *table,
                               double deadline)
{
    int n = c->size, have = 1, waiting = 0;
    unsigned char *in = calloc((size_t)n, 1);
    ai_status_t st = AI_OK;
    if (!in)
        return util_fail(AI_ERR_NOMEM, "grow");
    for (int ms = 0;; ms = 20) {
        if ((st = comm_door_poll(c, door, ms, &waiting)) != AI_OK)
            break;
        for (int j = 1; j < n && st == AI_OK; j++) {
            const unsigned char *f;
            size_t len;
            ai_status_t pst = comm_ctl_pump(c, j);
            while (!in[j] && comm_ctl_frame(c, j, &f, &len)) {
                uint16_t k;
                memcpy(&k, f + 6, 2);
                if (k == FT_KIND_GROW_ENTRY && len == COMM_WIRE_FT_HDR + COMM_WIRE_ENTRY) {
                    comm_wire_entry_unpack(f + COMM_WIRE_FT_HDR, &table[j]);
                    in[j] = 1;
                    have++;
                }
                comm_ctl_consume(c, j, len);
            }
            if (pst != AI_OK)
                st = util_fail(AI_ERR_PEER, "member rank %d died during the grow (its control "
                               "connection ended%s)", j, in[j] ? " after it sent its entry" : "");
        }
        if (st != AI_OK || (have == n && waiting >= want))
            break;
        if (ai_now() >= deadline) {
            st = util_fail(AI_ERR_TIMEOUT, "%d of %d newcomers waited at the join door and %d of %d "
                           "members arrived within the grow's timeout", waiting, want, have, n);
            break;
        }
    }
    free(in);
    return st;
}

ai_status_t comm_ft_grow(ai_comm *c, int joiners, double timeout_s, ai_comm **out)
{
    if (c->state != AI_OK)
        return comm_state_error(c, "grow");
    if (joiners < 1 || joiners > COMM_WIRE_MAX_RANKS - c->size)
        return util_fail(AI_ERR_INVALID, "grow by %d newcomers; want 1 or more", joiners);
    if (joiners > COMM_DOOR_LOBBY_MAX)
        return util_fail(AI_ERR_INVALID, "grow by %d newcomers; at most %d wait at the join door "
                         "at once", joiners, COMM_DOOR_LOBBY_MAX);
    if (c->size == 1 && c->tp->listen_fd < 0 && !util_param_str(UTIL_PARAM_JOIN_DOOR))
        return util_fail(AI_ERR_UNSUPPORTED, "grow: a communicator of one rank created alone has "
                         "no join door (create it with size > 1, shrink into it, or set "
                         "AUTOINFRA_JOIN_DOOR)");
    int n = c->size, size = n + joiners, lfd = -1, got = 0;
    double wait = timeout_s > 0 ? timeout_s : c->timeout_s;
    double deadline = ai_now() + wait;
    uint16_t port;
    uint64_t nonce = 0;
    comm_door *door = NULL;
    comm_rank_info *table = calloc((size_t)size, sizeof *table);
    int *jfd = malloc((size_t)joiners * sizeof *jfd);
    ai_status_t st = AI_OK;
    if (!table || !jfd) {
        st = util_fail(AI_ERR_NOMEM, "grow");
        goto out;
    }
    if ((st = listen_again(c, &lfd, &port)) != AI_OK)
        goto out;
    comm_rank_info mine = entry_of(c, c->rank, port);
    if (c->rank != 0) {
        unsigned char f[COMM_WIRE_FT_HDR + COMM_WIRE_ENTRY];
        comm_wire_ft_hdr_pack(f, FT_KIND_GROW_ENTRY, COMM_WIRE_ENTRY);
        comm_wire_entry_pack(f + COMM_WIRE_FT_HDR, &mine);
        const unsigned char *t;
        size_t len;
        if ((st = comm_ctl_send(c, 0, f, sizeof f, deadline)) != AI_OK ||
            (st = ctl_await(c, 0, FT_KIND_GROW_TABLE, deadline + c->timeout_s, &t, &len)) != AI_OK)
            goto out;
        int32_t s32;
        uint32_t ns;
        memcpy(&s32, t + COMM_WIRE_FT_HDR, 4);
        memcpy(&ns, t + COMM_WIRE_FT_HDR + 4, 4);
        memcpy(&nonce, t + COMM_WIRE_FT_HDR + 8, 8);
        if (s32 != AI_OK) {
            char why[GROW_REASON];
            snprintf(why, sizeof why, "%s", (const char *)t + COMM_WIRE_FT_HDR + 16);
            comm_ctl_consume(c, 0, len);
            st = util_fail(s32 < 0 && s32 > -100 ? (ai_status_t)s32 : AI_ERR_PROTO,
                           "rank 0 could not grow the communicator: %s", why);
            goto out;
        }
        if (ns != (uint32_t)size || len != COMM_WIRE_FT_HDR + GROW_FIXED + (size_t)ns * COMM_WIRE_ENTRY) {
            comm_ctl_consume(c, 0, len);
            st = util_fail(AI_ERR_PROTO, "rank 0 sent a grown table of %u ranks, want %d", ns, size);
            goto out;
        }
        for (int i = 0; i < size; i++)
            comm_wire_entry_unpack(t + COMM_WIRE_FT_HDR + GROW_FIXED + (size_t)i * COMM_WIRE_ENTRY,
                                   &table[i]);
        comm_ctl_consume(c, 0, len);
    } else {
        table[0] = mine;
        if ((st = comm_door_get(c, &door)) == AI_OK &&
            (st = grow_gather(c, door, joiners, table, deadline)) == AI_OK) {
            comm_door_take(door, joiners, jfd, table + n);
            got = joiners;
        }
        if (st == AI_OK)
            util_random_bytes(&nonce, sizeof nonce);
        const char *why = st == AI_OK ? NULL : ai_last_error();
        char reason[GROW_REASON];
        snprintf(reason, sizeof reason, "%s", why ? why : "");
        double until = ai_now() + c->timeout_s;
        for (int j = 1; j < n; j++)
            (void)send_table(c, j, st, reason, nonce, table, size, until);
        for (int i = 0; i < got; i++) {
            if (st == AI_OK) {
                comm_wire_joined jn = {.rank = (uint32_t)(n + i), .size = (uint32_t)size,
                                       .nonce = nonce, .channels = (uint32_t)c->channels,
                                       .no_shm = (uint32_t)c->tp->no_shm};
                unsigned char *b = malloc(COMM_WIRE_HDR + COMM_WIRE_JOINED_FIXED +
                                          (size_t)size * COMM_WIRE_ENTRY);
                ai_status_t wst = b ? comm_sock_write_full(jfd[i], b, comm_wire_joined_pack(b, &jn, table),
                                                           until)
                                    : AI_ERR_NOMEM;
                free(b);
                if (wst != AI_OK)
                    util_log(AI_LOG_WARN, "grow: could not send newcomer %d its table", n + i);
            } else {
                comm_store_refuse(jfd[i], reason);
            }
        }
        if (st != AI_OK) {
            st = util_fail(st, "%s", reason); /* not a send's error to a dead member */
            goto out;
        }
    }
    comm_params pp = params_of(c);
    unsigned char key[COMM_KEY_BYTES];
    util_key_derive(key, c->tp->job_key, "autoinfra grow", &nonce, sizeof nonce);
    st = build(&pp, c->rank, size, c->tp->job_key, key, lfd, table, out);
    lfd = -1;
    if (st == AI_OK && c->rank == 0)
        comm_door_move(c, *out);
out:
    for (int i = 0; i < got; i++)
        close(jfd[i]);
    if (lfd >= 0)
        close(lfd);
    free(jfd);
    free(table);
    return st == AI_OK ? AI_OK : util_fail_prefix(st, "rank %d of %d: grow by %d", c->rank, n, joiners);
}

/* ------------------------------------------------------------------ join */

ai_status_t comm_ft_join_addr(const ai_comm *c, char *buf, size_t len)
{
    if (!c || !buf)
        return util_fail(AI_ERR_INVALID, "ai_comm_join_addr: NULL communicator or buffer");
    return comm_door_addr(c, buf, len);
}

ai_status_t comm_ft_join_pending(ai_comm *c, int *waiting)
{
    comm_door *d;
    if (!c || !waiting)
        return util_fail(AI_ERR_INVALID, "ai_comm_join_pending: NULL argument");
    *waiting = 0;
    if (c->state != AI_OK)
        return AI_OK; /* it cannot grow; its next call says why */
    ai_status_t st = comm_door_get(c, &d);
    return st == AI_OK ? comm_door_poll(c, d, 0, waiting) : st;
}

#define JOIN_MAX_RANKS 4096 /* the largest grown table a newcomer accepts */
#define JOIN_DOORS_MAX 16

typedef struct joined_answer {
    comm_wire_joined j;
    comm_rank_info *table;
    char why[COMM_WIRE_REASON_MAX + 1];
    int rejected;
} joined_answer;

static ai_status_t joined_parse(void *arg, const unsigned char *b, size_t len, size_t *need)
{
    joined_answer *a = arg;
    return comm_wire_joined_parse(b, len, JOIN_MAX_RANKS, &a->j, a->table, a->why, &a->rejected,
                                  need);
}

ai_status_t comm_ft_join(const ai_comm_config *cfg, const char *job_addr, ai_comm **out)
{
    ai_status_t st;
    const char *where = job_addr ? job_addr : util_param_str(UTIL_PARAM_JOIN_ADDR);
    if (!cfg)
        return util_fail(AI_ERR_INVALID, "ai_comm_join: no configuration");
    if (!where)
        return util_fail(AI_ERR_INVALID, "ai_comm_join: no job address (pass one from "
                         "ai_comm_join_addr, or set AUTOINFRA_JOIN_ADDR=host:port)");
    /* A list of doors: the one the job's current rank 0 holds answers. */
    uint32_t door[JOIN_DOORS_MAX];
    uint16_t dport[JOIN_DOORS_MAX];
    int nd = 0;
    for (const char *p = where; *p;) {
        size_t k = strcspn(p, ",");
        char item[300], host[256];
        int port;
        snprintf(item, sizeof item, "%.*s", (int)AI_MIN(k, sizeof item - 1), p);
        p += k + (p[k] == ',');
        if (nd == JOIN_DOORS_MAX)
            return util_fail(AI_ERR_INVALID, "ai_comm_join: more than %d addresses in '%s'",
                             JOIN_DOORS_MAX, where);
        if (comm_split_hostport(item, host, sizeof host, &port) != 0)
            return util_fail(AI_ERR_INVALID, "ai_comm_join: job address '%s' is not host:port",
                             item);
        if ((st = comm_resolve_ipv4(host, &door[nd])) != AI_OK)
            return util_fail_prefix(st, "ai_comm_join: job address %s", item);
        dport[nd++] = (uint16_t)port;
    }
    if (nd == 0)
        return util_fail(AI_ERR_INVALID, "ai_comm_join: an empty job address");
    double timeout = cfg->timeout_s;
    if (timeout <= 0 && (st = util_param_double(UTIL_PARAM_TIMEOUT, &timeout)) != AI_OK)
        return st;
    if (timeout <= 0)
        timeout = util_param_default(UTIL_PARAM_TIMEOUT);
    const char *token = cfg->token ? cfg->token : util_param_str(UTIL_PARAM_TOKEN);
    if (!token)
        token = "";
    unsigned char job_key[COMM_KEY_BYTES];
    if ((st = util_crypto_init()) != AI_OK)
        return st;
    comm_token_key(token, job_key);
    uint32_t mine;
    if ((st = comm_local_addr_towards(door[0], &mine)) != AI_OK)
        return util_fail_prefix(st, "ai_comm_join: job address %s", where);
    int lfd = -1;
    uint16_t lport = 0;
    if ((st = comm_tcp_listen(mine, &lfd, &lport)) != AI_OK)
        return st;
    comm_rank_info self = {.addr = mine, .port = lport, .pid = (int32_t)getpid(),
                           .machine = comm_machine_id()};
    const char *hid = cfg->host_id ? cfg->host_id : util_param_str(UTIL_PARAM_HOST);
    if (hid)
        snprintf(self.host, sizeof self.host, "%s", hid);
    else if (gethostname(self.host, sizeof self.host - 1) != 0)
        snprintf(self.host, sizeof self.host, "localhost");
    double deadline = ai_now() + timeout;
    joined_answer a = {.table = calloc(JOIN_MAX_RANKS, sizeof(comm_rank_info))};
    if (!a.table) {
        close(lfd);
        return util_fail(AI_ERR_NOMEM, "join table");
    }
    for (int attempt = 0;; attempt++) {
        int retry = 0, i = attempt % nd, fd;
        /* With several doors, only a listening one is worth the wait for
         * an answer; a door closed unanswered (rank 0 died while this
         * newcomer waited) sends it to the next. */
        if (nd > 1 && (st = comm_sock_connect(door[i], dport[i], AI_MIN(deadline, ai_now() + 1.0),
                                              &fd)) != AI_OK) {
            if (ai_now() >= deadline)
                break;
            continue;
        }
        if (nd > 1)
            close(fd);
        st = comm_store_ask(door[i], dport[i], job_key, COMM_WIRE_JOIN_RANK, 0, &self, deadline,
                            joined_parse, &a, &retry);
        if (st == AI_OK || !retry || ai_now() >= deadline)
            break;
        comm_backoff(attempt, deadline);
    }
    if (st == AI_OK && a.rejected)
        st = util_fail(AI_ERR_PROTO, "refused: %s", a.why);
    if (st != AI_OK) {
        close(lfd);
        free(a.table);
        return util_fail_prefix(st, "ai_comm_join: the job at %s", where);
    }
    comm_wire_joined j = a.j;
    comm_rank_info *table = a.table;
    comm_params pp = {.timeout_s = timeout, .channels = (int)j.channels, .no_shm = (int)j.no_shm};
    if ((st = comm_wait_params(cfg->block_waits, &pp)) != AI_OK) {
        close(lfd);
        free(table);
        return st;
    }
    unsigned char key[COMM_KEY_BYTES];
    util_key_derive(key, job_key, "autoinfra grow", &j.nonce, sizeof j.nonce);
    st = build(&pp, (int)j.rank, (int)j.size, job_key, key, lfd, table, out);
    util_wipe(job_key, sizeof job_key);
    util_wipe(key, sizeof key);
    free(table);
    return st == AI_OK ? AI_OK : util_fail_prefix(st, "ai_comm_join: rank %u of %u", j.rank, j.size);
}
