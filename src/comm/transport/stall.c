/*
 * Whom a wait that timed out blames.
 *
 * A timeout says only that nothing moved; which peer is to blame decides
 * what every other rank reads, because comm_abort sends the blamed rank
 * on as the origin of the abort notice. A stalled rank (SIGSTOP, a
 * debugger, a frozen host) stops its neighbours first, and they stop
 * theirs: a rank waiting on a live peer that itself waits on the stalled
 * one times out too, at about the same moment, and whichever of them
 * times out first names the cause for the whole job. Naming the first
 * peer waited on, or this rank itself, named a rank that was running in
 * about half the survivors' messages (bench/chaos --local 3 --kinds stall).
 *
 * So: a peer on this machine whose process is stopped is the cause,
 * whether this rank waits on it or on a rank that does; otherwise the
 * first peer waited on, listed first. comm_abort passes the blamed rank
 * on, and the ranks that adopt the notice name it too.
 */
#include "comm/transport/transport.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The state letter of /proc/<pid>/stat ('T' stopped, 't' traced), or 0. */
static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')'); /* the command name may hold anything */
    return rp && rp[1] == ' ' ? rp[2] : 0;
}

int comm_peer_stopped(const ai_comm *c, int peer)
{
    const struct comm_transport *tp = c->tp;
    if (!tp || peer < 0 || peer >= c->size || peer == c->rank)
        return 0;
    const comm_peer *p = &tp->peers[peer];
    /* Only a peer of this kernel: its pid means something here. */
    if (p->pid <= 0 || p->machine != tp->peers[c->rank].machine)
        return 0;
    char s = proc_state(p->pid);
    return s == 'T' || s == 't';
}

ai_status_t comm_stall_error(ai_comm *c, const comm_waited *w, int n, double idle)
{
    struct comm_transport *tp = c->tp;
    int suspect = -1, stopped = 0;
    for (int i = 0; i < n && suspect < 0; i++)
        if (comm_peer_stopped(c, w[i].peer))
            suspect = w[i].peer;
    for (int j = 0; j < c->size && suspect < 0; j++)
        if (comm_peer_stopped(c, j))
            suspect = j;
    stopped = suspect >= 0;
    if (suspect < 0 && n > 0)
        suspect = w[0].peer;
    /* The suspect's requests first, so that the first rank the message
     * names is the one blamed. */
    char who[320];
    size_t len = 0;
    who[0] = '\0';
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n && len < sizeof who - 48; i++)
            if ((w[i].peer == suspect) == (pass == 0))
                len += (size_t)snprintf(who + len, sizeof who - len, "%s%s rank %d (host %s)",
                                        len ? ", " : "", w[i].how, w[i].peer,
                                        tp->peers[w[i].peer].host);
    if (suspect >= 0 && suspect < c->size)
        tp->blame = suspect;
    if (stopped)
        return util_fail(AI_ERR_TIMEOUT,
                         "rank %d (host %s, pid %d on this host) is stopped (SIGSTOP or a debugger): "
                         "no progress for %.1f s (timeout %.1f s) waiting on: %s",
                         suspect, tp->peers[suspect].host, (int)tp->peers[suspect].pid, idle,
                         c->timeout_s, who[0] ? who : "nothing");
    return util_fail(AI_ERR_TIMEOUT, "no progress for %.1f s (timeout %.1f s) waiting on: %s; "
                     "a peer is stalled or dead", idle, c->timeout_s, who[0] ? who : "nothing");
}
