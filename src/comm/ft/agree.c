/*
 * Revoke and the survivors' agreement (docs/faults.md).
 *
 * Revoke is the engine's abort with AI_ERR_REVOKED: a revoke notice on
 * every control connection and in the host's shared-memory header, data
 * connections shut down; every rank that hears of it does the same (a
 * flood), and a rank blocked in a wait hears of it at its next liveness
 * check (every 50 ms, comm_ctl_check).
 *
 * Agreement: flooding rounds over the control connections, which an abort
 * leaves open. A rank's state is what it knows of every rank: its
 * contribution (flags, aux) if heard, and whether it failed. Each round a
 * rank sends its state to every peer whose connection is up and waits for
 * the round's state of every rank it does not count failed, merging each
 * as it comes (union of contributions and of failed ranks). A connection
 * that ends, or silence past the timeout, counts that rank failed. A rank
 * decides at the end of a round in which nothing changed and every state
 * it received equalled its own at the round's start: then every rank it
 * counts alive began the round with that same state. It sends DECIDE with
 * the state (its next round's frame) and returns; a rank that receives a
 * DECIDE adopts it, decides, and passes it on. So two deciders in one
 * round decide the same state (each received the other's), and a rank
 * that would decide later meets the earlier decider's DECIDE first (it
 * waits for every rank it counts alive, the decider included, or on the
 * decider's death for a rank the decider's DECIDE reached). With no
 * failure that is two rounds; each failure adds at most two.
 *
 * A rank that finds itself counted failed (it stalled past someone's
 * timeout) leaves: it closes its control connections, so the others count
 * it failed at once, and returns AI_ERR_PEER. It reads what a peer it
 * counts failed sent before, so a rank stopped while the others agreed
 * and finished learns it from their frames waiting in its sockets. Frames
 * carry the agreement's number (every rank runs agreements in the same
 * order); leftovers of an earlier one are skipped.
 */
#include "comm/ft/state.h"
#include "comm/transport/wire.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FT_AGREE 1
#define FT_DECIDE 2
#define FT_POLL_MS 50

typedef struct ft_state {
    int n;
    unsigned char *known, *failed; /* [n] */
    uint64_t *val, *aux;           /* [n], 0 where not known */
} ft_state;

static ai_status_t state_alloc(ft_state *s, int n)
{
    s->n = n;
    s->known = calloc((size_t)n, 2);
    s->val = calloc((size_t)n, 2 * sizeof(uint64_t));
    if (!s->known || !s->val) {
        free(s->known);
        free(s->val);
        return util_fail(AI_ERR_NOMEM, "agreement state");
    }
    s->failed = s->known + n;
    s->aux = s->val + n;
    return AI_OK;
}

static void state_free(ft_state *s)
{
    free(s->known);
    free(s->val);
}

static void state_copy(ft_state *to, const ft_state *from)
{
    memcpy(to->known, from->known, 2 * (size_t)from->n);
    memcpy(to->val, from->val, 2 * sizeof(uint64_t) * (size_t)from->n);
}

static int state_equal(const ft_state *a, const ft_state *b)
{
    return !memcmp(a->known, b->known, 2 * (size_t)a->n) &&
           !memcmp(a->val, b->val, 2 * sizeof(uint64_t) * (size_t)a->n);
}

static size_t frame_body(int n) { return 16 + 2 * (size_t)n + 16 * (size_t)n; }

static void frame_pack(unsigned char *b, uint32_t epoch, uint32_t round, uint32_t kind,
                       const ft_state *s)
{
    uint32_t n = (uint32_t)s->n;
    comm_wire_ft_hdr_pack(b, FT_KIND_AGREE, (uint32_t)frame_body(s->n));
    b += COMM_WIRE_FT_HDR;
    memcpy(b, &epoch, 4);
    memcpy(b + 4, &round, 4);
    memcpy(b + 8, &kind, 4);
    memcpy(b + 12, &n, 4);
    memcpy(b + 16, s->known, 2 * (size_t)s->n);
    memcpy(b + 16 + 2 * (size_t)s->n, s->val, 16 * (size_t)s->n);
}

/* A received agreement frame: checked, into s. 1 ok, 0 another kind of
 * control frame, -1 malformed. */
static int frame_parse(const unsigned char *b, size_t len, uint32_t *epoch, uint32_t *round,
                       uint32_t *kind, ft_state *s)
{
    uint16_t fk;
    memcpy(&fk, b + 6, 2);
    if (fk != FT_KIND_AGREE)
        return 0;
    uint32_t n;
    if (len != COMM_WIRE_FT_HDR + frame_body(s->n))
        return -1;
    b += COMM_WIRE_FT_HDR;
    memcpy(epoch, b, 4);
    memcpy(round, b + 4, 4);
    memcpy(kind, b + 8, 4);
    memcpy(&n, b + 12, 4);
    if (n != (uint32_t)s->n || (*kind != FT_AGREE && *kind != FT_DECIDE))
        return -1;
    memcpy(s->known, b + 16, 2 * (size_t)s->n);
    memcpy(s->val, b + 16 + 2 * (size_t)s->n, 16 * (size_t)s->n);
    for (int j = 0; j < s->n; j++)
        if (s->known[j] > 1 || s->failed[j] > 1)
            return -1;
    return 1;
}

ai_status_t comm_ft_get(ai_comm *c, comm_ft **out)
{
    if (!c->ft) {
        comm_ft *ft = calloc(1, sizeof *ft);
        if (!ft || !(ft->failed = calloc((size_t)c->size, 1))) {
            free(ft);
            return util_fail(AI_ERR_NOMEM, "fault-tolerance state");
        }
        c->ft = ft;
    }
    *out = c->ft;
    return AI_OK;
}

void comm_ft_free(ai_comm *c)
{
    if (c && c->ft) {
        comm_door_free(c->ft->door);
        free(c->ft->failed);
        free(c->ft);
        c->ft = NULL;
    }
}

ai_status_t comm_ft_revoke(ai_comm *c)
{
    if (c->state == AI_OK) {
        util_fail(AI_ERR_REVOKED, "rank %d revoked the communicator", c->rank);
        comm_abort(c, AI_ERR_REVOKED);
        return AI_OK;
    }
    /* Failed already: its abort went out then. From now on its calls say
     * revoked, and the peers hear it too. */
    char was[sizeof c->failure];
    memcpy(was, c->failure, sizeof was);
    c->state = AI_OK;
    util_fail(AI_ERR_REVOKED, "rank %d revoked the communicator after: %s", c->rank, was);
    comm_abort(c, AI_ERR_REVOKED);
    return AI_OK;
}

/* What this rank already knows failed: dead control connections and dead
 * processes on this host. */
static void known_failed(ai_comm *c, unsigned char *failed)
{
    for (int j = 0; j < c->size; j++) {
        comm_peer *p = &c->tp->peers[j];
        if (j == c->rank)
            continue;
        if (p->ctl_fd < 0 || p->ctl_dead || (p->kind == CHAN_SHM && comm_proc_is_dead(p->pid)))
            failed[j] = 1;
    }
}

ai_status_t comm_ft_failed(const ai_comm *c, int *ranks, int max, int *n)
{
    if (!c || !n || (max > 0 && !ranks))
        return util_fail(AI_ERR_INVALID, "ai_comm_failed: NULL communicator or output");
    unsigned char *f = calloc((size_t)c->size, 1);
    if (!f)
        return util_fail(AI_ERR_NOMEM, "failed set");
    if (c->ft && c->ft->agreed)
        memcpy(f, c->ft->failed, (size_t)c->size);
    else if (c->tp)
        known_failed((ai_comm *)c, f);
    int k = 0;
    for (int j = 0; j < c->size; j++)
        if (f[j]) {
            if (k < max)
                ranks[k] = j;
            k++;
        }
    free(f);
    *n = k;
    return AI_OK;
}

/* Close this rank's side of every control connection: the others, waiting
 * on it, count it failed at once. */
static void leave(ai_comm *c)
{
    for (int j = 0; j < c->size; j++) {
        comm_peer *p = &c->tp->peers[j];
        if (p->ctl_fd >= 0)
            shutdown(p->ctl_fd, SHUT_RDWR);
        p->ctl_dead = 1;
    }
}

typedef struct agree_run {
    ai_comm *c;
    uint32_t epoch, round;
    ft_state me, start, in;
    unsigned char *got;
    unsigned char *frame;
    int decided, excluded, changed, equal;
    int excluded_by;
} agree_run;

static void mark_failed(agree_run *a, int j)
{
    if (!a->me.failed[j]) {
        a->me.failed[j] = 1;
        a->changed = 1;
    }
}

static void send_all(agree_run *a, uint32_t kind)
{
    ai_comm *c = a->c;
    frame_pack(a->frame, a->epoch, a->round, kind, &a->me);
    size_t len = COMM_WIRE_FT_HDR + frame_body(c->size);
    double deadline = ai_now() + c->timeout_s;
    for (int j = 0; j < c->size; j++) {
        if (j == c->rank || c->tp->peers[j].ctl_dead || c->tp->peers[j].ctl_fd < 0)
            continue;
        /* A failed send is a detection while the rounds run; the decision,
         * once taken, is what it is: a peer that died since is the next
         * agreement's to find. */
        if (comm_ctl_send(c, j, a->frame, len, deadline) != AI_OK && kind != FT_DECIDE)
            mark_failed(a, j);
    }
}

/* Take peer j's frames of this agreement: 1 when its frame of this round
 * (or a DECIDE) was taken, 0 when none is there yet. */
static int take(agree_run *a, int j)
{
    ai_comm *c = a->c;
    const unsigned char *f;
    size_t len;
    while (comm_ctl_frame(c, j, &f, &len)) {
        uint32_t epoch, round, kind;
        int ok = frame_parse(f, len, &epoch, &round, &kind, &a->in);
        if (ok <= 0 || epoch < a->epoch || (epoch == a->epoch && round < a->round &&
                                            kind != FT_DECIDE)) {
            if (ok < 0) {
                util_log(AI_LOG_WARN, "agreement: a malformed frame from rank %d; counting it failed",
                         j);
                c->tp->peers[j].ctl_dead = 1;
                mark_failed(a, j);
                return 0;
            }
            comm_ctl_consume(c, j, len); /* an earlier agreement's, or not one */
            continue;
        }
        if (epoch > a->epoch)
            return 0; /* the next agreement's: it stays */
        comm_ctl_consume(c, j, len);
        if (kind == FT_DECIDE) {
            state_copy(&a->me, &a->in);
            a->decided = 1;
            if (a->me.failed[c->rank]) {
                a->excluded = 1;
                a->excluded_by = j;
            }
            return 1;
        }
        if (a->in.failed[c->rank]) {
            a->excluded = 1;
            a->excluded_by = j;
            return 1;
        }
        if (!state_equal(&a->in, &a->start))
            a->equal = 0;
        for (int k = 0; k < c->size; k++) {
            if (a->in.known[k] && !a->me.known[k]) {
                a->me.known[k] = 1;
                a->me.val[k] = a->in.val[k];
                a->me.aux[k] = a->in.aux[k];
                a->changed = 1;
            }
            if (a->in.failed[k])
                mark_failed(a, k);
        }
        return 1;
    }
    return 0;
}

/* Did a peer this rank counts failed count this rank failed first, in a
 * frame of this agreement or a later one (they went on without it)? A
 * rank that was stopped finds the others' frames waiting in its sockets,
 * the connection since ended (they finished) or its own send to them
 * failed: what they sent is read all the same, before this rank concludes
 * that it alone survives. */
static int excluded_by_failed_peer(agree_run *a)
{
    ai_comm *c = a->c;
    for (int j = 0; j < c->size; j++) {
        if (j == c->rank || !a->me.failed[j])
            continue;
        comm_ctl_drain(c, j);
        const unsigned char *f;
        size_t len;
        for (size_t off = 0; comm_ctl_frame_at(c, j, off, &f, &len); off += len) {
            uint32_t epoch, round, kind;
            if (frame_parse(f, len, &epoch, &round, &kind, &a->in) > 0 && epoch >= a->epoch &&
                a->in.failed[c->rank]) {
                a->excluded = 1;
                a->excluded_by = j;
                return 1;
            }
        }
    }
    return 0;
}

static int has_frame(ai_comm *c, int j)
{
    const unsigned char *f;
    size_t len;
    return comm_ctl_frame(c, j, &f, &len);
}

/* One round's receiving: until every rank not counted failed was heard,
 * a DECIDE came, or the timeout. */
static ai_status_t gather(agree_run *a)
{
    ai_comm *c = a->c;
    int n = c->size;
    double deadline = ai_now() + c->timeout_s;
    struct pollfd *fds = malloc((size_t)n * sizeof *fds);
    int *who = malloc((size_t)n * sizeof *who);
    if (!fds || !who) {
        free(fds);
        free(who);
        return util_fail(AI_ERR_NOMEM, "agreement");
    }
    memset(a->got, 0, (size_t)n);
    for (int last = 0;;) {
        nfds_t nf = 0;
        for (int j = 0; j < n && !a->decided && !a->excluded; j++) {
            if (j == c->rank || a->me.failed[j] || a->got[j])
                continue;
            if (comm_ctl_pump(c, j) != AI_OK && !has_frame(c, j)) {
                mark_failed(a, j); /* its connection ended, nothing of it is left */
                continue;
            }
            if (take(a, j)) {
                a->got[j] = 1;
                continue;
            }
            if (c->tp->peers[j].ctl_dead) {
                mark_failed(a, j);
                continue;
            }
            fds[nf] = (struct pollfd){.fd = c->tp->peers[j].ctl_fd, .events = POLLIN};
            who[nf++] = j;
        }
        if (nf == 0 || a->decided || a->excluded)
            break;
        if (last) {
            /* Past the timeout, with every connection read once more (a
             * rank that was stopped reads what came meanwhile first). */
            for (nfds_t i = 0; i < nf; i++) {
                util_log(AI_LOG_WARN, "agreement #%u round %u: rank %d did not answer within %.1f s; "
                         "counting it failed", a->epoch, a->round, who[i], c->timeout_s);
                mark_failed(a, who[i]);
            }
            break;
        }
        double left = deadline - ai_now();
        if (left <= 0) {
            last = 1;
            continue;
        }
        (void)poll(fds, nf, (int)AI_MIN(left * 1000 + 1, FT_POLL_MS));
    }
    free(fds);
    free(who);
    return AI_OK;
}

ai_status_t comm_ft_agree(ai_comm *c, uint64_t *flags, uint64_t aux, uint64_t *aux_out)
{
    comm_ft *ft;
    ai_status_t st = comm_ft_get(c, &ft);
    if (st != AI_OK)
        return st;
    if (ft->excluded)
        return util_fail(AI_ERR_PEER, "rank %d: the other ranks counted this rank failed in an "
                         "earlier agreement; it must leave", c->rank);
    int n = c->size;
    agree_run a = {.c = c, .epoch = ++ft->epoch, .excluded_by = -1};
    if ((st = state_alloc(&a.me, n)) != AI_OK)
        return st;
    if ((st = state_alloc(&a.start, n)) != AI_OK || (st = state_alloc(&a.in, n)) != AI_OK)
        goto out;
    a.got = calloc((size_t)n, 1);
    a.frame = malloc(COMM_WIRE_FT_HDR + frame_body(n));
    if (!a.got || !a.frame) {
        st = util_fail(AI_ERR_NOMEM, "agreement");
        goto out;
    }
    a.me.known[c->rank] = 1;
    a.me.val[c->rank] = *flags;
    a.me.aux[c->rank] = aux;
    if (c->tp)
        known_failed(c, a.me.failed);
    for (a.round = 1; n > 1; a.round++) {
        state_copy(&a.start, &a.me);
        a.changed = 0;
        a.equal = 1;
        send_all(&a, FT_AGREE);
        if ((st = gather(&a)) != AI_OK)
            goto out;
        if (a.excluded || excluded_by_failed_peer(&a))
            break;
        if (a.decided || (!a.changed && a.equal))
            break;
    }
    if (a.excluded) {
        leave(c);
        ft->excluded = 1;
        st = util_fail(AI_ERR_PEER, "rank %d: the other ranks counted this rank failed (rank %d "
                       "did, in agreement #%u): it stalled or lost its connections; it must leave",
                       c->rank, a.excluded_by, a.epoch);
        goto out;
    }
    a.round++;
    if (n > 1)
        send_all(&a, FT_DECIDE); /* those still in the last round adopt it */
    uint64_t v = ~(uint64_t)0;
    for (int j = 0; j < n; j++) {
        if (a.me.known[j] && !a.me.failed[j])
            v &= a.me.val[j];
        if (aux_out)
            aux_out[j] = a.me.failed[j] ? 0 : a.me.aux[j];
    }
    memcpy(ft->failed, a.me.failed, (size_t)n);
    ft->agreed = 1;
    *flags = v;
    util_log(AI_LOG_DEBUG, "agreement #%u decided in %u rounds", a.epoch, a.round - 1);
out:
    state_free(&a.me);
    state_free(&a.start);
    state_free(&a.in);
    free(a.got);
    free(a.frame);
    return st;
}
