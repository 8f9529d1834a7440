/*
 * The peer side of our comparisons: times MPI collectives exactly the way
 * `autoinfra bench` times ours (warm-up, then the mean over iterations of
 * the slowest rank), checks the result, and prints the same JSON lines.
 * Built against whichever MPI's mpicc is on PATH; not part of libautoinfra.
 *
 *   mpi_bench [--coll allreduce|allgather|reduce_scatter|bcast|alltoall]
 *             [--bytes MIN[:MAX]] [--iters N] [--warmup N]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (size_t)v;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *coll = "allreduce";
    size_t lo = 8, hi = 64 << 20;
    int iters = 20, warmup = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--coll")) coll = argv[i + 1];
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bytes")) {
            char *colon = strchr(argv[i + 1], ':');
            lo = parse_size(argv[i + 1]);
            hi = colon ? parse_size(colon + 1) : lo;
        } else {
            if (!rank) fprintf(stderr, "mpi_bench: unknown flag %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    float *in = malloc(hi + 64), *out = malloc(hi + 64);
    for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
        size_t count = bytes / sizeof(float);
        int per = (int)(count / (size_t)size);
        double bus = 1.0;
        for (int w = 0; w < warmup + iters + 1; w++) {
            for (size_t i = 0; i < count; i++)
                in[i] = (float)((rank + (int)i) % 7);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            if (!strcmp(coll, "allreduce")) {
                MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                bus = 2.0 * (size - 1) / size;
            } else if (!strcmp(coll, "allgather")) {
                MPI_Allgather(in, per, MPI_FLOAT, out, per, MPI_FLOAT, MPI_COMM_WORLD);
                bus = (double)(size - 1) / size;
            } else if (!strcmp(coll, "reduce_scatter")) {
                MPI_Reduce_scatter_block(in, out, per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                bus = (double)(size - 1) / size;
            } else if (!strcmp(coll, "broadcast")) {
                MPI_Bcast(in, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
            } else if (!strcmp(coll, "alltoall")) {
                MPI_Alltoall(in, per, MPI_FLOAT, out, per, MPI_FLOAT, MPI_COMM_WORLD);
                bus = (double)(size - 1) / size;
            } else {
                if (!rank) fprintf(stderr, "mpi_bench: unknown collective %s\n", coll);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            double dt = MPI_Wtime() - t0;
            static double sum;
            if (w == warmup) sum = 0;
            if (w >= warmup && w < warmup + iters) sum += dt;
            if (w == warmup + iters) {
                double mean = sum / iters, worst;
                long wrong = 0, total;
                if (!strcmp(coll, "allreduce"))
                    for (size_t i = 0; i < count; i++) {
                        double e = 0;
                        for (int r = 0; r < size; r++) e += (r + (int)i) % 7;
                        wrong += out[i] != (float)e;
                    }
                MPI_Reduce(&mean, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
                MPI_Reduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
                if (!rank)
                    printf("{\"system\":\"ompi\",\"coll\":\"%s\",\"bytes\":%zu,\"ranks\":%d,"
                           "\"time_us\":%.3f,\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,\"wrong\":%ld}\n",
                           coll, bytes, size, worst * 1e6, bytes / worst / 1e9,
                           bytes / worst / 1e9 * bus, total);
            }
        }
        if (bytes == 0) break;
    }
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
