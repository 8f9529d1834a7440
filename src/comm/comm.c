/*
 * Communicator creation and teardown: configuration from the environment,
 * rendezvous, host grouping, then the transports (shared memory within a
 * host, TCP across hosts). The public communicator calls wrap these in
 * api/communicator.c, which attaches the learner.
 */
#include "comm/ft/ft.h"
#include "comm/select/probe.h"
#include "comm/transport/transport.h"

#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_STORE_PORT 29477

/* Group ranks by host id: host indices in order of each host's lowest rank. */
static ai_status_t group_hosts(ai_comm *c, const comm_rank_info *table)
{
    int n = c->size;
    c->host_of = malloc((size_t)n * sizeof(int));
    c->host_first = malloc(((size_t)n + 1) * sizeof(int));
    c->host_ranks = malloc((size_t)n * sizeof(int));
    if (!c->host_of || !c->host_first || !c->host_ranks)
        return util_fail(AI_ERR_NOMEM, "host tables");
    c->nhosts = 0;
    for (int r = 0; r < n; r++) {
        c->host_of[r] = -1;
        for (int q = 0; q < r; q++)
            if (strcmp(table[q].host, table[r].host) == 0) {
                c->host_of[r] = c->host_of[q];
                break;
            }
        if (c->host_of[r] < 0)
            c->host_of[r] = c->nhosts++;
    }
    int pos = 0;
    for (int h = 0; h < c->nhosts; h++) {
        c->host_first[h] = pos;
        for (int r = 0; r < n; r++)
            if (c->host_of[r] == h) {
                if (r == c->rank)
                    c->local_rank = pos - c->host_first[h];
                c->host_ranks[pos++] = r;
            }
    }
    c->host_first[c->nhosts] = pos;
    int me = c->host_of[c->rank];
    c->local_size = c->host_first[me + 1] - c->host_first[me];
    return AI_OK;
}

void comm_token_key(const char *token, unsigned char key[COMM_KEY_BYTES])
{
    const char *t = token ? token : "";
    util_key_derive(key, NULL, "autoinfra job token", t, strlen(t));
}

/* This machine: its kernel's boot id (shared by every network namespace
 * and container on it), hashed; the hostname where there is none. */
uint64_t comm_machine_id(void)
{
    char id[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(id, sizeof id, f))
        (void)gethostname(id, sizeof id - 1);
    if (f)
        fclose(f);
    return util_hash64(id, strlen(id), 0);
}

/* kv: the caller's store replaces the rendezvous (no host, no port). */
static ai_status_t check_config(const ai_comm_config *cfg, const ai_kv_store *kv)
{
    if (!cfg)
        return util_fail(AI_ERR_INVALID, "no communicator configuration");
    if (cfg->size < 1 || cfg->rank < 0 || cfg->rank >= cfg->size)
        return util_fail(AI_ERR_INVALID, "rank %d is outside a job of %d ranks", cfg->rank, cfg->size);
    if (kv && (!kv->set || !kv->get))
        return util_fail(AI_ERR_INVALID, "key-value store without set or get function");
    if (cfg->size > 1 && !kv && (!cfg->store_host || !*cfg->store_host))
        return util_fail(AI_ERR_INVALID, "no rendezvous host (set AUTOINFRA_ADDR=host:port)");
    if (cfg->size > 1 && !kv && (cfg->store_port < 1 || cfg->store_port > 65535))
        return util_fail(AI_ERR_INVALID, "rendezvous port %d is not in 1..65535", cfg->store_port);
    if (cfg->channels < 0 || cfg->channels > COMM_MAX_CHANNELS)
        return util_fail(AI_ERR_INVALID, "%d channels requested; want 0 (default) to %d",
                         cfg->channels, COMM_MAX_CHANNELS);
    if (!(cfg->timeout_s >= 0 && cfg->timeout_s <= COMM_MAX_TIMEOUT_S))
        return util_fail(AI_ERR_INVALID, "timeout %g s; want 0 (default) to %g s", cfg->timeout_s,
                         COMM_MAX_TIMEOUT_S);
    ai_log_level level;
    if (util_log_level_env(&level) != AI_OK)
        return AI_ERR_INVALID;
    if (cfg->host_id && strlen(cfg->host_id) >= COMM_HOST_MAX)
        return util_fail(AI_ERR_INVALID, "host id '%s' is longer than %d characters", cfg->host_id,
                         COMM_HOST_MAX - 1);
    return AI_OK;
}

/* The communicator's key, and its name from the key by a one-way
 * function: segment names show nothing that opens a door. */
static void set_key(struct comm_transport *tp, const unsigned char key[COMM_KEY_BYTES])
{
    unsigned char name[COMM_KEY_BYTES];
    memcpy(tp->key, key, COMM_KEY_BYTES);
    util_key_derive(name, key, "autoinfra communicator name", NULL, 0);
    memcpy(&tp->token_hash, name, sizeof tp->token_hash);
}

ai_status_t comm_alloc(int rank, int size, const comm_params *pp,
                       const unsigned char job_key[COMM_KEY_BYTES],
                       const unsigned char key[COMM_KEY_BYTES], ai_comm **out)
{
    ai_comm *c = calloc(1, sizeof *c);
    if (!c || !(c->tp = calloc(1, sizeof *c->tp)) ||
        !(c->tp->peers = calloc((size_t)size, sizeof(comm_peer)))) {
        comm_destroy(c);
        return util_fail(AI_ERR_NOMEM, "communicator");
    }
    c->rank = rank;
    c->size = size;
    c->timeout_s = pp->timeout_s;
    c->channels = pp->channels;
    c->active_channels = AI_MIN(COMM_CALL_CHANNELS, c->channels);
    c->state = AI_OK;
    struct comm_transport *tp = c->tp;
    tp->listen_fd = -1;
    tp->no_shm = pp->no_shm;
    for (int m = 0; m < 2; m++) {
        tp->yield_s[m] = pp->yield_s[m];
        tp->tcp_spin_s[m] = pp->tcp_spin_s[m];
    }
    atomic_store(&tp->block_waits, pp->block_waits != 0);
    memcpy(tp->job_key, job_key, COMM_KEY_BYTES);
    set_key(tp, key);
    tp->blame = -1;
    tp->abort_origin = -1;
    for (int j = 0; j < size; j++) {
        tp->peers[j].ctl_fd = -1;
        for (int k = 0; k < COMM_MAX_CHANNELS; k++)
            tp->peers[j].tx[k].fd = tp->peers[j].rx[k].fd = -1;
    }
    *out = c;
    return AI_OK;
}

ai_status_t comm_build(ai_comm *c, const comm_rank_info *table)
{
    struct comm_transport *tp = c->tp;
    ai_status_t st;
    if ((st = group_hosts(c, table)) != AI_OK)
        return st;
    for (int j = 0; j < c->size; j++) {
        comm_peer *p = &tp->peers[j];
        p->pid = table[j].pid;
        p->addr = table[j].addr;
        p->port = table[j].port;
        p->machine = table[j].machine;
        snprintf(p->host, sizeof p->host, "%s", table[j].host);
    }
    /* Spinning only pays when every rank on this machine has a core of its
     * own; oversubscribed, a spinning rank steals the core its peer needs.
     * Ranks in other network namespaces (other host ids) on this kernel
     * count too (docs/runtime.md, "Waiting": 3-6% on the testbed's T3). */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN), here = 0;
    for (int j = 0; j < c->size; j++)
        here += table[j].machine == table[c->rank].machine;
    tp->spin_passes = here > ncpu ? 2 : 2000;
    if ((st = comm_transports_setup(c)) != AI_OK)
        return st;
    /* Rank 0 keeps its listener: the communicator's join door (comm/ft/). */
    if (tp->listen_fd >= 0 && c->rank != 0) {
        close(tp->listen_fd);
        tp->listen_fd = -1;
    }
    return AI_OK;
}

ai_status_t comm_wait_params(int block_waits, comm_params *pp)
{
    /* Before it blocks on its doorbell a shared-memory wait yields the
     * core AUTOINFRA_YIELD_US (bench/results/one-host). A TCP-only wait
     * polls (yielding the core) before it sleeps in poll(): a rank woken
     * from sleep waits for a core, and on a VM for a halted vCPU: measured
     * in docs/runtime.md, "Waiting". A caller whose compute shares the
     * cores (block_waits) would lose to either what it saves. The user's
     * settings hold in both modes. */
    ai_status_t st;
    double yield_us, spin_us;
    if ((st = util_param_double(UTIL_PARAM_YIELD_US, &yield_us)) != AI_OK ||
        (st = util_param_double(UTIL_PARAM_SPIN_US, &spin_us)) != AI_OK)
        return st;
    for (int block = 0; block < 2; block++) {
        pp->yield_s[block] = block && !util_param_is_set(UTIL_PARAM_YIELD_US) ? 0 : yield_us * 1e-6;
        pp->tcp_spin_s[block] = block && !util_param_is_set(UTIL_PARAM_SPIN_US) ? 0 : spin_us * 1e-6;
    }
    pp->block_waits = block_waits != 0;
    return AI_OK;
}

static ai_status_t create(const ai_comm_config *cfg, const ai_kv_store *kv, ai_comm **out)
{
    ai_status_t st = check_config(cfg, kv);
    if (st != AI_OK)
        return st;
    ai_comm *c = NULL;
    unsigned char job_key[COMM_KEY_BYTES] = {0};
    comm_rank_info *table = calloc((size_t)cfg->size, sizeof *table);
    if (!table)
        return util_fail(AI_ERR_NOMEM, "communicator");
    comm_params pp = {
        .timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : util_param_default(UTIL_PARAM_TIMEOUT),
        .channels = cfg->channels > 0 ? cfg->channels : (int)util_param_default(UTIL_PARAM_CHANNELS),
        .no_shm = cfg->no_shm,
    };
    if ((st = comm_wait_params(cfg->block_waits, &pp)) != AI_OK)
        goto err;
    if ((st = util_crypto_init()) != AI_OK)
        goto err;
    comm_token_key(cfg->token, job_key);
    if ((st = comm_alloc(cfg->rank, cfg->size, &pp, job_key, job_key, &c)) != AI_OK)
        goto err;
    util_log_set_rank(c->rank);
    struct comm_transport *tp = c->tp;

    comm_rank_info self = {.pid = (int32_t)getpid(), .machine = comm_machine_id()};
    if (cfg->host_id)
        snprintf(self.host, sizeof self.host, "%s", cfg->host_id);
    else if (gethostname(self.host, sizeof self.host - 1) != 0)
        snprintf(self.host, sizeof self.host, "localhost");

    if (c->size > 1) {
        /* Listen for data connections only on the address this rank
         * reaches rank 0 from (rank 0: the store's own), which is the one
         * peers learn from the rank table: loopback for a job on
         * loopback, one interface's address otherwise. */
        uint32_t store_addr;
        if ((st = comm_resolve_ipv4(cfg->store_host ? cfg->store_host : "127.0.0.1",
                                    &store_addr)) != AI_OK)
            goto err;
        if (cfg->rank == 0 || store_addr == htonl(INADDR_ANY))
            self.addr = store_addr;
        else if ((st = comm_local_addr_towards(store_addr, &self.addr)) != AI_OK)
            goto err;
        st = comm_tcp_listen(self.addr, &tp->listen_fd, &self.port);
        if (st != AI_OK)
            goto err;
        ai_comm_config eff = *cfg; /* with the defaults resolved */
        eff.timeout_s = c->timeout_s;
        uint64_t nonce = 0;
        st = kv ? comm_bootstrap_store(&eff, kv, &self, table, &nonce)
                : comm_bootstrap(&eff, tp->key, &self, table);
        if (st != AI_OK)
            goto err;
        /* Through a store the job has no token of its own: rank 0's nonce,
         * which only the store's users see, keys the data listeners and
         * keeps the names of two communicators of one set of processes
         * apart. */
        if (kv) {
            unsigned char key[COMM_KEY_BYTES];
            util_key_derive(key, job_key, "autoinfra store nonce", &nonce, sizeof nonce);
            set_key(tp, key);
        }
    } else {
        table[0] = self;
    }
    if ((st = comm_build(c, table)) != AI_OK)
        goto err;
    free(table);
    util_wipe(job_key, sizeof job_key);
    *out = c;
    return AI_OK;
err:
    util_fail_prefix(st, "rank %d of %d: communicator creation failed", cfg->rank, cfg->size);
    util_wipe(job_key, sizeof job_key);
    free(table);
    comm_destroy(c);
    return st;
}

ai_status_t comm_scratch(ai_comm *c, int slot, size_t bytes, void **out)
{
    if (slot < 0 || slot >= COMM_SCRATCH_SLOTS)
        return util_fail(AI_ERR_INVALID, "scratch slot %d out of range", slot);
    if (c->scratch_len[slot] < bytes) {
        /* Grow geometrically so alternating sizes don't reallocate. */
        size_t want = AI_MAX(bytes, c->scratch_len[slot] * 2);
        void *p = NULL;
        if (posix_memalign(&p, 64, want ? want : 64) != 0)
            return util_fail(AI_ERR_NOMEM, "scratch buffer of %zu bytes", want);
        free(c->scratch[slot]);
        c->scratch[slot] = p;
        c->scratch_len[slot] = want;
    }
    *out = c->scratch[slot];
    return AI_OK;
}

ai_status_t comm_create(const ai_comm_config *cfg, ai_comm **out)
{
    return create(cfg, NULL, out);
}

void comm_destroy(ai_comm *c)
{
    if (!c)
        return;
    if (c->tuner.release)
        c->tuner.release(c->tuner.ctx);
    comm_ft_free(c);
    if (c->tp) {
        comm_transports_close(c);
        if (c->tp->listen_fd >= 0)
            close(c->tp->listen_fd);
        util_wipe(c->tp->key, sizeof c->tp->key);
        util_wipe(c->tp->job_key, sizeof c->tp->job_key);
        free(c->tp->peers);
        free(c->tp);
    }
    for (int i = 0; i < COMM_SCRATCH_SLOTS; i++)
        free(c->scratch[i]);
    comm_links_free(c->links);
    free(c->host_coll);
    free(c->host_of);
    free(c->host_first);
    free(c->host_ranks);
    free(c);
}

/* ------------------------------------------------------- environment */

/* Rank and size from our own variables or those of the usual launchers. */
static const char *const rank_vars[][2] = {
    {"AUTOINFRA_RANK", "AUTOINFRA_SIZE"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, /* Open MPI mpirun */
    {"PMI_RANK", "PMI_SIZE"},                         /* MPICH hydra */
    {"PMIX_RANK", "PMIX_SIZE"},
    {"SLURM_PROCID", "SLURM_NTASKS"},                 /* srun */
};

/* A job id the launcher gives every rank alike: a default token and port. */
static const char *const job_vars[] = {
    "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE", "PMI_KVSNAME",
    "SLURM_STEP_ID", "SLURM_JOB_ID",
};

/* Under srun across nodes, the rendezvous is on the step's first node,
 * where rank 0 runs (Slurm's block distribution, the default, puts it
 * there): its name, which must resolve, as node names do on a cluster.
 * Leaves host empty when the step is on one node. */
static ai_status_t slurm_store_host(const char *rank_var, char *host, size_t cap)
{
    host[0] = 0;
    const char *nodes = util_env_outside("SLURM_STEP_NODELIST"), *num = util_env_outside("SLURM_STEP_NUM_NODES");
    long nnodes = 0;
    if (!rank_var || strcmp(rank_var, "SLURM_PROCID") != 0 || !nodes ||
        util_parse_long(num ? num : "1", &nnodes) != AI_OK || nnodes < 2)
        return AI_OK;
    uint32_t addr;
    ai_status_t st = util_hostlist_first(nodes, host, cap);
    if (st == AI_OK && (st = comm_resolve_ipv4(host, &addr)) != AI_OK)
        st = util_fail(st, "srun across %ld nodes: the rendezvous is on the step's first node '%s' "
                       "(SLURM_STEP_NODELIST=%s), whose name does not resolve: set AUTOINFRA_ADDR=HOST:PORT "
                       "to its address", nnodes, host, nodes);
    else if (st != AI_OK)
        st = util_fail_prefix(st, "srun across %ld nodes: no rendezvous host (set AUTOINFRA_ADDR=HOST:PORT)",
                              nnodes);
    return st;
}

/* The settings besides rank, size and rendezvous, from the environment
 * where cfg leaves them unset (NULL, <= 0, 0). */
static ai_status_t env_settings(ai_comm_config *cfg)
{
    ai_status_t st;
    if (!cfg->host_id)
        cfg->host_id = util_param_str(UTIL_PARAM_HOST);
    if (cfg->timeout_s <= 0 &&
        (st = util_param_double(UTIL_PARAM_TIMEOUT, &cfg->timeout_s)) != AI_OK)
        return st;
    if (cfg->channels <= 0 &&
        (st = util_param_int(UTIL_PARAM_CHANNELS, &cfg->channels)) != AI_OK)
        return st;
    if (!cfg->no_shm && (st = util_param_int(UTIL_PARAM_NO_SHM, &cfg->no_shm)) != AI_OK)
        return st;
    return AI_OK;
}

ai_status_t comm_config_env(ai_comm_config *out)
{
    ai_comm_config cfg = {0};
    cfg.size = 1;
    const char *rv = NULL;
    for (size_t i = 0; i < AI_ARRAY_LEN(rank_vars); i++) {
        const char *r = i ? util_env_outside(rank_vars[i][0]) : util_param_str(UTIL_PARAM_RANK),
                   *s = i ? util_env_outside(rank_vars[i][1]) : util_param_str(UTIL_PARAM_SIZE);
        /* Launchers may set one without the other (PMIX_RANK alone); ours
         * come as a pair or a job of one is not what was meant. */
        if (i == 0 && (!r) != (!s))
            return util_fail(AI_ERR_INVALID, "%s is set but %s is not: set both (rank 0..size-1, "
                                           "size 1..%d) or neither", r ? rank_vars[i][0] : rank_vars[i][1],
                           r ? rank_vars[i][1] : rank_vars[i][0], 1 << 20);
        if (!r || !s)
            continue;
        long lr, ls;
        if (util_parse_long(r, &lr) != AI_OK || util_parse_long(s, &ls) != AI_OK || ls < 1 ||
            ls > 1 << 20 || lr < 0 || lr >= ls)
            return util_fail(AI_ERR_INVALID, "%s='%s' / %s='%s' are not a valid rank and size",
                             rank_vars[i][0], r, rank_vars[i][1], s);
        cfg.rank = (int)lr;
        cfg.size = (int)ls;
        rv = rank_vars[i][0];
        break;
    }
    char jobkey[256] = "";
    for (size_t i = 0; i < AI_ARRAY_LEN(job_vars); i++) {
        const char *v = util_env_outside(job_vars[i]);
        if (v) {
            size_t len = strlen(jobkey);
            snprintf(jobkey + len, sizeof jobkey - len, "%s=%s;", job_vars[i], v);
        }
    }
    char host[256];
    const char *addr = util_param_str(UTIL_PARAM_ADDR);
    cfg.store_host = "127.0.0.1";
    cfg.store_port = DEFAULT_STORE_PORT;
    if (addr) {
        if (comm_split_hostport(addr, host, sizeof host, &cfg.store_port) != 0)
            return util_fail(AI_ERR_INVALID, "AUTOINFRA_ADDR='%s' is not host:port", addr);
        if (!(cfg.store_host = util_param_intern(host)))
            return util_fail(AI_ERR_NOMEM, "rendezvous host");
    } else if (cfg.size > 1 && jobkey[0]) {
        /* Same job, same port: derived from the launcher's job id, below
         * Linux's ephemeral range (32768 up), where a rank connecting
         * before rank 0 listens could be given the port as its own source
         * and connect to itself. */
        cfg.store_port = 20000 + (int)(util_hash64(jobkey, strlen(jobkey), 0) % 12000);
        ai_status_t st = slurm_store_host(rv, host, sizeof host);
        if (st != AI_OK)
            return st;
        if (host[0] && !(cfg.store_host = util_param_intern(host)))
            return util_fail(AI_ERR_NOMEM, "rendezvous host");
        util_log(AI_LOG_INFO, "rank/size from %s; rendezvous at %s:%d (set AUTOINFRA_ADDR "
                 "for jobs spanning machines)", rv, cfg.store_host, cfg.store_port);
    }
    cfg.token = util_param_str(UTIL_PARAM_TOKEN);
    if (!cfg.token) {
        /* Ranks started by mpirun or srun share no secret but the job id,
         * which anyone who can list the cluster's jobs knows. The job runs
         * (every rank derives the same token), but rank 0 says so, once. */
        static atomic_flag warned = ATOMIC_FLAG_INIT;
        if (!(cfg.token = util_param_intern(jobkey[0] ? jobkey : "autoinfra")))
            return util_fail(AI_ERR_NOMEM, "job token");
        if (cfg.size > 1 && cfg.rank == 0 && !atomic_flag_test_and_set(&warned))
            util_log(AI_LOG_WARN, "AUTOINFRA_TOKEN is not set: the job token is %s, which others "
                     "can guess and use to join this job; export AUTOINFRA_TOKEN=<a secret, e.g. "
                     "from `openssl rand -hex 16`> to every rank (autoinfra launch and srun "
                     "--autoinfra do)",
                     jobkey[0] ? "derived from the launcher's job id" : "the fixed default");
    }
    ai_status_t st = env_settings(&cfg);
    if (st == AI_OK)
        *out = cfg;
    return st;
}

ai_status_t comm_create_env(ai_comm **out)
{
    ai_comm_config cfg;
    ai_status_t st = comm_config_env(&cfg);
    return st == AI_OK ? comm_create(&cfg, out) : st;
}

ai_status_t comm_create_store(const ai_comm_config *cfg, const ai_kv_store *kv, ai_comm **out)
{
    if (!cfg || !kv)
        return util_fail(AI_ERR_INVALID, "no communicator configuration or no key-value store");
    ai_comm_config c = *cfg;
    ai_status_t st = env_settings(&c);
    return st == AI_OK ? create(&c, kv, out) : st;
}
