/*
 * `autoinfra launch -n N [options] -- CMD [ARGS...]`: start N local ranks of
 * a command with the environment the runtime bootstraps from. docs/cli.md
 * is the user-facing description; this comment says why it works this way.
 *
 * Process groups. All ranks go into one new process group whose leader is
 * rank 0, not into the launcher's group. A terminal's Ctrl-C then reaches
 * only the launcher (the foreground group), which forwards it once to the
 * job's group: no rank ever sees the same signal twice. Signalling the group
 * (kill(-pgid)) also reaches whatever the ranks started themselves
 * (`sh -c '...; sleep 30'` forks), which killing the rank pids alone would
 * leave behind.
 *
 * The leader is observed with WNOWAIT and reaped last: as long as its zombie
 * exists, its pid cannot be recycled, so the final kill(-pgid, SIGKILL) that
 * sweeps up strays can never hit an unrelated process group.
 *
 * Signals. SIGCHLD and the forwarded signals are blocked before the first
 * fork and taken synchronously with sigtimedwait(), so none is lost between
 * fork and wait and there is no handler-side state. Every wait has a
 * deadline: the job timeout, the 2 s SIGTERM grace, then a bounded wait for
 * the kernel to deliver SIGKILL. Signals the launcher inherited as ignored
 * (nohup) stay ignored, and ranks inherit that too.
 *
 * If the launcher itself is killed with SIGKILL, PR_SET_PDEATHSIG kills the
 * ranks (the runtime's peers see the failure and abort).
 *
 * Stdin goes to rank 0 only (as with mpirun), and not even there when it is
 * a terminal: rank 0 is not in the terminal's foreground group and a read
 * would stop it with SIGTTIN.
 *
 * Hook for the emulated cluster (network namespaces): --wrap 'ip netns exec
 * {host}' prefixes each rank's command with the words given, {host}
 * replaced by the rank's host name, and --store-host sets the address in
 * AUTOINFRA_ADDR that the other namespaces can reach rank 0 on.
 *
 * Binding. With no more ranks than the CPUs the launcher may use, rank k
 * is bound to the k-th of them (--bind core, the default then; mpirun
 * binds so too): an unbound rank spinning for its peer can share a core
 * with it until the scheduler moves one, and on a busy 2-core machine 8-byte
 * allreduces on 2 ranks took 17-25 us unbound against 0.15-1 us bound.
 * With more ranks than CPUs nothing is bound (--bind none), as mpirun
 * does when oversubscribed.
 *
 * From the runtime library it uses only ai_rendezvous_port(), which picks
 * the rendezvous port as the MPI shim does.
 *
 * Elastic jobs (--elastic). A rank that fails no longer stops the others:
 * a job that shrinks past a lost rank (autoinfra.elastic, ai_comm_shrink)
 * goes on, and with --restarts N up to N replacements are started, each
 * as the dead rank's process was but with AUTOINFRA_JOIN_ADDR set, the
 * sign for the program to join the running job (ai_comm_join, elastic's
 * join=) rather than to create it. Every rank gets AUTOINFRA_JOIN_DOOR
 * (a third drawn port on --store-host), where whichever process is rank 0
 * keeps the join door; it does not depend on any one process, so a
 * replacement finds the job after rank 0 died too. The leader's zombie is
 * kept to the end as before: a replacement for rank 0 joins the group.
 * The job's status is then the last process's: 0 when the job ended well
 * on whatever ranks it had left.
 *
 * torch.distributed's env:// is served too (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so the launcher replaces
 * torchrun. MASTER_PORT is a second drawn port, never the rendezvous one:
 * torch's TCPStore binds it on rank 0, and a job may also create an
 * autoinfra communicator that binds AUTOINFRA_ADDR's port.
 */
#include "autoinfra.h"
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define LAUNCH_MAX_RANKS 4096
#define LAUNCH_GRACE_S 2.0     /* SIGTERM -> SIGKILL */
#define LAUNCH_REAP_LIMIT_S 5.0 /* after SIGKILL, how long we wait for the kernel */
#define LAUNCH_EXIT_USAGE 2
#define LAUNCH_EXIT_TIMEOUT 124 /* as timeout(1) */
#define LAUNCH_EXIT_NOEXEC 126
#define LAUNCH_EXIT_NOTFOUND 127

typedef struct launch_opts {
    int nranks;
    char *hosts_buf;      /* owned copy of --hosts, split in place */
    char **hosts;         /* [nhosts] pointers into hosts_buf */
    int nhosts;           /* 0: no --hosts */
    double timeout_s;     /* 0: none */
    int port;             /* 0: pick a free one */
    const char *store_host;
    const char *wrap;     /* NULL: none */
    int bind;             /* -1: core if ranks fit the CPUs; 0: none; 1: core */
    int elastic;          /* a failed rank does not stop the others */
    int restarts;         /* replacements left to start (--restarts) */
    char **cmd;           /* points into argv, NULL-terminated by argv */
    int ncmd;
} launch_opts;

typedef struct launch_rank {
    pid_t pid;
    int exited;          /* status observed (the leader stays unreaped) */
    int host;            /* index into hosts, -1 without --hosts */
    int local_rank, local_size;
    char **env;          /* shared base pointers + owned own[] */
    char **join_env;     /* env + AUTOINFRA_JOIN_ADDR: a replacement's (--elastic) */
    char *own[20];       /* strings this rank owns in env */
    int nown;
    char **argv;         /* wrap words (owned) + cmd (borrowed) */
    char *wrap_buf;      /* owned storage for the wrap words */
    int cpu;             /* bound to this CPU before exec; -1: not bound */
    int replace;         /* --restarts: start a replacement for it */
} launch_rank;

typedef struct launch_job {
    launch_opts o;
    launch_rank *ranks;
    pid_t pgid;          /* 0 until rank 0 is forked */
    int running;         /* ranks not yet exited */
    int result;          /* exit status of the launcher; -1 until decided */
    int stopping;        /* SIGTERM sent to the job */
    int killed;          /* SIGKILL sent to the job */
    double kill_at;      /* when stopping: SIGKILL time */
    double give_up_at;   /* when killed: stop waiting */
} launch_job;

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void launch_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void launch_err(const char *fmt, ...)
{
    va_list ap;
    fputs("autoinfra launch: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void launch_usage(FILE *out)
{
    fprintf(out,
        "usage: autoinfra launch -n N [options] -- CMD [ARGS...]\n"
        "\n"
        "Start N ranks of CMD on this machine. Each rank gets AUTOINFRA_RANK,\n"
        "AUTOINFRA_SIZE, AUTOINFRA_LOCAL_RANK, AUTOINFRA_LOCAL_SIZE, AUTOINFRA_ADDR\n"
        "(rendezvous store on rank 0), AUTOINFRA_TOKEN and, with --hosts,\n"
        "AUTOINFRA_HOST. The first rank that fails decides the exit status\n"
        "(exit code, or 128+signal) and the others are stopped.\n"
        "\n"
        "options:\n"
        "  -n, --np N          number of ranks (1..%d)\n"
        "  --hosts A,B,...     spread ranks over these host names in blocks\n"
        "                      (ranks on different hosts use TCP, not shared memory)\n"
        "  --timeout S         stop the job after S seconds, exit %d\n"
        "  --port P            rendezvous port (default: a free port)\n"
        "  --store-host ADDR   address in AUTOINFRA_ADDR (default 127.0.0.1)\n"
        "  --wrap 'PREFIX'     run each rank as PREFIX CMD...; {host} in PREFIX is\n"
        "                      replaced by the rank's host (e.g. 'ip netns exec {host}')\n"
        "  --bind core|none    bind rank k to the k-th usable CPU, or not (default:\n"
        "                      core when N is at most the usable CPUs, else none)\n"
        "  --elastic           a rank that fails does not stop the others (a job\n"
        "                      that shrinks past it goes on); every rank gets\n"
        "                      AUTOINFRA_JOIN_DOOR, the job's join door; the exit\n"
        "                      status is the last process's\n"
        "  --restarts N        with --elastic: start up to N replacements, one when\n"
        "                      a rank fails while others run, as that rank was but\n"
        "                      with AUTOINFRA_JOIN_ADDR set (join the job, do not\n"
        "                      create it)\n"
        "  -h, --help          this text\n"
        "\n"
        "exit status: 0 all ranks succeeded; the first failing rank's status;\n"
        "%d timeout; %d usage error; %d command not found; %d not executable;\n"
        "128+S if the launcher was stopped by signal S.\n",
        LAUNCH_MAX_RANKS, LAUNCH_EXIT_TIMEOUT, LAUNCH_EXIT_TIMEOUT, LAUNCH_EXIT_USAGE,
        LAUNCH_EXIT_NOTFOUND, LAUNCH_EXIT_NOEXEC);
}

/* ------------------------------------------------------------ parsing */

static int parse_hosts(launch_opts *o, const char *text)
{
    char *p, *save = NULL, *tok;
    int n = 1;
    for (const char *c = text; *c; c++)
        n += *c == ',';
    free(o->hosts_buf);
    free(o->hosts);
    o->hosts_buf = strdup(text);
    o->hosts = calloc((size_t)n, sizeof *o->hosts);
    o->nhosts = 0;
    if (!o->hosts_buf || !o->hosts) {
        launch_err("out of memory");
        return -1;
    }
    /* strtok_r would silently merge "a,,b"; an empty name is a typo. */
    p = o->hosts_buf;
    for (int k = 0; k < n; k++) {
        tok = p;
        save = strchr(p, ',');
        if (save) {
            *save = '\0';
            p = save + 1;
        }
        if (!*tok) {
            launch_err("--hosts '%s': empty host name (expected A,B,...)", text);
            return -1;
        }
        if (strchr(tok, '=') || strchr(tok, ' ')) {
            launch_err("--hosts: bad host name '%s'", tok);
            return -1;
        }
        o->hosts[o->nhosts++] = tok;
    }
    return 0;
}

/* Returns 0 to run, 1 when --help was printed, LAUNCH_EXIT_USAGE on error. */
static int launch_parse(int argc, char **argv, launch_opts *o)
{
    int have_n = 0, have_restarts = 0;
    int i;
    o->store_host = "127.0.0.1";
    o->bind = -1;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        long l;
        int m;
        if (!strcmp(a, "--"))
            break;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (!strncmp(a, "-n", 2) && a[2] >= '0' && a[2] <= '9') {
            v = a + 2; /* -n4 */
            m = 1;
        } else if ((m = cli_match_opt(argc, argv, &i, "-n", &v)) == 0)
            m = cli_match_opt(argc, argv, &i, "--np", &v);
        if (m) {
            if (m < 0)
                goto missing;
            if (cli_parse_long(v, 1, LAUNCH_MAX_RANKS, &l)) {
                launch_err("-n '%s': expected a number of ranks between 1 and %d", v,
                           LAUNCH_MAX_RANKS);
                return LAUNCH_EXIT_USAGE;
            }
            o->nranks = (int)l;
            have_n = 1;
        } else if ((m = cli_match_opt(argc, argv, &i, "--hosts", &v))) {
            if (m < 0)
                goto missing;
            if (parse_hosts(o, v))
                return LAUNCH_EXIT_USAGE;
        } else if ((m = cli_match_opt(argc, argv, &i, "--timeout", &v))) {
            char *end;
            if (m < 0)
                goto missing;
            errno = 0;
            o->timeout_s = strtod(v, &end);
            if (!*v || *end || errno || !(o->timeout_s > 0) || o->timeout_s > 1e7) {
                launch_err("--timeout '%s': expected seconds > 0", v);
                return LAUNCH_EXIT_USAGE;
            }
        } else if ((m = cli_match_opt(argc, argv, &i, "--port", &v))) {
            if (m < 0)
                goto missing;
            if (cli_parse_long(v, 1, 65535, &l)) {
                launch_err("--port '%s': expected a TCP port 1..65535", v);
                return LAUNCH_EXIT_USAGE;
            }
            o->port = (int)l;
        } else if ((m = cli_match_opt(argc, argv, &i, "--store-host", &v))) {
            if (m < 0)
                goto missing;
            if (!*v || strchr(v, ':')) {
                launch_err("--store-host '%s': expected an IPv4 address or host name", v);
                return LAUNCH_EXIT_USAGE;
            }
            o->store_host = v;
        } else if ((m = cli_match_opt(argc, argv, &i, "--wrap", &v))) {
            if (m < 0)
                goto missing;
            o->wrap = v;
        } else if ((m = cli_match_opt(argc, argv, &i, "--bind", &v))) {
            if (m < 0)
                goto missing;
            if (strcmp(v, "core") && strcmp(v, "none")) {
                launch_err("--bind '%s': expected core or none", v);
                return LAUNCH_EXIT_USAGE;
            }
            o->bind = !strcmp(v, "core");
        } else if (!strcmp(a, "--elastic")) {
            o->elastic = 1;
        } else if ((m = cli_match_opt(argc, argv, &i, "--restarts", &v))) {
            if (m < 0)
                goto missing;
            if (cli_parse_long(v, 0, 100000, &l)) {
                launch_err("--restarts '%s': expected a number of replacements 0..100000", v);
                return LAUNCH_EXIT_USAGE;
            }
            o->restarts = (int)l;
            have_restarts = 1;
        } else if (a[0] == '-') {
            launch_err("unknown option '%s' (see 'autoinfra launch --help')", a);
            return LAUNCH_EXIT_USAGE;
        } else {
            launch_err("missing '--' before the command '%s' "
                       "(usage: autoinfra launch -n N [options] -- CMD [ARGS...])", a);
            return LAUNCH_EXIT_USAGE;
        }
    }
    if (i >= argc) {
        launch_err("missing '-- CMD [ARGS...]' (usage: autoinfra launch -n N [options] -- CMD)");
        return LAUNCH_EXIT_USAGE;
    }
    if (i + 1 >= argc) {
        launch_err("no command after '--'");
        return LAUNCH_EXIT_USAGE;
    }
    if (!have_n) {
        launch_err("missing -n N (number of ranks)");
        return LAUNCH_EXIT_USAGE;
    }
    if (have_restarts && !o->elastic) {
        launch_err("--restarts needs --elastic (replacements join a job that goes on)");
        return LAUNCH_EXIT_USAGE;
    }
    if (o->wrap && strstr(o->wrap, "{host}") && !o->nhosts) {
        launch_err("--wrap uses {host} but no --hosts were given");
        return LAUNCH_EXIT_USAGE;
    }
    o->cmd = argv + i + 1;
    o->ncmd = argc - i - 1;
    return 0;
missing:
    launch_err("option '%s' needs a value", argv[i]);
    return LAUNCH_EXIT_USAGE;
}

/* ------------------------------------------------------------ job setup */

/* Find `name` as execvp would (PATH search unless it contains '/').
 * Returns 0 if an executable regular file exists, else the errno a shell
 * would report (ENOENT or EACCES). */
static int find_program(const char *name)
{
    const char *path, *p;
    char buf[PATH_MAX];
    struct stat st;
    int err = ENOENT;
    if (!*name)
        return ENOENT;
    if (strchr(name, '/')) {
        if (stat(name, &st))
            return ENOENT;
        return S_ISREG(st.st_mode) && !access(name, X_OK) ? 0 : EACCES;
    }
    path = getenv("PATH");
    if (!path)
        path = "/bin:/usr/bin"; /* glibc execvp's default */
    for (p = path;; p = strchr(p, ':') + 1) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int n;
        /* An empty PATH entry means the current directory. */
        n = len ? snprintf(buf, sizeof buf, "%.*s/%s", (int)len, p, name)
                : snprintf(buf, sizeof buf, "./%s", name);
        if (n > 0 && (size_t)n < sizeof buf && !stat(buf, &st)) {
            if (S_ISREG(st.st_mode) && !access(buf, X_OK))
                return 0;
            err = EACCES;
        }
        if (!end)
            break;
    }
    return err;
}

static int make_token(char out[33])
{
    unsigned char raw[16];
    size_t got = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while (got < sizeof raw) {
        ssize_t n = read(fd, raw + got, sizeof raw - got);
        if (n <= 0 && !(n < 0 && errno == EINTR)) {
            close(fd);
            return -1;
        }
        if (n > 0)
            got += (size_t)n;
    }
    close(fd);
    for (size_t k = 0; k < sizeof raw; k++)
        snprintf(out + 2 * k, 3, "%02x", raw[k]);
    return 0;
}

/* Variables the launcher sets itself; inherited values are dropped so a
 * launcher started from inside another job does not leak its rank. The
 * token is passed through (it is read before this filter), AUTOINFRA_HOST
 * only when --hosts replaces it. */
static int is_launcher_var(const char *entry, int with_hosts, int elastic)
{
    static const char *const vars[] = {
        "AUTOINFRA_RANK=", "AUTOINFRA_SIZE=", "AUTOINFRA_LOCAL_RANK=",
        "AUTOINFRA_LOCAL_SIZE=", "AUTOINFRA_ADDR=", "AUTOINFRA_TOKEN=",
        "RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=",
        "MASTER_ADDR=", "MASTER_PORT=", "AUTOINFRA_JOIN_ADDR=",
    };
    for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++)
        if (!strncmp(entry, vars[k], strlen(vars[k])))
            return 1;
    if (elastic && !strncmp(entry, "AUTOINFRA_JOIN_DOOR=", 20))
        return 1;
    return with_hosts && !strncmp(entry, "AUTOINFRA_HOST=", 15);
}

/* Split the --wrap prefix into words with {host} replaced, followed by the
 * command. Storage: r->wrap_buf holds the words, r->argv the pointers. */
static int build_argv(launch_job *j, launch_rank *r)
{
    const launch_opts *o = &j->o;
    const char *host = r->host >= 0 ? o->hosts[r->host] : "";
    size_t cap = 1, nw = 0, len = 0;
    char *w;
    if (o->wrap) {
        /* Upper bound of the expanded length: every byte could start "{host}". */
        cap = strlen(o->wrap) * (strlen(host) + 1) + 1;
    }
    r->wrap_buf = malloc(cap);
    /* Words are split only at the prefix's own blanks (a host name is
     * copied whole), so there are at most (len + 1) / 2 of them. */
    r->argv = calloc(strlen(o->wrap ? o->wrap : "") / 2 + 2 + (size_t)o->ncmd, sizeof *r->argv);
    if (!r->wrap_buf || !r->argv)
        return -1;
    if (o->wrap) {
        for (const char *s = o->wrap; *s;) {
            if (!strncmp(s, "{host}", 6)) {
                memcpy(r->wrap_buf + len, host, strlen(host));
                len += strlen(host);
                s += 6;
            } else {
                r->wrap_buf[len++] = *s == ' ' || *s == '\t' ? '\0' : *s;
                s++;
            }
        }
    }
    r->wrap_buf[len] = '\0';
    /* Collect the non-empty words between the NULs. */
    for (w = r->wrap_buf; w < r->wrap_buf + len; w += strlen(w) + 1)
        if (*w)
            r->argv[nw++] = w;
    for (int k = 0; k < o->ncmd; k++)
        r->argv[nw++] = o->cmd[k];
    r->argv[nw] = NULL;
    return 0;
}

static int add_own(launch_rank *r, char **env, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int add_own(launch_rank *r, char **env, size_t *n, const char *fmt, ...)
{
    va_list ap;
    char *s;
    int rc;
    va_start(ap, fmt);
    rc = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (rc < 0)
        return -1;
    r->own[r->nown++] = s;
    env[(*n)++] = s;
    return 0;
}

/* Everything a child needs is built here, before fork, so the child only
 * calls async-signal-safe functions. */
static int launch_prepare(launch_job *j)
{
    launch_opts *o = &j->o;
    const char *token_env = getenv("AUTOINFRA_TOKEN");
    char token[33];
    size_t nbase = 0, nenv = 0;
    char **base;
    int port = o->port, torch_port = -1, door_port = -1;
    int rank = 0;

    if (token_env && *token_env) {
        if (strlen(token_env) >= sizeof token) {
            launch_err("AUTOINFRA_TOKEN is longer than %zu characters", sizeof token - 1);
            return LAUNCH_EXIT_USAGE;
        }
        strcpy(token, token_env);
    } else if (make_token(token)) {
        launch_err("cannot read /dev/urandom for the job token: %s", strerror(errno));
        return 1;
    }
    /* Checked on this host's loopback: a --store-host may live in another
     * network namespace (the testbed's); the range is what keeps it free. */
    if (!port && ai_rendezvous_port(NULL, &port) != AI_OK) {
        launch_err("%s (use --port)", ai_last_error());
        return 1;
    }
    for (int t = 0; t < 16 && (torch_port < 0 || torch_port == port); t++)
        if (ai_rendezvous_port(NULL, &torch_port) != AI_OK)
            torch_port = -1;
    if (torch_port < 0 || torch_port == port) {
        launch_err("cannot find a second free TCP port on 127.0.0.1 for MASTER_PORT");
        return 1;
    }
    for (int t = 0; o->elastic && t < 16 && (door_port < 0 || door_port == port ||
                                              door_port == torch_port); t++)
        if (ai_rendezvous_port(NULL, &door_port) != AI_OK)
            door_port = -1;
    if (o->elastic && (door_port < 0 || door_port == port || door_port == torch_port)) {
        launch_err("cannot find a third free TCP port on 127.0.0.1 for AUTOINFRA_JOIN_DOOR");
        return 1;
    }

    for (char **e = environ; *e; e++)
        nenv++;
    base = calloc(nenv + 1, sizeof *base);
    j->ranks = calloc((size_t)o->nranks, sizeof *j->ranks);
    if (!base || !j->ranks) {
        free(base);
        launch_err("out of memory");
        return 1;
    }
    for (char **e = environ; *e; e++)
        if (!is_launcher_var(*e, o->nhosts > 0, o->elastic))
            base[nbase++] = *e;

    /* Blocks: host h gets N/H ranks, the first N%H hosts one more. */
    for (int h = 0; h < (o->nhosts ? o->nhosts : 1); h++) {
        int nh = o->nhosts ? o->nranks / o->nhosts + (h < o->nranks % o->nhosts) : o->nranks;
        for (int l = 0; l < nh; l++, rank++) {
            launch_rank *r = &j->ranks[rank];
            size_t n = nbase;
            r->host = o->nhosts ? h : -1;
            r->local_rank = l;
            r->local_size = nh;
            r->env = calloc(nbase + sizeof r->own / sizeof r->own[0] + 1, sizeof *r->env);
            if (!r->env)
                goto nomem;
            memcpy(r->env, base, nbase * sizeof *base);
            if (add_own(r, r->env, &n, "AUTOINFRA_RANK=%d", rank) ||
                add_own(r, r->env, &n, "AUTOINFRA_SIZE=%d", o->nranks) ||
                add_own(r, r->env, &n, "AUTOINFRA_LOCAL_RANK=%d", l) ||
                add_own(r, r->env, &n, "AUTOINFRA_LOCAL_SIZE=%d", nh) ||
                add_own(r, r->env, &n, "AUTOINFRA_ADDR=%s:%d", o->store_host, port) ||
                add_own(r, r->env, &n, "AUTOINFRA_TOKEN=%s", token) ||
                (o->nhosts && add_own(r, r->env, &n, "AUTOINFRA_HOST=%s", o->hosts[h])) ||
                add_own(r, r->env, &n, "RANK=%d", rank) ||
                add_own(r, r->env, &n, "WORLD_SIZE=%d", o->nranks) ||
                add_own(r, r->env, &n, "LOCAL_RANK=%d", l) ||
                add_own(r, r->env, &n, "LOCAL_WORLD_SIZE=%d", nh) ||
                add_own(r, r->env, &n, "MASTER_ADDR=%s", o->store_host) ||
                add_own(r, r->env, &n, "MASTER_PORT=%d", torch_port) ||
                (o->elastic && add_own(r, r->env, &n, "AUTOINFRA_JOIN_DOOR=%s:%d", o->store_host,
                                       door_port)))
                goto nomem;
            r->env[n] = NULL;
            if (o->elastic) {
                /* A replacement: the same, and the door to join by. */
                size_t nj = n;
                if (!(r->join_env = calloc(n + 2, sizeof *r->join_env)))
                    goto nomem;
                memcpy(r->join_env, r->env, n * sizeof *r->env);
                if (add_own(r, r->join_env, &nj, "AUTOINFRA_JOIN_ADDR=%s:%d", o->store_host,
                            door_port))
                    goto nomem;
                r->join_env[nj] = NULL;
            }
            if (build_argv(j, r))
                goto nomem;
        }
    }
    free(base);
    return 0;
nomem:
    free(base);
    launch_err("out of memory");
    return 1;
}

static void launch_free(launch_job *j)
{
    if (j->ranks) {
        for (int k = 0; k < j->o.nranks; k++) {
            launch_rank *r = &j->ranks[k];
            for (int s = 0; s < r->nown; s++)
                free(r->own[s]);
            free(r->env);
            free(r->join_env);
            free(r->argv);
            free(r->wrap_buf);
        }
    }
    free(j->ranks);
    free(j->o.hosts);
    free(j->o.hosts_buf);
}

/* ------------------------------------------------------------ running */

/* Which CPU each rank is bound to (module comment, "Binding"). */
static void plan_binding(launch_job *j)
{
    cpu_set_t set;
    int cpus[CPU_SETSIZE], n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set))
                cpus[n++] = c;
    int bind = j->o.bind < 0 ? j->o.nranks <= n : j->o.bind;
    if (bind && j->o.nranks > n)
        launch_err("--bind core: %d ranks on %d usable CPUs: ranks %d.. share CPUs", j->o.nranks,
                   n, n);
    for (int k = 0; k < j->o.nranks; k++)
        j->ranks[k].cpu = bind && n > 0 ? cpus[k % n] : -1;
}

/* In the child: only async-signal-safe calls until exec (the launcher is
 * single-threaded, so the message after a failed exec is safe too). */
static void child_exec(const launch_job *j, int rank, pid_t launcher, const sigset_t *mask,
                       int stdin_mode, int replacement)
{
    const launch_rank *r = &j->ranks[rank];
    char msg[512];
    int err, n;

    setpgid(0, rank == 0 && !replacement ? 0 : j->pgid);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* The launcher may have died between fork and prctl; nobody would stop
     * this rank then. */
    if (getppid() != launcher)
        _exit(1);
    if (stdin_mode == 0 || rank > 0 || replacement) {
        int fd = open("/dev/null", O_RDONLY);
        if (fd >= 0 && fd != STDIN_FILENO) {
            dup2(fd, STDIN_FILENO);
            close(fd);
        }
    }
    /* The blocked set is inherited across exec; give the rank the mask the
     * launcher started with. Caught signals reset to default on exec. */
    sigprocmask(SIG_SETMASK, mask, NULL);
    if (r->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(r->cpu, &set);
        (void)sched_setaffinity(0, sizeof set, &set); /* a hint: run unbound if refused */
    }
    execvpe(r->argv[0], r->argv, replacement ? r->join_env : r->env);
    err = errno;
    n = snprintf(msg, sizeof msg, "autoinfra launch: rank %d: cannot run '%s': %s\n", rank,
                 r->argv[0], strerror(err));
    if (n > 0)
        (void)!write(STDERR_FILENO, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(err == ENOENT ? LAUNCH_EXIT_NOTFOUND : LAUNCH_EXIT_NOEXEC);
}

/* Signal the whole job: the group, plus any rank that left it (setsid). */
static void job_signal(launch_job *j, int sig)
{
    if (!j->pgid)
        return;
    for (int k = 0; k < j->o.nranks; k++) {
        launch_rank *r = &j->ranks[k];
        if (r->pid > 0 && !r->exited && getpgid(r->pid) != j->pgid)
            kill(r->pid, sig);
    }
    kill(-j->pgid, sig);
}

static void job_stop(launch_job *j, double now)
{
    if (j->stopping)
        return;
    j->stopping = 1;
    j->kill_at = now + LAUNCH_GRACE_S;
    job_signal(j, SIGTERM);
}

/* A rank ended with exit code `code` (termsig 0) or by signal `termsig`. */
static void rank_exited(launch_job *j, int rank, int code, int termsig, double now)
{
    if (termsig)
        code = 128 + termsig; /* as a shell reports it */
    j->ranks[rank].exited = 1;
    j->running--;
    if (code == 0 || j->stopping)
        return;
    if (j->o.elastic && j->running > 0) {
        /* The others go on (the module comment, "Elastic jobs"). */
        if (termsig)
            fprintf(stderr, "autoinfra launch: rank %d was killed by signal %d (%s), status %d",
                    rank, termsig, strsignal(termsig), code);
        else
            fprintf(stderr, "autoinfra launch: rank %d exited with status %d", rank, code);
        fprintf(stderr, "; --elastic: %d other rank%s go%s on%s\n", j->running,
                j->running == 1 ? "" : "s", j->running == 1 ? "es" : "",
                j->o.restarts > 0 ? ", starting a replacement that joins" : "");
        if (j->o.restarts > 0)
            j->ranks[rank].replace = 1;
        return;
    }
    j->result = code;
    if (termsig)
        fprintf(stderr, "autoinfra launch: rank %d was killed by signal %d (%s), status %d",
                rank, termsig, strsignal(termsig), code);
    else
        fprintf(stderr, "autoinfra launch: rank %d exited with status %d", rank, code);
    if (j->running)
        fprintf(stderr, "; stopping %d other rank%s\n", j->running, j->running == 1 ? "" : "s");
    else
        fputc('\n', stderr);
    job_stop(j, now);
}

/* Collect every rank that has exited. The leader (rank 0) is only observed
 * (WNOWAIT) so that its pid, the group id, stays reserved until the end. */
static void reap(launch_job *j, double now)
{
    for (int k = 0; k < j->o.nranks; k++) {
        launch_rank *r = &j->ranks[k];
        siginfo_t si;
        if (r->pid <= 0 || r->exited)
            continue;
        memset(&si, 0, sizeof si);
        int keep = r->pid == j->pgid ? WNOWAIT : 0; /* the leader */
        if (waitid(P_PID, (id_t)r->pid, &si, WEXITED | WNOHANG | keep))
            continue;
        if (si.si_pid != r->pid)
            continue;
        if (si.si_code == CLD_EXITED)
            rank_exited(j, k, si.si_status & 0xff, 0, now);
        else
            rank_exited(j, k, 0, si.si_status, now);
    }
}

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static int launch_run(launch_job *j)
{
    launch_opts *o = &j->o;
    sigset_t waitset, oldmask;
    struct sigaction sa, old_chld;
    pid_t self = getpid();
    int stdin_mode = !isatty(STDIN_FILENO); /* 1: rank 0 inherits stdin */
    double start = mono_now(), deadline = o->timeout_s > 0 ? start + o->timeout_s : 0;
    int got_signal = 0;

    /* SIGCHLD must not be SIG_IGN (children would be auto-reaped). */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sa.sa_flags = SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, &old_chld);

    sigemptyset(&waitset);
    sigaddset(&waitset, SIGCHLD);
    for (size_t k = 0; k < sizeof forwarded / sizeof forwarded[0]; k++) {
        struct sigaction cur;
        /* Inherited SIG_IGN (nohup, `&` in a script) means "not for us". */
        if (!sigaction(forwarded[k], NULL, &cur) && cur.sa_handler == SIG_IGN)
            continue;
        sigaddset(&waitset, forwarded[k]);
    }
    sigprocmask(SIG_BLOCK, &waitset, &oldmask);

    plan_binding(j);
    fflush(NULL); /* no buffered output duplicated into children */
    j->result = -1;
    for (int k = 0; k < o->nranks; k++) {
        pid_t pid = fork();
        if (pid < 0) {
            launch_err("cannot start rank %d: fork: %s", k, strerror(errno));
            j->result = 1;
            job_stop(j, mono_now());
            break;
        }
        if (pid == 0)
            child_exec(j, k, self, &oldmask, stdin_mode, 0);
        /* Also from the parent: whichever runs first, the group exists
         * before the next fork. EACCES means the child already exec'd,
         * after having done it itself. */
        if (k == 0)
            j->pgid = pid;
        if (setpgid(pid, j->pgid) && errno != EACCES && errno != ESRCH)
            launch_err("rank %d: setpgid: %s", k, strerror(errno));
        j->ranks[k].pid = pid;
        j->running++;
    }

    while (j->running > 0) {
        double now = mono_now(), next = 0;
        struct timespec ts;
        siginfo_t si;
        int sig;

        reap(j, now);
        for (int k = 0; k < o->nranks; k++) {
            launch_rank *r = &j->ranks[k];
            if (!r->replace)
                continue;
            r->replace = 0;
            if (j->stopping || j->running == 0 || o->restarts == 0)
                continue;
            fflush(NULL);
            pid_t pid = fork();
            if (pid < 0) {
                launch_err("cannot start a replacement for rank %d: fork: %s", k,
                           strerror(errno));
                continue;
            }
            if (pid == 0)
                child_exec(j, k, self, &oldmask, stdin_mode, 1);
            if (setpgid(pid, j->pgid) && errno != EACCES && errno != ESRCH)
                launch_err("rank %d's replacement: setpgid: %s", k, strerror(errno));
            o->restarts--;
            r->pid = pid;
            r->exited = 0;
            j->running++;
            fprintf(stderr, "autoinfra launch: started pid %d to join in place of rank %d "
                    "(%d replacement%s left)\n", (int)pid, k, o->restarts,
                    o->restarts == 1 ? "" : "s");
        }
        if (j->running == 0)
            break;
        if (deadline && now >= deadline && !j->stopping) {
            launch_err("job ran longer than --timeout %g s; stopping %d rank%s", o->timeout_s,
                       j->running, j->running == 1 ? "" : "s");
            j->result = LAUNCH_EXIT_TIMEOUT;
            job_stop(j, now);
        }
        if (j->stopping && !j->killed && now >= j->kill_at) {
            job_signal(j, SIGKILL);
            j->killed = 1;
            j->give_up_at = now + LAUNCH_REAP_LIMIT_S;
        }
        if (j->killed && now >= j->give_up_at) {
            launch_err("%d rank%s still running %g s after SIGKILL; giving up", j->running,
                       j->running == 1 ? " is" : "s are", LAUNCH_REAP_LIMIT_S);
            break;
        }
        /* Sleep until a signal or the nearest deadline. */
        next = j->killed ? j->give_up_at : j->stopping ? j->kill_at : deadline;
        if (!next)
            next = now + 3600;
        if (next < now)
            next = now;
        ts.tv_sec = (time_t)(next - now);
        ts.tv_nsec = (long)((next - now - (double)ts.tv_sec) * 1e9) + 1000000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        sig = sigtimedwait(&waitset, &si, &ts);
        if (sig <= 0 || sig == SIGCHLD)
            continue;
        /* A forwarded signal: pass it on once, to the job's group. */
        if (!got_signal && !j->stopping)
            launch_err("received signal %d (%s); forwarding it to %d rank%s", sig,
                       strsignal(sig), j->running,
                       j->running == 1 ? "" : "s");
        if (!got_signal && j->result < 0)
            j->result = 128 + sig;
        got_signal = sig;
        job_signal(j, sig);
        if (!j->stopping) {
            /* Like job_stop but the signal already went out: only arm the
             * SIGKILL escalation. */
            j->stopping = 1;
            j->kill_at = mono_now() + LAUNCH_GRACE_S;
        }
    }

    /* Sweep up anything the ranks left in the group (background children
     * of a shell rank), then release the leader's zombie. */
    if (j->pgid)
        kill(-j->pgid, SIGKILL);
    if (j->pgid)
        waitpid(j->pgid, NULL, WNOHANG);

    sigprocmask(SIG_SETMASK, &oldmask, NULL);
    sigaction(SIGCHLD, &old_chld, NULL);
    return j->result < 0 ? 0 : j->result;
}

int cli_launch_main(int argc, char **argv)
{
    launch_job job;
    int rc, err;

    memset(&job, 0, sizeof job);
    rc = launch_parse(argc, argv, &job.o);
    if (rc == 1) {
        launch_usage(stdout);
        rc = 0;
        goto out;
    }
    if (rc)
        goto out;
    /* Fail like a shell before starting anything: with --wrap the program
     * run is the wrapper's first word. */
    {
        const char *prog = job.o.cmd[0];
        char first[PATH_MAX];
        if (job.o.wrap) {
            size_t n = strspn(job.o.wrap, " \t");
            size_t len = strcspn(job.o.wrap + n, " \t");
            if (len && len < sizeof first) {
                memcpy(first, job.o.wrap + n, len);
                first[len] = '\0';
                prog = first;
            }
        }
        err = find_program(prog);
        if (err) {
            launch_err("%s: %s", prog, err == ENOENT ? "command not found" : "permission denied (not an executable file)");
            rc = err == ENOENT ? LAUNCH_EXIT_NOTFOUND : LAUNCH_EXIT_NOEXEC;
            goto out;
        }
    }
    rc = launch_prepare(&job);
    if (rc)
        goto out;
    rc = launch_run(&job);
out:
    launch_free(&job);
    return rc;
}
