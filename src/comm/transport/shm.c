/*
 * The shared-memory transport (comm_shm_ops), between the ranks of one
 * host: one POSIX shared-memory segment per host, created by the host's
 * lowest rank, holding a single-producer single-consumer ring for every
 * ordered pair of local ranks, each local rank's doorbell (engine.h) and
 * the slot board of the direct allreduce (engine.h; the protocol is
 * algo/allreduce.c's). The name is unlinked as soon as every local rank
 * has mapped it, so nothing is left in /dev/shm after a crash.
 *
 * Layout: header (4 KiB) | bells [nlocal] | flags [nlocal] (rounded up to
 * 4 KiB) | slots [sets][nlocal][COMM_SLOT_BYTES] (comm_slot_sets) | rings
 * [nlocal][nlocal].
 */
#include "comm/transport/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define SHM_MAGIC 0x4d48534941ull /* "AISHM" */
#define SHM_HEADER_BYTES 4096

static size_t ring_stride(uint64_t ring_bytes) { return sizeof(shm_ring) + (size_t)ring_bytes; }

static size_t lines_bytes(int nlocal)
{
    size_t b = (size_t)nlocal * (sizeof(shm_bell) + sizeof(shm_flag));
    return (b + 4095) & ~(size_t)4095;
}

static size_t slots_bytes(int nsets, int nlocal)
{
    return (size_t)nsets * (size_t)nlocal * COMM_SLOT_BYTES;
}

/* The slot board's pages mapped now: its first round through the pool
 * would otherwise take a page fault per 4 KiB in each rank, which doubled
 * a 64 KiB allreduce's time in its first 64 calls (the calls the learner
 * explores in). Contents untouched: another rank may be using the board. */
static void populate(unsigned char *p, size_t len)
{
    if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
        return;
    for (size_t o = 0; o < len; o += 4096) /* kernels before 5.14: read faults */
        (void)*(volatile unsigned char *)(p + o);
}

static void shm_name(const ai_comm *c, char *name, size_t n)
{
    const comm_peer *leader = &c->tp->peers[c->host_ranks[c->host_first[c->host_of[c->rank]]]];
    uint64_t h = util_hash64(leader->host, strlen(leader->host), c->tp->token_hash);
    h = util_hash64(&leader->pid, sizeof leader->pid, h);
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
        return util_fail(AI_ERR_IO, "shm_open %s: %s", name, strerror(errno));
    /* The space reserved now (a full /dev/shm fails here, with a message,
     * not later with SIGBUS at a page's first touch). */
    int err = posix_fallocate(fd, 0, (off_t)bytes);
    if (err != 0) {
        close(fd);
        shm_unlink(name);
        return util_fail(AI_ERR_IO, "reserving %zu bytes of shared memory %s: %s", bytes, name,
                         strerror(err));
    }
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        shm_unlink(name);
        return util_fail(AI_ERR_IO, "mapping shared memory: %s", strerror(errno));
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
                return util_fail(AI_ERR_IO, "mapping shared memory: %s", strerror(errno));
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
            return util_fail(AI_ERR_TIMEOUT, "timed out waiting for the host's shared memory %s "
                             "(the host's lowest rank did not create it)", name);
        util_sleep_us(1000);
    }
}

/* Seconds a byte of a 64 KiB copy within this core, warm: the fastest of
 * 8, about 10 us in all (a slow spell's reference, ring_copy); 0: none. */
static double local_copy_rate(void)
{
    enum { N = 64 * 1024 };
    unsigned char *a = malloc(2 * N);
    if (!a)
        return 0;
    memset(a, 1, 2 * N);
    double best = 1.0;
    for (int i = 0; i < 8; i++) {
        double t0 = ai_now();
        memcpy(a + N, a, N);
        a[i] ^= a[N + N - 1 - i]; /* the copy is used */
        best = AI_MIN(best, (ai_now() - t0) / N);
    }
    free(a);
    return best > 0 && best < 1.0 ? best : 0;
}

static ai_status_t shm_setup(ai_comm *c)
{
    int host = c->host_of[c->rank];
    int nlocal = c->local_size;
    int nshm = 0;
    for (int j = 0; j < c->size; j++)
        nshm += c->tp->peers[j].kind == CHAN_SHM;
    if (nshm == 0)
        return AI_OK;
    uint64_t rb = 0;
    int nt_mode = 2;
    ai_status_t st = ring_size(&rb);
    if (st == AI_OK)
        st = util_param_int(UTIL_PARAM_SHM_NT, &nt_mode);
    if (st != AI_OK)
        return st;
    c->tp->spell = (comm_spell){.mode = nt_mode, .local = nt_mode == 2 ? local_copy_rate() : 0};
    int nsets = comm_slot_sets(nlocal, nlocal == c->size);
    size_t bytes = SHM_HEADER_BYTES + lines_bytes(nlocal) + slots_bytes(nsets, nlocal) +
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
    c->tp->slot_sets = nsets;
    populate(c->tp->slots, slots_bytes(nsets, nlocal));
    c->tp->slot_calls = 0;
    c->tp->slot_cursor = 0;
    c->tp->cma = 0;
    /* Rings are indexed by ordered pair of local indices (from, to). */
    unsigned char *rings = c->tp->slots + slots_bytes(nsets, nlocal);
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
        p->tx[0].spell = c->tp->spell; /* its mode and the copy within the core */
        /* This process's page tables for the rings it uses, now: left to
         * first touch, a ring's first round took its first calls 4-6x
         * their steady time (2 ranks, `ring` at 64 KiB: 50 us a call for
         * its first 8 calls, 9 from then on), which the learner, timing
         * an arm's first calls, took for the arm's time. */
        populate((unsigned char *)p->tx[0].ring, ring_stride(rb));
        populate((unsigned char *)p->rx[0].ring, ring_stride(rb));
        /* Both directions wake the peer: its receive (data came) or its
         * send (space came). */
        p->tx[0].bell = p->rx[0].bell = &c->tp->bells[b];
    }
    /* The creator keeps the name until all have attached, bounded by the
     * timeout; past that, unlink anyway so nothing leaks. */
    if (c->local_rank == 0) {
        while (atomic_load(&c->tp->shm->attached) < nlocal && ai_now() < deadline)
            util_sleep_us(500);
        if (atomic_load(&c->tp->shm->attached) < nlocal) {
            shm_unlink(name);
            return util_fail(AI_ERR_TIMEOUT, "only %d of %d ranks of this host attached to shared memory",
                             atomic_load(&c->tp->shm->attached), nlocal);
        }
    }
    return AI_OK;
}

static void shm_close(ai_comm *c)
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
        if (local[b] != c->rank && p->kind == CHAN_SHM && comm_proc_is_dead(p->pid)) {
            /* A peer that died after it heard of a failure left the notice
             * before it went: read the notices again, or a rank that lost
             * its core between the two checks names the messenger, not the
             * cause. */
            if ((st = comm_ctl_check(c)) != AI_OK)
                return st;
            tp->blame = local[b]; /* the origin this rank's abort notice names */
            return util_fail(AI_ERR_PEER, "rank %d (pid %d on this host) died", local[b], (int)p->pid);
        }
    }
    return AI_OK;
}

/* ---------------------------------------------------------- moving bytes */

/*
 * Slow spells (docs/runtime.md). On a virtual machine whose two vCPUs the
 * hypervisor runs apart for seconds at a time, writing into lines that
 * another core read last costs 8-13x the CPU time (ring sends: 0.28-0.46
 * ns a byte against 0.034-0.036, 4 ranks on 2 vCPUs, 512 KiB `ring`),
 * while that core's reads cost 1.6x: each line is first taken from the
 * other core's cache. Non-temporal stores take no line: they ran through
 * the spells (166-228 us a call against 736-1030) but took 1.85x the
 * time outside them. So a rank times its large copies into shared memory
 * (ring sends and `direct`'s slots), one in SHM_TIME_EVERY; when a
 * window's fastest runs SHM_SPELL times slower than the fastest window
 * ever did, or SHM_SPELL_LOCAL times slower than a copy within its own
 * core (a job that starts in a spell has no faster window: 64 KiB within
 * one core took 0.018 ns a byte, the ring's copies 0.034 outside the
 * spells), it writes past the cache for SHM_NT_HOLD_S, then tries the
 * cache again. AUTOINFRA_SHM_NT=0 never does, 1 always does.
 */
#define SHM_TIME_EVERY 4       /* copies timed, one in this many (two clock reads each) */
#define SHM_WINDOW 8           /* timed copies a window */
#define SHM_SPELL 4.0          /* its fastest this many times the best: a spell */
#define SHM_SPELL_LOCAL 6.0    /* ... or this many times a copy within the core */
#define SHM_NT_HOLD_S 0.02     /* then this long past the cache */

/* n bytes to dst with non-temporal stores, fenced, where the CPU has them
 * (x86-64: SSE2); a plain copy elsewhere. */
static void copy_past_cache(unsigned char *dst, const unsigned char *src, size_t n)
{
#if defined(__x86_64__)
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15, i;
    head = AI_MIN(head, n);
    memcpy(dst, src, head);
    for (i = head; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        _mm_stream_si128((__m128i *)(void *)(dst + i), v);
    }
    memcpy(dst + i, src + i, n - i);
    _mm_sfence(); /* the stores before whatever publishes them */
#else
    memcpy(dst, src, n);
#endif
}

void comm_shm_copy(comm_spell *w, void *dst, const void *src, size_t n)
{
    if (n < COMM_SPELL_MIN || w->mode == 0) {
        memcpy(dst, src, n);
        return;
    }
    if (w->mode == 1) {
        copy_past_cache(dst, src, n);
        return;
    }
    if (w->until > 0) {
        if (ai_now() < w->until) {
            copy_past_cache(dst, src, n);
            return;
        }
        w->until = 0; /* the spell's hold is over: the cache again */
    }
    if (w->copies++ % SHM_TIME_EVERY) {
        memcpy(dst, src, n);
        return;
    }
    double t0 = ai_now();
    memcpy(dst, src, n);
    double t1 = ai_now();
    comm_shm_watch(w, (t1 - t0) / (double)n, t1);
}

void comm_shm_watch(comm_spell *w, double rate, double now)
{
    int in_window = w->timed++ % SHM_WINDOW;
    w->min = in_window == 0 ? rate : AI_MIN(w->min, rate);
    if (in_window < SHM_WINDOW - 1)
        return;
    if ((w->best > 0 && w->min > SHM_SPELL * w->best) ||
        (w->local > 0 && w->min > SHM_SPELL_LOCAL * w->local))
        w->until = now + SHM_NT_HOLD_S;
    else if (w->best == 0 || w->min < w->best)
        w->best = w->min;
}

static ai_status_t shm_send(ai_comm *c, comm_req *r, int k, comm_chan *ch, int *moved)
{
    (void)c;
    shm_ring *ring = ch->ring;
    uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
    uint64_t space = ch->ring_bytes - (tail - head);
    size_t pos = r->chan_done[k], total = comm_chan_total(r, k);
    if (space == 0)
        return AI_OK;
    while (space > 0 && pos < total) {
        size_t n;
        const unsigned char *src = comm_frame_tx(r, k, pos, &n);
        size_t at = (size_t)(tail % ch->ring_bytes);
        n = AI_MIN(n, AI_MIN((size_t)space, (size_t)ch->ring_bytes - at));
        comm_shm_copy(&ch->spell, ch->data + at, src, n);
        tail += n;
        pos += n;
        space -= n;
    }
    r->chan_done[k] = pos;
    atomic_store_explicit(&ring->tail, tail, memory_order_release);
    comm_bell_ring(ch->bell);
    *moved = 1;
    return AI_OK;
}

static ai_status_t shm_recv(ai_comm *c, comm_req *r, int k, comm_chan *ch, int *moved)
{
    shm_ring *ring = ch->ring;
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
    ai_status_t st = AI_OK;
    uint64_t start = head;
    while (tail > head && r->chan_done[k] < comm_chan_total(r, k)) {
        size_t at = (size_t)(head % ch->ring_bytes);
        size_t n = AI_MIN((size_t)(tail - head), (size_t)ch->ring_bytes - at);
        size_t used = comm_frame_rx(c, r, k, ch->data + at, n, &st);
        head += used;
        if (st != AI_OK || used == 0)
            break;
    }
    if (head != start) {
        atomic_store_explicit(&ring->head, head, memory_order_release);
        comm_bell_ring(ch->bell); /* the sender may wait for space */
        *moved = 1;
    }
    return st;
}

/* The header at the front of the ring from p, if whole (comm_peek_calls). */
static int shm_peek(comm_peer *p, unsigned char *h)
{
    comm_chan *ch = &p->rx[0];
    if (!ch->ring)
        return 0;
    uint64_t head = atomic_load_explicit(&ch->ring->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&ch->ring->tail, memory_order_acquire);
    if (tail - head < COMM_HDR_BYTES)
        return 0;
    size_t at = (size_t)(head % ch->ring_bytes);
    size_t first = AI_MIN((size_t)COMM_HDR_BYTES, (size_t)ch->ring_bytes - at);
    memcpy(h, ch->data + at, first);
    memcpy(h + first, ch->data, COMM_HDR_BYTES - first);
    return 1;
}

/* A local peer's process that died closes no connection of the rings:
 * look for it. */
static ai_status_t shm_check(ai_comm *c, int peer)
{
    comm_peer *p = &c->tp->peers[peer];
    if (!comm_proc_is_dead(p->pid))
        return AI_OK;
    ai_status_t st = comm_ctl_check(c); /* a notice it left first, as comm_shm_check_local */
    if (st != AI_OK)
        return st;
    c->tp->blame = peer;
    return util_fail(AI_ERR_PEER, "rank %d (host %s, pid %d on this host) died", peer, p->host,
                     (int)p->pid);
}

static int shm_reaches(const ai_comm *c, int peer)
{
    return c->host_of[peer] == c->host_of[c->rank] && !c->tp->no_shm;
}

const comm_transport_ops comm_shm_ops = {
    .name = "shm",
    .kind = CHAN_SHM,
    .rings_bell = 1,
    .reaches = shm_reaches,
    .setup = shm_setup,
    .send = shm_send,
    .recv = shm_recv,
    .peek = shm_peek,
    .check = shm_check,
    .close = shm_close,
};

/* ------------------------------------------------------ the slot board */

int comm_slot_board_get(const ai_comm *c, comm_slot_board *b)
{
    struct comm_transport *tp = c->tp;
    if (!(c->size > 1 && c->nhosts == 1 && tp && tp->slots && c->local_size == c->size))
        return 0;
    b->n = c->local_size;
    b->me = c->local_rank;
    b->slots = tp->slots;
    b->nsets = tp->slot_sets;
    b->flags = tp->flags;
    b->bells = tp->bells;
    b->calls = &tp->slot_calls;
    b->cursor = &tp->slot_cursor;
    b->cma = &tp->cma;
    b->spell = &tp->spell;
    return 1;
}

/* A slot description of this call that differs from this rank's. */
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

ai_status_t comm_shm_peer_read(ai_comm *c, int rank, void *dst, const void *src, size_t len,
                               int *denied)
{
    comm_peer *p = &c->tp->peers[rank];
    unsigned char *d = dst;
    const unsigned char *s = src;
    *denied = 0;
    while (len > 0) {
        struct iovec l = {d, len}, r = {(void *)s, len};
        ssize_t n = process_vm_readv(p->pid, &l, 1, &r, 1, 0);
        if (n <= 0) {
            int err = n < 0 ? errno : EIO;
            if (n < 0 && err == EINTR)
                continue;
            *denied = err == EPERM || err == ENOSYS || err == EACCES;
            c->tp->blame = rank;
            if (err == ESRCH || comm_proc_is_dead(p->pid)) /* as comm_shm_check_local */
                return util_fail(AI_ERR_PEER, "rank %d (pid %d on this host) died", rank,
                                 (int)p->pid);
            return util_fail(AI_ERR_IO, "reading %zu bytes of rank %d's memory (pid %d on this "
                             "host, process_vm_readv): %s", len, rank, (int)p->pid,
                             n < 0 ? strerror(err) : "nothing read");
        }
        d += n;
        s += n;
        len -= (size_t)n;
    }
    return AI_OK;
}
