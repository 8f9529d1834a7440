/*
 * Network cost model for the collective runtime: a cluster of hosts, each
 * with a full-duplex NIC on a non-blocking switch, optionally grouped in
 * racks whose uplinks to the core have a capacity of their own; ranks on
 * one host talk through memory.
 *
 * Two uses:
 *  - lower bounds (model_net_bound): cut arguments. Every rank's input
 *    influences every output of an allreduce, so at least n bytes must
 *    cross, each way, the boundary of any set of ranks that is not
 *    everybody (one host; one rack); and the total traffic leaving hosts is
 *    at least 2 (h-1) n (Patarasuk and Yuan, "Bandwidth optimal all-reduce
 *    algorithms for clusters of workstations", JPDC 2009), which gives the
 *    familiar 2 (p-1)/p n / B on a uniform cluster. The other collectives
 *    get the analogous per-cut volumes.
 *  - algorithm costs (model_net_algo_time): each algorithm is written as
 *    its schedule of steps, each step a set of concurrent flows; a step
 *    costs its largest latency plus, over every resource (host NIC out, NIC
 *    in, rack uplink out, in, host memory), the bytes that cross it divided
 *    by its capacity (alpha-beta with sharing, the Hockney model extended
 *    to contention). Steps follow one another.
 */
#ifndef AI_MODEL_NET_H
#define AI_MODEL_NET_H

#include "util/util.h"

typedef struct model_net {
    int nranks;
    int nhosts;
    int nracks;
    int *host_of;    /* [nranks] rank -> host */
    double *nic_Bps; /* [nhosts] bytes/s, each direction */
    double *lat_s;   /* [nhosts] one-way latency of the host's NIC path */
    int *rack_of;    /* [nhosts] rack or -1 (on the core) */
    double *up_Bps;  /* [nracks] rack uplink, each direction */
    double mem_Bps;  /* copy bandwidth within a host */
    double mem_lat_s;
} model_net;

/* Allocate the arrays for the given sizes (zeroed; rack_of -1). */
ai_status_t model_net_alloc(model_net *n, int nranks, int nhosts, int nracks);
void model_net_free(model_net *n);

struct topo_cluster;
/* The network of a cluster spec with `ranks_per_node` ranks on every node
 * (0: one per device). NICs: count x bw; racks: uplinks. */
ai_status_t model_net_from_cluster(const struct topo_cluster *cl, int ranks_per_node, model_net *out);

/* Lower bound in seconds for `bytes` (nccl-tests convention: the vector for
 * allreduce/broadcast/reduce, the gathered or scattered total for
 * allgather/reduce_scatter, the send buffer for alltoall), root 0. */
double model_net_bound(const model_net *n, ai_coll coll, double bytes);

/* Predicted seconds of one of the runtime's algorithms (by name, as in
 * ai_coll_algo_name); INFINITY when the model does not know it. */
double model_net_algo_time(const model_net *n, ai_coll coll, const char *algo, double bytes);

/* Shard sizes (fractions summing to 1, one per host) for the weighted
 * reduce-scatter + allgather allreduce over hosts: minimises
 * max_h (1 + (h-2) s_h) / B_h, giving slow hosts small shards. Rates
 * within MODEL_NET_SAME_RATE of each other count as one (probe noise). */
#define MODEL_NET_SAME_RATE 1.25
void model_net_weighted_shards(int nhosts, const double *bw, double *frac_out);

/* Pipeline depth of the weighted allreduce (runtime and model alike):
 * segments of `seg_bytes` (0: bytes / 32, at least 16 KiB), between 1 and
 * 32. Many segments keep both directions of every NIC busy from small sizes
 * on; each costs 2 (h-1) messages per leader, a few microseconds. */
int model_net_weighted_segments(double bytes, size_t seg_bytes);

#endif
