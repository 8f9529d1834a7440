#include "support/proc.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double proc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int proc_reap(int pid, double limit_s)
{
    int w = 0;
    double end = proc_now() + limit_s;
    while (waitpid(pid, &w, WNOHANG) == 0) {
        if (proc_now() >= end) {
            kill(pid, SIGKILL);
            waitpid(pid, &w, 0);
            break;
        }
        usleep(5000);
    }
    return w;
}

const char *proc_bin(void)
{
    const char *b = getenv("AUTOINFRA_BIN");
    if (!b || !*b) {
        fprintf(stderr, "AUTOINFRA_BIN is not set (path of the autoinfra binary)\n");
        abort();
    }
    return b;
}

static void slurp(int fd, char *buf, size_t len)
{
    size_t n = 0;
    ssize_t k;
    lseek(fd, 0, SEEK_SET);
    while (n + 1 < len && (k = read(fd, buf + n, len - 1 - n)) > 0)
        n += (size_t)k;
    buf[n] = '\0';
    close(fd);
}

static int temp_fd(void)
{
    char path[] = "/tmp/ai_test_proc.XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0)
        unlink(path);
    return fd;
}

int proc_run(char *const *argv, double limit_s, char *out, size_t outlen, char *err,
             size_t errlen)
{
    int ofd = temp_fd(), efd = temp_fd(), status = 0;
    if (ofd < 0 || efd < 0)
        return 127;
    double end = proc_now() + limit_s;
    pid_t pid = fork();
    if (pid < 0)
        return 127;
    if (pid == 0) {
        setpgid(0, 0);
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        dup2(ofd, 1);
        dup2(efd, 2);
        unsetenv("AUTOINFRA_RANK");
        unsetenv("AUTOINFRA_SIZE");
        unsetenv("AUTOINFRA_ADDR");
        alarm(0);
        execvp(argv[0], argv);
        _exit(127);
    }
    int rc;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            break;
        }
        if (w < 0 && errno != EINTR) {
            rc = 127;
            break;
        }
        if (proc_now() > end) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            rc = PROC_TIMEOUT;
            break;
        }
        usleep(10000);
    }
    slurp(ofd, out, outlen);
    slurp(efd, err, errlen);
    return rc;
}

int proc_on_path(const char *prog)
{
    const char *path = getenv("PATH");
    char buf[PATH_MAX];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        snprintf(buf, sizeof buf, "%.*s/%s", (int)n, path, prog);
        if (access(buf, X_OK) == 0)
            return 1;
        path += n + (path[n] == ':');
    }
    return 0;
}
