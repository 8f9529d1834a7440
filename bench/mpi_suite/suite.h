/*
 * The shared end of the bench/mpi-suite programs: each counts its wrong
 * results with suite_error(), and suite_finish() sums them over the ranks;
 * rank 0 prints " No Errors" (the convention of MPI test suites) or
 * " Found N errors", and every rank exits 0 or 1 accordingly.
 */
#ifndef MPI_SUITE_H
#define MPI_SUITE_H

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static long suite_errors;

static void suite_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void suite_error(const char *fmt, ...)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (suite_errors++ < 10) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "rank %d: ", rank);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
}

__attribute__((unused)) static void *suite_alloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static int suite_finish(void)
{
    int rank = 0;
    long all = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Reduce(&suite_errors, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Bcast(&all, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all)
            printf(" Found %ld errors\n", all);
        else
            printf(" No Errors\n");
        fflush(stdout);
    }
    MPI_Finalize();
    return all ? 1 : 0;
}

#endif
