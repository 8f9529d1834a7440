/*
 * Collectives from two threads at once under MPI_THREAD_MULTIPLE: one
 * thread on MPI_COMM_WORLD, the other on a duplicate of it (MPI forbids
 * concurrent collectives on one communicator, not on two), each 300
 * allreduces and broadcasts with checked results. Where the library does
 * not grant MPI_THREAD_MULTIPLE the program checks nothing and says so.
 */
#include "suite.h"

#include <pthread.h>

typedef struct job {
    MPI_Comm comm;
    int salt;
    long errors;
} job;

static void *work(void *arg)
{
    job *j = arg;
    int r, n;
    MPI_Comm_rank(j->comm, &r);
    MPI_Comm_size(j->comm, &n);
    for (int it = 0; it < 300; it++) {
        int v[32], s[32];
        for (int i = 0; i < 32; i++)
            v[i] = r + i + it + j->salt;
        MPI_Allreduce(v, s, 32, MPI_INT, MPI_SUM, j->comm);
        for (int i = 0; i < 32; i++)
            if (s[i] != n * (n - 1) / 2 + n * (i + it + j->salt)) {
                j->errors++;
                break;
            }
        double b[16];
        for (int i = 0; i < 16; i++)
            b[i] = r == it % n ? it * 0.5 + i + j->salt : -1;
        MPI_Bcast(b, 16, MPI_DOUBLE, it % n, j->comm);
        for (int i = 0; i < 16; i++)
            if (b[i] != it * 0.5 + i + j->salt) {
                j->errors++;
                break;
            }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (r == 0)
            printf("MPI_THREAD_MULTIPLE not granted (level %d): nothing checked\n", provided);
        return suite_finish();
    }
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    job a = {MPI_COMM_WORLD, 0, 0}, b = {dup, 1000, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, work, &b) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    work(&a);
    pthread_join(t, NULL);
    if (a.errors)
        suite_error("%ld wrong results on MPI_COMM_WORLD", a.errors);
    if (b.errors)
        suite_error("%ld wrong results on the duplicate", b.errors);
    MPI_Comm_free(&dup);
    return suite_finish();
}
