/*
 * `autoinfra cluster`: look at a cluster spec as the runtime and the
 * testbed see it.
 *
 *   autoinfra cluster nodes SPEC [--json]
 *   autoinfra cluster bound SPEC --coll C --bytes MIN[:MAX] [--ranks-per-node K] [--json]
 *   autoinfra cluster from-slurm [--slurm-conf F] [--topology F] [--device P=K ...] --nic-gbps G ...
 *   autoinfra cluster to-slurm-topology SPEC
 */
#include "autoinfra.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: autoinfra cluster nodes SPEC [--json]\n"
            "       autoinfra cluster bound SPEC --coll C --bytes MIN[:MAX] [--ranks-per-node K] [--json]\n"
            "       autoinfra cluster from-slurm [--slurm-conf F] [--topology F] --nic-gbps G [options]\n"
            "       autoinfra cluster to-slurm-topology SPEC\n"
            "\n"
            "nodes   every node after overrides: name, group, devices, NIC Gbit/s (count x bw),\n"
            "        rack; then racks with their uplinks. Text lines are\n"
            "          rack NAME UPLINK_GBPS\n"
            "          node NAME GROUP DEVICES NIC_GBPS RACK|- SPEED\n"
            "bound   lower bound (cut argument, docs/runtime.md) on the time of a collective\n"
            "        over one rank per device (or K per node); sizes as in `bench`\n"
            "        (units B, K/KB/KiB, M/MB/MiB, G/GB/GiB, doubling from MIN to MAX).\n"
            "from-slurm  a cluster spec (JSON) from Slurm's files (docs/slurm.md); nodes are\n"
            "        renamed <group>-<index> in the order of their numbers (gpu001 -> gpu-0)\n"
            "%s"
            "to-slurm-topology  a topology.conf: a switch per rack (LinkSpeed: uplink, Mbit/s)\n",
            cli_slurm_usage());
}

static int cmd_from_slurm(int argc, char **argv)
{
    const char *cmd = "autoinfra cluster from-slurm";
    cli_slurm s = {0};
    int rc = 2;
    for (int i = 2; i < argc; i++) {
        int r = cli_slurm_opt(&s, argc, argv, &i, cmd);
        if (r < 0)
            goto out;
        if (r == 0) {
            fprintf(stderr, "%s: unknown option '%s'\n", cmd, argv[i]);
            goto out;
        }
    }
    if (!s.conf_path && !s.topo_path) {
        fprintf(stderr, "%s: give --slurm-conf F, --topology F or both\n", cmd);
        goto out;
    }
    rc = 1;
    if (cli_slurm_read(&s, cmd, 0))
        goto out;
    char *json = NULL;
    if (ai_slurm_cluster_json(&s.src, &json) != AI_OK) {
        fprintf(stderr, "%s: %s\n", cmd, ai_last_error());
        goto out;
    }
    printf("%s\n", json);
    free(json);
    rc = 0;
out:
    cli_slurm_free(&s);
    return rc;
}

static int cmd_to_slurm(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "autoinfra cluster to-slurm-topology: expected one cluster spec\n");
        return 2;
    }
    char *text = NULL;
    if (ai_slurm_topology_conf(argv[2], &text) != AI_OK) {
        fprintf(stderr, "autoinfra cluster to-slurm-topology: %s\n", ai_last_error());
        return 1;
    }
    fputs(text, stdout);
    free(text);
    return 0;
}

static int fail(const char *what)
{
    fprintf(stderr, "autoinfra cluster: %s: %s\n", what, ai_last_error());
    return 1;
}

static int cmd_nodes(const ai_cluster *cl, int json)
{
    int nn = ai_cluster_node_count(cl), nr = ai_cluster_rack_count(cl);
    if (json)
        printf("{\"racks\": [");
    for (int i = 0; i < nr; i++) {
        ai_rack_info r;
        if (ai_cluster_rack(cl, i, &r) != AI_OK)
            return fail("rack");
        if (json)
            printf("%s{\"name\": \"%s\", \"uplink_Gbps\": %g}", i ? ", " : "", r.name, r.uplink_Gbps);
        else
            printf("rack %s %g\n", r.name, r.uplink_Gbps);
    }
    if (json)
        printf("], \"nodes\": [");
    for (int i = 0; i < nn; i++) {
        ai_node_info n;
        if (ai_cluster_node(cl, i, &n) != AI_OK)
            return fail("node");
        if (json)
            printf("%s{\"name\": \"%s\", \"group\": \"%s\", \"devices\": %d, \"nic_Gbps\": %g, "
                   "\"nic_latency_us\": %g, \"rack\": %s%s%s, \"speed\": %g}",
                   i ? ", " : "", n.name, n.group, n.devices, n.nic_Gbps, n.nic_latency_us,
                   n.rack[0] ? "\"" : "", n.rack[0] ? n.rack : "null", n.rack[0] ? "\"" : "",
                   n.speed);
        else
            printf("node %s %s %d %g %s %g\n", n.name, n.group, n.devices, n.nic_Gbps,
                   n.rack[0] ? n.rack : "-", n.speed);
    }
    if (json)
        printf("]}\n");
    return 0;
}

static int cmd_bound(const ai_cluster *cl, int argc, char **argv, int json)
{
    ai_coll coll = AI_ALLREDUCE;
    size_t lo = 0, hi = 0;
    int have_bytes = 0, per_node = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json"))
            continue;
        if (i + 1 >= argc) {
            fprintf(stderr, "autoinfra cluster bound: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--coll")) {
            if (ai_coll_parse(v, &coll) != AI_OK) {
                fprintf(stderr, "autoinfra cluster bound: --coll: %s\n", ai_last_error());
                return 2;
            }
        } else if (!strcmp(a, "--bytes")) {
            char buf[64];
            snprintf(buf, sizeof buf, "%s", v);
            char *colon = strchr(buf, ':');
            if (colon)
                *colon = '\0';
            if (cli_parse_size(buf, NULL, &lo) || cli_parse_size(colon ? colon + 1 : buf, NULL, &hi) || hi < lo) {
                fprintf(stderr, "autoinfra cluster bound: --bytes '%s' is not MIN[:MAX] (e.g. 64K:64M)\n", v);
                return 2;
            }
            have_bytes = 1;
        } else if (!strcmp(a, "--ranks-per-node")) {
            if (cli_parse_int(v, 1, 1024, &per_node)) {
                fprintf(stderr, "autoinfra cluster bound: --ranks-per-node '%s' is not in 1..1024\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "autoinfra cluster bound: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (!have_bytes) {
        fprintf(stderr, "autoinfra cluster bound: --bytes is required\n");
        return 2;
    }
    for (size_t b = lo;; b *= 2) {
        double s;
        if (ai_cluster_coll_bound(cl, coll, b, per_node, &s) != AI_OK)
            return fail("bound");
        if (json)
            printf("{\"coll\": \"%s\", \"bytes\": %zu, \"bound_us\": %.3f}\n", ai_coll_name(coll), b, s * 1e6);
        else
            printf("%-14s %12zu B  bound %12.1f us\n", ai_coll_name(coll), b, s * 1e6);
        if (b >= hi || b == 0)
            break;
    }
    return 0;
}

int cli_cluster_main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    const char *sub = argv[1];
    if (!strcmp(sub, "from-slurm"))
        return cmd_from_slurm(argc, argv);
    if (!strcmp(sub, "to-slurm-topology"))
        return cmd_to_slurm(argc, argv);
    if (strcmp(sub, "nodes") && strcmp(sub, "bound")) {
        fprintf(stderr, "autoinfra cluster: unknown subcommand '%s'\n", sub);
        usage(stderr);
        return 2;
    }
    if (argc < 3) {
        fprintf(stderr, "autoinfra cluster %s: missing the cluster spec (a JSON file)\n", sub);
        return 2;
    }
    int json = 0;
    for (int i = 3; i < argc; i++)
        json |= !strcmp(argv[i], "--json");
    ai_cluster *cl;
    if (ai_cluster_load(argv[2], &cl) != AI_OK) {
        fprintf(stderr, "autoinfra cluster: %s\n", ai_last_error());
        return 1;
    }
    int rc;
    if (!strcmp(sub, "nodes")) {
        rc = 0;
        for (int i = 3; i < argc && !rc; i++)
            if (strcmp(argv[i], "--json")) {
                fprintf(stderr, "autoinfra cluster nodes: unknown option '%s'\n", argv[i]);
                rc = 2;
            }
        if (!rc)
            rc = cmd_nodes(cl, json);
    } else {
        rc = cmd_bound(cl, argc - 3, argv + 3, json);
    }
    ai_cluster_destroy(cl);
    return rc;
}
