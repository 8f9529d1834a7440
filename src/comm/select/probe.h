/* Measured links between the hosts of a communicator (probe.c). */
#ifndef AI_COMM_PROBE_H
#define AI_COMM_PROBE_H

#include "comm/comm.h"

typedef struct comm_links {
    int nhosts;
    /* [to * nhosts + from]: what host `to` received from host `from`. */
    double *bw_Bps;
    double *lat_s;
    double *host_Bps;   /* [nhosts] bottleneck bandwidth of each host */
    double *host_lat_s; /* [nhosts] its best latency to any other host */
    double *weighted_frac; /* [nhosts] the weighted allreduce's shards */
} comm_links;

/* Collective: all ranks call it at the same point. Cached unless refresh. */
ai_status_t comm_links_get(ai_comm *c, int refresh, const comm_links **out);
void comm_links_free(comm_links *l);

#endif
