/*
 * MPI_Allreduce over the predefined integer and floating types and the
 * predefined ops that apply to them (sum, prod, max, min, the logical and
 * bitwise ops, maxloc/minloc on the pair types), in place and not, for a
 * range of counts, on MPI_COMM_WORLD, a duplicate of it, a communicator
 * with the ranks reversed and the halves of a split. Values are small
 * integers, so every result is exact whatever the reduction order.
 */
#include "suite.h"

#include <string.h>

typedef enum { K_INT, K_UINT, K_FLOAT } kind;
typedef struct {
    const char *name;
    MPI_Datatype t;
    size_t size;
    kind k;
} ctype;

static void put(const ctype *c, void *b, int i, long v)
{
    switch (c->k) {
    case K_FLOAT:
        if (c->size == sizeof(float))
            ((float *)b)[i] = (float)v;
        else
            ((double *)b)[i] = (double)v;
        return;
    default:
        if (c->size == 1)
            ((signed char *)b)[i] = (signed char)v;
        else if (c->size == 2)
            ((short *)b)[i] = (short)v;
        else if (c->size == 4)
            ((int *)b)[i] = (int)v;
        else
            ((long long *)b)[i] = v;
    }
}

static long get(const ctype *c, const void *b, int i)
{
    switch (c->k) {
    case K_FLOAT:
        return c->size == sizeof(float) ? (long)((const float *)b)[i] : (long)((const double *)b)[i];
    default:
        if (c->size == 1)
            return c->k == K_UINT ? (long)((const unsigned char *)b)[i] : (long)((const signed char *)b)[i];
        if (c->size == 2)
            return c->k == K_UINT ? (long)((const unsigned short *)b)[i] : (long)((const short *)b)[i];
        if (c->size == 4)
            return c->k == K_UINT ? (long)((const unsigned *)b)[i] : (long)((const int *)b)[i];
        return (long)((const long long *)b)[i];
    }
}

enum { SUM, PROD, MAX, MIN, LAND, LOR, LXOR, BAND, BOR, BXOR, NOPS };
static const char *const opname[NOPS] = {"sum", "prod", "max", "min", "land", "lor", "lxor", "band", "bor", "bxor"};

static MPI_Op handle(int o)
{
    const MPI_Op h[NOPS] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_LAND, MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR};
    return h[o];
}

/* Rank r's element i for op o: products stay small (0..2, few twos). */
static long input(int o, int r, int i)
{
    switch (o) {
    case PROD: return (r + i) % 5 == 0 ? 2 : 1;
    case LAND: case LOR: case LXOR: return (r + i) % 3 == 0;
    case BAND: case BOR: case BXOR: return (long)((r * 5 + i * 3) & 0x3f);
    default: return (long)((r * 7 + i) % 23);
    }
}

static long expect(int o, int n, int i)
{
    long a = input(o, 0, i);
    for (int r = 1; r < n; r++) {
        long v = input(o, r, i);
        switch (o) {
        case SUM: a += v; break;
        case PROD: a *= v; break;
        case MAX: a = v > a ? v : a; break;
        case MIN: a = v < a ? v : a; break;
        case LAND: a = a && v; break;
        case LOR: a = a || v; break;
        case LXOR: a = (a != 0) != (v != 0); break;
        case BAND: a &= v; break;
        case BOR: a |= v; break;
        case BXOR: a ^= v; break;
        }
    }
    return a;
}

static void run(MPI_Comm comm, const char *cname, const ctype *c, int o, int count, int in_place)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    char *in = suite_alloc(c->size * (size_t)count), *out = suite_alloc(c->size * (size_t)count);
    for (int i = 0; i < count; i++) {
        put(c, in, i, input(o, r, i));
        put(c, out, i, 99);
    }
    if (in_place)
        memcpy(out, in, c->size * (size_t)count);
    MPI_Allreduce(in_place ? MPI_IN_PLACE : in, out, count, c->t, handle(o), comm);
    for (int i = 0; i < count; i++) {
        long want = expect(o, n, i), got = get(c, out, i);
        if (o >= LAND && o <= LXOR)
            got = got != 0;
        if (got != want) {
            suite_error("%s %s %s count %d%s [%d] = %ld, expected %ld", cname, c->name, opname[o],
                        count, in_place ? " in place" : "", i, got, want);
            break;
        }
    }
    free(in);
    free(out);
}

static void pairs(MPI_Comm comm, const char *cname)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    struct { int v, at; } a[3], b[3];
    struct { double v; int at; } d[3], e[3];
    for (int i = 0; i < 3; i++) {
        a[i].v = (r * 3 + i) % n;
        a[i].at = r;
        d[i].v = (double)((r + i) % n);
        d[i].at = r;
    }
    MPI_Allreduce(a, b, 3, MPI_2INT, MPI_MAXLOC, comm);
    MPI_Allreduce(d, e, 3, MPI_DOUBLE_INT, MPI_MINLOC, comm);
    for (int i = 0; i < 3; i++) {
        /* maxloc: the largest value, the lowest rank holding it */
        int best = -1, at = -1, low = 1 << 30, lat = -1;
        for (int q = 0; q < n; q++) {
            int v = (q * 3 + i) % n, w = (q + i) % n;
            if (v > best)
                best = v, at = q;
            if (w < low)
                low = w, lat = q;
        }
        if (b[i].v != best || b[i].at != at)
            suite_error("%s maxloc [%d] = (%d, %d), expected (%d, %d)", cname, i, b[i].v, b[i].at, best, at);
        if (e[i].v != low || e[i].at != lat)
            suite_error("%s minloc [%d] = (%g, %d), expected (%d, %d)", cname, i, e[i].v, e[i].at, low, lat);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const ctype types[] = {
        {"int", MPI_INT, sizeof(int), K_INT},
        {"unsigned", MPI_UNSIGNED, sizeof(unsigned), K_UINT},
        {"long long", MPI_LONG_LONG, sizeof(long long), K_INT},
        {"short", MPI_SHORT, sizeof(short), K_INT},
        {"unsigned char", MPI_UNSIGNED_CHAR, 1, K_UINT},
        {"int8_t", MPI_INT8_T, 1, K_INT},
        {"uint16_t", MPI_UINT16_T, 2, K_UINT},
        {"int32_t", MPI_INT32_T, 4, K_INT},
        {"int64_t", MPI_INT64_T, 8, K_INT},
        {"float", MPI_FLOAT, sizeof(float), K_FLOAT},
        {"double", MPI_DOUBLE, sizeof(double), K_FLOAT},
    };
    MPI_Comm dup, rev, half;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    const struct { MPI_Comm c; const char *name; } comms[] = {
        {MPI_COMM_WORLD, "world"}, {dup, "dup"}, {rev, "reversed"}, {half, "half"}};
    const int counts[] = {1, 17, 65536 + 3};
    for (size_t ci = 0; ci < sizeof comms / sizeof comms[0]; ci++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
            for (int o = 0; o < NOPS; o++) {
                if (types[t].k == K_FLOAT && o >= LAND)
                    continue; /* logical and bitwise ops: integer types only */
                for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
                    run(comms[ci].c, comms[ci].name, &types[t], o, counts[k], (int)(k % 2));
            }
    for (size_t ci = 0; ci < sizeof comms / sizeof comms[0]; ci++)
        pairs(comms[ci].c, comms[ci].name);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&rev);
    MPI_Comm_free(&half);
    return suite_finish();
}
