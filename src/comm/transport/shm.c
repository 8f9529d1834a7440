/*
 * Shared memory between the ranks of one host: one POSIX shared-memory
 * segment per host, created by the host's lowest rank, holding a
 * single-producer single-consumer ring for every ordered pair of local
 * ranks, each local rank's doorbell (transport.h) and the slots of the
 * small-message allreduce (comm_shm_allreduce, below). The name is unlinked
 * as soon as every local rank has mapped it, so nothing is left in /dev/shm
 * after a crash.
 *
 * Layout: header (4 KiB) | bells [nlocal] | flags [nlocal] (rounded up to
 * 4 KiB) | slots [2][nlocal][SHM_SLOT_BYTES] | rings [nlocal][nlocal].
 */
#include "comm/transport/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_MAGIC 0x4d48534941ull /* "AISHM" */
#define SHM_HEADER_BYTES 4096

static size_t ring_stride(uint64_t ring_bytes) { return sizeof(shm_ring) + (size_t)ring_bytes; }

static size_t lines_bytes(int nlocal)
{
    size_t b = (size_t)nlocal * (sizeof(shm_bell) + sizeof(shm_flag));
    return (b + 4095) & ~(size_t)4095;
}

static size_t slots_bytes(int nlocal) { return 2 * (size_t)nlocal * SHM_SLOT_BYTES; }

static void shm_name(const ai_comm *c, char *name, size_t n)
{
    const comm_peer *leader = &c->tp->peers[c->host_ranks[c->host_first[c->host_of[c->rank]]]];
    uint64_t h = ai_hash64(leader->host, strlen(leader->host), c->tp->token_hash);
    h = ai_hash64(&leader->pid, sizeof leader->pid, h);
    snprintf(name, n, "/autoinfra-%016llx", (unsigned long long)h);
}

static ai_status_t ring_size(uint64_t *out)
{
    size_t bytes;
    ai_status_t st = util_param_size(UTIL_PARAM_SHM_RING, &bytes);
    if (st == AI_OK)
        *out = bytes;
    return st;
}

static ai_status_t map_create(ai_comm *c, const char *name, size_t bytes, uint64_t rb)
{
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) {
        /* A stale segment of a crashed job with the same name. */
        shm_unlink(name);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    }
    if (fd < 0)
        return ai_fail(AI_ERR_IO, "shm_open %s: %s", name, strerror(errno));
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int err = errno;
        close(fd);
        shm_unlink(name);
        return ai_fail(AI_ERR_IO, "sizing shared memory %s to %zu bytes: %s", name, bytes, strerror(err));
    }
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        shm_unlink(name);
        return ai_fail(AI_ERR_IO, "mapping shared memory: %s", strerror(errno));
    }
    comm_shm_header *h = base;
    h->magic = SHM_MAGIC;
    h->bytes = bytes;
    h->ring_bytes = rb;
    h->nlocal = c->local_size;
    atomic_store(&h->attached, 1);
    atomic_store(&h->abort_rank, 0);
    h->abort_revoked = 0;
    atomic_store_explicit(&h->ready, 1, memory_order_release);
    c->tp->shm_base = base;
    c->tp->shm_bytes = bytes;
    c->tp->shm = h;
    return AI_OK;
}

static ai_status_t map_attach(ai_comm *c, const char *name, size_t bytes, double deadline)
{
    for (;;) {
        int fd = shm_open(name, O_RDWR, 0600);
        struct stat sb;
        if (fd >= 0 && fstat(fd, &sb) == 0 && (size_t)sb.st_size == bytes) {
            void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (base == MAP_FAILED)
                return ai_fail(AI_ERR_IO, "mapping shared memory: %s", strerror(errno));
            comm_shm_header *h = base;
            if (atomic_load_explicit(&h->ready, memory_order_acquire) == 1 && h->magic == SHM_MAGIC) {
                c->tp->shm_base = base;
                c->tp->shm_bytes = bytes;
                c->tp->shm = h;
                /* The last rank to attach removes the name. */
                if (atomic_fetch_add(&h->attached, 1) + 1 == c->local_size)
                    shm_unlink(name);
                return AI_OK;
            }
            munmap(base, bytes);
        } else if (fd >= 0) {
            close(fd);
        }
        if (ai_now() > deadline)
            return ai_fail(AI_ERR_TIMEOUT, "timed out waiting for the host's shared memory %s "
                           "(the host's lowest rank did not create it)", name);
        ai_sleep_us(1000);
    }
}

ai_status_t comm_shm_setup(ai_comm *c)
{
    int host = c->host_of[c->rank];
    int nlocal = c->local_size;
    int nshm = 0;
    for (int j = 0; j < c->size; j++)
        nshm += c->tp->peers[j].kind == CHAN_SHM;
    if (nshm == 0)
        return AI_OK;
    uint64_t rb = 0;
    ai_status_t st = ring_size(&rb);
    if (st != AI_OK)
        return st;
    size_t bytes = SHM_HEADER_BYTES + lines_bytes(nlocal) + slots_bytes(nlocal) +
                   (size_t)nlocal * (size_t)nlocal * ring_stride(rb);
    char name[64];
    shm_name(c, name, sizeof name);
    double deadline = ai_now() + c->timeout_s;
    st = c->local_rank == 0 ? map_create(c, name, bytes, rb) : map_attach(c, name, bytes, deadline);
    if (st != AI_OK)
        return st;
    unsigned char *base = (unsigned char *)c->tp->shm_base + SHM_HEADER_BYTES;
    c->tp->bells = (shm_bell *)base;
    c->tp->flags = (shm_flag *)(base + (size_t)nlocal * sizeof(shm_bell));
    c->tp->slots = base + lines_bytes(nlocal);
    c->tp->slot_calls = 0;
    /* Rings are indexed by ordered pair of local indices (from, to). */
    unsigned char *rings = c->tp->slots + slots_bytes(nlocal);
    const int *local = &c->host_ranks[c->host_first[host]];
    for (int b = 0; b < nlocal; b++) {
        comm_peer *p = &c->tp->peers[local[b]];
        if (p->kind != CHAN_SHM)
            continue;
        size_t tx = (size_t)c->local_rank * (size_t)nlocal + (size_t)b;
        size_t rx = (size_t)b * (size_t)nlocal + (size_t)c->local_rank;
        p->nchan = 1;
        p->tx[0].kind = p->rx[0].kind = CHAN_SHM;
        p->tx[0].ring = (shm_ring *)(rings + tx * ring_stride(rb));
        p->rx[0].ring = (shm_ring *)(rings + rx * ring_stride(rb));
        p->tx[0].data = (unsigned char *)p->tx[0].ring + sizeof(shm_ring);
        p->rx[0].data = (unsigned char *)p->rx[0].ring + sizeof(shm_ring);
        p->tx[0].ring_bytes = p->rx[0].ring_bytes = rb;
        /* Both directions wake the peer: its receive (data came) or its
         * send (space came). */
        p->tx[0].bell = p->rx[0].bell = &c->tp->bells[b];
    }
    /* The creator keeps the name until all have attached, bounded by the
     * timeout; past that, unlink anyway so nothing leaks. */
    if (c->local_rank == 0) {
        while (atomic_load(&c->tp->shm->attached) < nlocal && ai_now() < deadline)
            ai_sleep_us(500);
        if (atomic_load(&c->tp->shm->attached) < nlocal) {
            shm_unlink(name);
            return ai_fail(AI_ERR_TIMEOUT, "only %d of %d ranks of this host attached to shared memory",
                           atomic_load(&c->tp->shm->attached), nlocal);
        }
    }
    return AI_OK;
}

void comm_shm_close(ai_comm *c)
{
    if (c->tp && c->tp->shm_base) {
        munmap(c->tp->shm_base, c->tp->shm_bytes);
        c->tp->shm_base = NULL;
        c->tp->shm = NULL;
        c->tp->bells = NULL;
        c->tp->flags = NULL;
        c->tp->slots = NULL;
    }
}

ai_status_t comm_shm_check_local(ai_comm *c)
{
    struct comm_transport *tp = c->tp;
    ai_status_t st = comm_ctl_check(c); /* an abort or revoke, here or anywhere */
    if (st != AI_OK)
        return st;
    const int *local = &c->host_ranks[c->host_first[c->host_of[c->rank]]];
    for (int b = 0; b < c->local_size; b++) {
        comm_peer *p = &tp->peers[local[b]];
        if (local[b] != c->rank && p->kind == CHAN_SHM && comm_proc_is_dead(p->pid))
            return ai_fail(AI_ERR_PEER, "rank %d (pid %d on this host) died", local[b], (int)p->pid);
    }
    return AI_OK;
}

/* ------------------------------------------- the small-message allreduce
 *
 * Every rank copies its contribution into its slot, publishes the call's
 * number in its flag, waits until every local rank's flag shows the call,
 * and reduces all the slots itself, in rank order: one flag round trip
 * instead of log2(p) message exchanges, and every rank computes the same
 * bits (the same order of operations). Longer vectors go through in
 * SHM_SLOT_BYTES pieces, one call each.
 *
 * Two slot sets alternate: call k writes set k % 2, last used by call k-2.
 * A rank starts call k only after it saw every flag at k-1, and a rank
 * publishes k-1 only after it has read all of call k-2's slots, so nobody
 * still reads the set being overwritten. Each rank also describes the call
 * it wrote into a set (collective sequence number, piece, and the call's
 * comm_call_sig): a rank that finds another's description different has
 * ranks issuing different collectives, and fails instead of reducing
 * garbage. */

typedef struct slot_wait {
    int rank; /* the rank waited for */
} slot_wait;

static ai_status_t slot_check(ai_comm *c, void *ctx)
{
    (void)ctx;
    ai_status_t st = comm_shm_check_local(c);
    return st != AI_OK ? st : comm_peek_calls(c);
}

ai_status_t comm_shm_peek_slots(ai_comm *c)
{
    struct comm_transport *tp = c->tp;
    if (!tp->flags)
        return AI_OK;
    const int *local = &c->host_ranks[c->host_first[c->host_of[c->rank]]];
    for (int k = 0; k < c->local_size; k++) {
        shm_flag *f = &tp->flags[k];
        uint32_t posted = atomic_load_explicit(&f->posted, memory_order_acquire);
        if (k == c->local_rank || posted == 0)
            continue;
        shm_slot_call theirs;
        memcpy(&theirs, &f->what[posted & 1], sizeof theirs);
        if (theirs.call_seq == c->call_seq && memcmp(&theirs.sig, &c->call, sizeof theirs.sig) != 0)
            return comm_call_mismatch(c, local[k], tp->peers[local[k]].host, theirs.call_seq,
                                      &theirs.sig, "shared-memory slot");
    }
    return AI_OK;
}

static ai_status_t slot_expired(ai_comm *c, void *ctx, double idle)
{
    const slot_wait *w = ctx;
    comm_waited who = {w->rank, "the shared-memory allreduce slot of"};
    return comm_stall_error(c, &who, 1, idle);
}

static const comm_idle_ops slot_ops = {slot_check, slot_expired};

int comm_shm_direct_ok(const ai_comm *c)
{
    return c->size > 1 && c->nhosts == 1 && c->tp && c->tp->slots && c->local_size == c->size;
}

static ai_status_t slot_piece(ai_comm *c, const unsigned char *in, unsigned char *out, size_t count,
                              ai_dtype dt, ai_op op, uint32_t piece)
{
    struct comm_transport *tp = c->tp;
    int n = c->local_size, me = c->local_rank;
    uint32_t call = ++tp->slot_calls;
    unsigned char *set = tp->slots + (size_t)(call & 1) * (size_t)n * SHM_SLOT_BYTES;
    memcpy(set + (size_t)me * SHM_SLOT_BYTES, in, count * ai_dtype_size(dt));
    shm_flag *mine = &tp->flags[me];
    shm_slot_call *what = &mine->what[call & 1];
    what->call_seq = c->call_seq;
    what->piece = piece;
    what->sig = c->call;
    atomic_store_explicit(&mine->posted, call, memory_order_release);
    for (int k = 0; k < n; k++)
        if (k != me)
            comm_bell_ring(&tp->bells[k]);
    for (int k = 0; k < n; k++) {
        shm_flag *f = &tp->flags[k];
        comm_idle w = {0};
        slot_wait sw = {c->host_ranks[c->host_first[0] + k]};
        ai_status_t st = AI_OK;
        while ((int32_t)(atomic_load_explicit(&f->posted, memory_order_acquire) - call) < 0)
            if ((st = comm_idle_step(c, &w, &slot_ops, &sw)) != AI_OK)
                break;
        comm_idle_reset(c, &w);
        if (st != AI_OK)
            return st;
        /* A rank already in call + 1 writes the other set's description. */
        const shm_slot_call *theirs = &f->what[call & 1];
        if (theirs->call_seq == what->call_seq &&
            memcmp(&theirs->sig, &what->sig, sizeof what->sig) != 0)
            return comm_abort(c, comm_call_mismatch(c, sw.rank, tp->peers[sw.rank].host,
                                                    theirs->call_seq, &theirs->sig,
                                                    "shared-memory slot"));
        if (theirs->call_seq != what->call_seq || theirs->piece != piece) {
            char a[96], b[96];
            return comm_abort(c, ai_fail(AI_ERR_PROTO,
                                         "rank %d is in collective call #%u (%s, piece %u) while "
                                         "rank %d is in call #%u (%s, piece %u; shared-memory "
                                         "slots): ranks issued different collectives or arguments",
                                         sw.rank, theirs->call_seq,
                                         comm_call_sig_str(&theirs->sig, a, sizeof a), theirs->piece,
                                         c->rank, c->call_seq, comm_call_sig_str(&c->call, b, sizeof b),
                                         piece));
        }
    }
    comm_reduce_local(out, set, set + SHM_SLOT_BYTES, count, dt, op);
    for (int k = 2; k < n; k++)
        comm_reduce_local(out, out, set + (size_t)k * SHM_SLOT_BYTES, count, dt, op);
    return AI_OK;
}

ai_status_t comm_shm_allreduce(ai_comm *c, const void *in, void *out, size_t count, ai_dtype dt,
                               ai_op op)
{
    size_t es = ai_dtype_size(dt), per = SHM_SLOT_BYTES / es;
    for (size_t base = 0; base < count; base += per) {
        ai_status_t st = slot_piece(c, (const unsigned char *)in + base * es,
                                    (unsigned char *)out + base * es, AI_MIN(per, count - base), dt, op,
                                    (uint32_t)(base / per));
        if (st != AI_OK)
            return st;
    }
    return AI_OK;
}

