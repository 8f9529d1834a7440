/*
 * Shared memory between the ranks of one host: one POSIX shared-memory
 * segment per host, created by the host's lowest rank, holding a
 * single-producer single-consumer ring for every ordered pair of local
 * ranks. The name is unlinked as soon as every local rank has mapped it, so
 * nothing is left in /dev/shm after a crash.
 */
#include "comm/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_MAGIC 0x4d48534941ull /* "AISHM" */
#define SHM_HEADER_BYTES 4096
/* Default ring per direction: large enough that a sender rarely waits for
 * the receiver on large messages, small enough for 8 ranks (56 rings). */
#define SHM_RING_DEFAULT (512 * 1024)

static size_t ring_stride(uint64_t ring_bytes) { return sizeof(shm_ring) + (size_t)ring_bytes; }

static void shm_name(const ai_comm *c, char *name, size_t n)
{
    const comm_peer *leader = &c->tp->peers[c->host_ranks[c->host_first[c->host_of[c->rank]]]];
    uint64_t h = ai_hash64(leader->host, strlen(leader->host), c->tp->token_hash);
    h = ai_hash64(&leader->pid, sizeof leader->pid, h);
    snprintf(name, n, "/autoinfra-%016llx", (unsigned long long)h);
}

static ai_status_t ring_size(uint64_t *out)
{
    const char *v = ai_env_str("AUTOINFRA_SHM_RING", NULL);
    size_t bytes = SHM_RING_DEFAULT;
    if (v && (ai_parse_size(v, &bytes) != AI_OK || bytes < 4096 || bytes % 4096 || bytes > (1u << 30)))
        return ai_fail(AI_ERR_INVALID, "AUTOINFRA_SHM_RING='%s': want a multiple of 4K between 4K and 1G", v);
    *out = bytes;
    return AI_OK;
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
    atomic_store(&h->abort_claim, 0);
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
    size_t bytes = SHM_HEADER_BYTES + (size_t)nlocal * (size_t)nlocal * ring_stride(rb);
    char name[64];
    shm_name(c, name, sizeof name);
    double deadline = ai_now() + c->timeout_s;
    st = c->local_rank == 0 ? map_create(c, name, bytes, rb) : map_attach(c, name, bytes, deadline);
    if (st != AI_OK)
        return st;
    /* Rings are indexed by ordered pair of local indices (from, to). */
    unsigned char *rings = (unsigned char *)c->tp->shm_base + SHM_HEADER_BYTES;
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
    }
}
