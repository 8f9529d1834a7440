/*
 * Cluster specs from and to Slurm (topo/topo_slurm.c): the hostlist
 * grammar, slurm.conf / topology.conf / scontrol output read into the
 * cluster format with file:line errors, and the round trip spec ->
 * topology.conf -> spec. No Slurm needed: fixtures in tests/slurm/fixtures.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include "topo/topo.h"
#include "topo/topo_slurm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *src_dir(void)
{
    const char *d = getenv("AUTOINFRA_SOURCE_DIR");
    return d ? d : ".";
}

static char *slurp(const char *rel)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/tests/slurm/fixtures/%s", src_dir(), rel);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    char *s = calloc(1, 1 << 16);
    assert_non_null(s);
    size_t n = fread(s, 1, (1 << 16) - 1, f);
    fclose(f);
    s[n] = '\0';
    return s;
}

static void expect_names(const char *expr, const char *const *want, int n)
{
    char **names;
    int count;
    assert_int_equal(topo_hostlist_expand(expr, &names, &count), AI_OK);
    assert_int_equal(count, n);
    for (int i = 0; i < n; i++)
        assert_string_equal(names[i], want[i]);
    topo_hostlist_free(names, count);
}

static void test_hostlist_expand(void **state)
{
    (void)state;
    expect_names("gpu[001-003,007],login1", (const char *const[]){"gpu001", "gpu002", "gpu003", "gpu007",
                 "login1"}, 5);
    expect_names("n[8-10]", (const char *const[]){"n8", "n9", "n10"}, 3);
    expect_names("n[098-101]", (const char *const[]){"n098", "n099", "n100", "n101"}, 4);
    expect_names("rack[1-2]n[1-2]", (const char *const[]){"rack1n1", "rack1n2", "rack2n1", "rack2n2"}, 4);
    expect_names("h100-[0-1],a100-3", (const char *const[]){"h100-0", "h100-1", "a100-3"}, 3);
    expect_names("solo", (const char *const[]){"solo"}, 1);

    static const char *const bad[][2] = {
        {"a[3-1]", "runs backwards"}, {"a[1-", "'[' without ']'"}, {"a[]", "empty brackets"},
        {"a,,b", "an empty name"},    {"a[x]", "'x' is not a number"}, {"a]", "']' without '['"},
        {"a[[1]]", "inside brackets"}, {"a b", "has no place"}, {"n[1-2000000]", "more than"},
        {"a[1,]", "an empty number in '[1,]'"}, {"a[,1]", "an empty number"}, {"a[1,,2]", "an empty number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char **names = (char **)1;
        int count = 7;
        assert_int_equal(topo_hostlist_expand(bad[i][0], &names, &count), AI_ERR_INVALID);
        assert_null(names);
        assert_int_equal(count, 0);
        const char *e = ai_last_error();
        if (!strstr(e, bad[i][1]) || !strstr(e, bad[i][0]))
            fail_msg("'%s': error '%s' does not say '%s' and name the expression", bad[i][0], e, bad[i][1]);
    }
}

static void test_hostlist_compress(void **state)
{
    (void)state;
    static const char *const lists[] = {
        "gpu[001-016]", "n[8-10]", "n[08-10]", "n[098-101]", "h100-[0-15],a100-[0-15]",
        "a1,b,c[3-4,7,9-10]", "x[5,3,4]", "node-[0-2],node-x,node-[3-4]", "n[1,01]",
    };
    static const char *const want[] = {
        "gpu[001-016]", "n[8-10]", "n[08-10]", "n[098-101]", "h100-[0-15],a100-[0-15]",
        "a1,b,c[3-4,7,9-10]", "x[5,3-4]", "node-[0-2],node-x,node-[3-4]", "n[1,01]",
    };
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
        char **names, **again;
        int n, m;
        assert_int_equal(topo_hostlist_expand(lists[i], &names, &n), AI_OK);
        char *c = topo_hostlist_compress(names, n);
        assert_non_null(c);
        assert_string_equal(c, want[i]);
        assert_int_equal(topo_hostlist_expand(c, &again, &m), AI_OK);
        assert_int_equal(m, n);
        for (int k = 0; k < n; k++)
            assert_string_equal(again[k], names[k]);
        free(c);
        topo_hostlist_free(names, n);
        topo_hostlist_free(again, m);
    }
}

static topo_cluster *load_text(const char *json)
{
    json_error_t je;
    json_t *doc = json_loads(json, 0, &je);
    assert_non_null(doc);
    topo_cluster *c = NULL;
    assert_int_equal(topo_cluster_from_json(doc, "from-slurm", &c), AI_OK);
    json_decref(doc);
    return c;
}

static const char *rack_of(const topo_cluster *c, const char *node)
{
    for (int i = 0; i < c->nnodes; i++) {
        const topo_node *n = &c->nodes[i];
        char nm[200];
        snprintf(nm, sizeof nm, "%s-%d", c->groups[n->group].name, n->index);
        if (!strcmp(nm, node))
            return n->rack < 0 ? "-" : c->racks[n->rack].name;
    }
    return NULL;
}

static void test_import_fixture(void **state)
{
    (void)state;
    char *conf = slurp("slurm.conf"), *topo = slurp("topology.conf");
    ai_slurm_source s = {.nodes_text = conf, .nodes_label = "slurm.conf", .topology_text = topo,
                         .topology_label = "topology.conf", .partition = "h100", .nic_Gbps = 400,
                         .nics = 8, .intra_GBps = 450, .linkspeed_mbps = 1, .name = "fx"};
    char *json;
    assert_int_equal(ai_slurm_cluster_json(&s, &json), AI_OK);
    topo_cluster *c = load_text(json);
    free(json);
    assert_string_equal(c->name, "fx");
    assert_int_equal(c->ngroups, 1);
    assert_string_equal(c->groups[0].name, "gpu");
    assert_int_equal(c->nnodes, 8);
    assert_int_equal(c->devices, 64);
    assert_string_equal(c->nodes[0].device.name, "H100-SXM5-80GB");
    assert_int_equal(c->nodes[0].nic_count, 8);
    assert_int_equal(c->nracks, 2);
    assert_string_equal(c->racks[0].name, "leaf1");
    assert_true(c->racks[0].uplink_Gbps == 1600);
    assert_string_equal(rack_of(c, "gpu-3"), "leaf1");
    assert_string_equal(rack_of(c, "gpu-4"), "leaf2");
    topo_cluster_free(c);

    /* every node: the A100s from Gres (type a100, 4 each, the socket
     * binding ignored), the login node from --device; leaf3 has no
     * LinkSpeed, so non-blocking: 4 nodes x 1 NIC x 400 */
    const char *const dev[] = {"login*=cpu:1"};
    s.partition = "all";
    s.nics = 1;
    s.devices = dev;
    s.ndevices = 1;
    assert_int_equal(ai_slurm_cluster_json(&s, &json), AI_OK);
    c = load_text(json);
    free(json);
    assert_int_equal(c->ngroups, 3);
    assert_int_equal(c->nnodes, 13);
    assert_string_equal(c->groups[1].name, "amp");
    assert_int_equal(c->groups[1].devices_per_node, 4);
    assert_string_equal(c->nodes[c->groups[1].first_node].device.name, "A100-SXM4-80GB");
    assert_string_equal(rack_of(c, "amp-3"), "leaf3");
    assert_string_equal(rack_of(c, "login-0"), "-");
    assert_true(c->racks[2].uplink_Gbps == 1600);
    topo_cluster_free(c);

    /* a partition and a node list together: their common nodes; a later
     * --device wins over Gres */
    const char *const dev2[] = {"amp*=H100:2", "amp[1-2]=B200:2"};
    s.partition = "small";
    s.nodelist = "gpu002,amp[1-4]";
    s.devices = dev2;
    s.ndevices = 2;
    assert_int_equal(ai_slurm_cluster_json(&s, &json), AI_OK);
    c = load_text(json);
    free(json);
    assert_int_equal(c->nnodes, 3);
    assert_int_equal(c->ngroups, 2);
    assert_string_equal(c->groups[1].name, "amp");
    assert_string_equal(c->nodes[c->groups[1].first_node].device.name, "B200");
    topo_cluster_free(c);
    free(conf);
    free(topo);
}

/* scontrol show node -o / partition -o / topology, as Slurm 22.05 prints them */
static void test_import_scontrol(void **state)
{
    (void)state;
    const char *nodes =
        "NodeName=n0 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 CPULoad=0.10 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=n0 "
        "Version=22.05.8 OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) "
        "RealMemory=1 AllocMem=0 State=IDLE Partitions=main\n"
        "NodeName=n1 Arch=x86_64 CPUTot=2 Gres=(null) OS=Linux #1 SMP State=IDLE Partitions=main\n"
        "NodeName=n2 Arch=x86_64 CPUTot=2 Gres=(null) OS=Linux #1 SMP State=IDLE Partitions=main\n"
        "\n"
        "PartitionName=main AllowGroups=ALL Default=YES Nodes=n[0-2] State=UP TotalCPUs=6\n";
    const char *topo = "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=n[0-1]\n"
                       "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n2\n"
                       "SwitchName=top Level=1 LinkSpeed=1 Nodes=n[0-2] Switches=s[0-1]\n";
    const char *const dev[] = {"n*=cpu"};
    ai_slurm_source s = {.nodes_text = nodes, .nodes_label = "scontrol show node/partition -o",
                         .topology_text = topo, .topology_label = "scontrol show topology",
                         .partition = "main", .devices = dev, .ndevices = 1, .nic_Gbps = 1,
                         .intra_GBps = 5};
    char *json;
    /* scontrol lists the top switch with every node under it: a switch
     * with Switches= is not a rack */
    assert_int_equal(ai_slurm_cluster_json(&s, &json), AI_OK);
    topo_cluster *c = load_text(json);
    free(json);
    assert_int_equal(c->nnodes, 3);
    assert_int_equal(c->groups[0].devices_per_node, 2); /* cpu: CPUTot ranks */
    assert_int_equal(c->nracks, 2);
    assert_string_equal(rack_of(c, "n-1"), "s0");
    assert_string_equal(rack_of(c, "n-2"), "s1");
    assert_true(c->racks[0].uplink_Gbps == 2); /* LinkSpeed not read: non-blocking */
    topo_cluster_free(c);
}

static void expect_error(const ai_slurm_source *s, const char *what)
{
    char *json = NULL;
    ai_status_t st = ai_slurm_cluster_json(s, &json);
    assert_int_not_equal(st, AI_OK);
    assert_null(json);
    if (!strstr(ai_last_error(), what))
        fail_msg("error '%s' does not say '%s'", ai_last_error(), what);
}

static void test_import_errors(void **state)
{
    (void)state;
    const char *good = "NodeName=g[1-2] Gres=gpu:h100:8\nPartitionName=p Nodes=g[1-2]\n";
    ai_slurm_source s = {.nodes_text = good, .nodes_label = "x.conf", .nic_Gbps = 100, .intra_GBps = 450};
    char *json;
    assert_int_equal(ai_slurm_cluster_json(&s, &json), AI_OK);
    free(json);

    s.nodes_text = "# c\nNodeName=g[1-2 Gres=gpu:h100:8\n";
    expect_error(&s, "x.conf:2: NodeName: hostlist 'g[1-2': '[' without ']'");
    s.nodes_text = "NodeName=g1 Gres=gpu:h100:8\nNodeName=g[0-1] Gres=gpu:h100:8\n";
    expect_error(&s, "x.conf:2: node 'g1' is defined again (first at line 1)");
    s.nodes_text = "NodeName=g1 Gres=gpu:h100:4,gpu:a100:4\n";
    expect_error(&s, "x.conf:1: Gres=gpu:h100:4,gpu:a100:4: GPUs of two types");
    s.nodes_text = "NodeName=g1 CPUs=many\n";
    expect_error(&s, "x.conf:1: CPUs=many is not a count");
    s.nodes_text = "NodeName=g1 Gres=gpu:k80:4\n";
    expect_error(&s, "node 'g1': GPU type 'k80' is not a catalog device");
    s.nodes_text = "NodeName=g1 CPUs=4\n";
    expect_error(&s, "node 'g1' has no GPUs");
    s.nodes_text = "NodeName=a[0-1100]x Gres=gpu:h100:1\n";
    expect_error(&s, "node 'a1024x' would start a node group beyond 1024");
    s.nodes_text = good;
    s.partition = "q";
    expect_error(&s, "x.conf: no partition 'q' (there is: p)");
    s.partition = NULL;
    s.nodelist = "g[2-3]";
    expect_error(&s, "node list: node 'g3' is not a known node");
    s.nodelist = NULL;
    s.topology_text = "SwitchName=s1 Nodes=g1\nSwitchName=s2 Nodes=g[1-2]\n";
    s.topology_label = "t.conf";
    expect_error(&s, "t.conf:2: node 'g1' is also under switch 's1' (line 1)");
    s.topology_text = "SwitchName=s1 Nodes=g[1-3]\n";
    expect_error(&s, "t.conf:1: node 'g3' has no NodeName line");
    s.topology_text = "SwitchName=s1 Nodes=g1 LinkSpeed=fast\n";
    expect_error(&s, "t.conf:1: LinkSpeed=fast is not a number");
    s.topology_text = "Switch=s1 Nodes=g1\n";
    expect_error(&s, "t.conf:1: expected SwitchName=");
    s.topology_text = NULL;
    const char *const dev[] = {"g1=Z80"};
    s.devices = dev;
    s.ndevices = 1;
    expect_error(&s, "--device 'g1=Z80': unknown device 'Z80'");
    const char *const dev2[] = {"g1=H100:0"};
    s.devices = dev2;
    expect_error(&s, "--device 'g1=H100:0': the device count '0' is not in 1..4096");
    s.ndevices = 0;
    s.nic_Gbps = 0;
    expect_error(&s, "--nic-gbps");
    s.nic_Gbps = 100;
    s.intra_GBps = 0;
    expect_error(&s, "--intra-GBps");
}

/* spec -> topology.conf -> spec keeps the nodes, the racks and their uplinks */
static void test_round_trip(void **state)
{
    (void)state;
    const char *spec =
        "{\"name\": \"rt\", \"node_groups\": ["
        "{\"name\": \"h100\", \"count\": 6, \"device\": \"H100\", \"devices_per_node\": 8,"
        " \"intra\": {\"bw_GBps\": 450}, \"nic\": {\"count\": 8, \"bw_Gbps\": 400}},"
        "{\"name\": \"a100\", \"count\": 12, \"device\": \"A100\", \"devices_per_node\": 4,"
        " \"intra\": {\"bw_GBps\": 450}, \"nic\": {\"count\": 8, \"bw_Gbps\": 400}}],"
        " \"racks\": [{\"name\": \"r0\", \"nodes\": [\"h100-0\", \"h100-1\", \"h100-2\"], \"uplink_Gbps\": 800},"
        " {\"name\": \"r1\", \"nodes\": [\"h100-3\", \"h100-5\", \"a100-0\", \"a100-10\"], \"uplink_Gbps\": 1200.5},"
        " {\"name\": \"spine-x\", \"nodes\": [\"a100-1\", \"a100-2\", \"a100-3\"], \"uplink_Gbps\": 0.5}]}";
    char path[] = "/tmp/ai-slurm-rt-XXXXXX", path2[] = "/tmp/ai-slurm-rt-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, spec, strlen(spec)), (ssize_t)strlen(spec));
    close(fd);
    char *conf;
    assert_int_equal(ai_slurm_topology_conf(path, &conf), AI_OK);
    assert_non_null(strstr(conf, "SwitchName=r0 Nodes=h100-[0-2] LinkSpeed=800000\n"));
    assert_non_null(strstr(conf, "SwitchName=r1 Nodes=h100-[3,5],a100-[0,10] LinkSpeed=1200500\n"));
    assert_non_null(strstr(conf, "SwitchName=spine-x Nodes=a100-[1-3] LinkSpeed=500\n"));
    assert_non_null(strstr(conf, "SwitchName=core Nodes=h100-4,a100-[4-9,11]\n"));
    assert_non_null(strstr(conf, "SwitchName=top Switches=core,r[0-1],spine-x\n"));

    const char *const dev[] = {"h100-*=H100:8", "a100-*=A100:4"};
    ai_slurm_source s = {.topology_text = conf, .topology_label = "t.conf", .devices = dev,
                         .ndevices = 2, .nic_Gbps = 400, .nics = 8, .intra_GBps = 450,
                         .linkspeed_mbps = 1};
    char *json;
    assert_int_equal(ai_slurm_cluster_json(&s, &json), AI_OK);
    topo_cluster *back = load_text(json);
    free(json);
    topo_cluster *orig;
    assert_int_equal(topo_cluster_load(path, &orig), AI_OK);
    unlink(path);
    assert_int_equal(back->nnodes, orig->nnodes);
    assert_int_equal(back->devices, orig->devices);
    for (int i = 0; i < orig->nnodes; i++) {
        char nm[200];
        snprintf(nm, sizeof nm, "%s-%d", orig->groups[orig->nodes[i].group].name, orig->nodes[i].index);
        const char *r = rack_of(back, nm);
        assert_non_null(r);
        const char *want = orig->nodes[i].rack < 0 ? "core" : orig->racks[orig->nodes[i].rack].name;
        assert_string_equal(r, want);
    }
    for (int r = 0; r < orig->nracks; r++) {
        int k;
        for (k = 0; k < back->nracks; k++)
            if (!strcmp(back->racks[k].name, orig->racks[r].name))
                break;
        assert_true(k < back->nracks);
        assert_true(back->racks[k].uplink_Gbps == orig->racks[r].uplink_Gbps);
        assert_int_equal(back->racks[k].nodes, orig->racks[r].nodes);
    }
    topo_cluster_free(back);
    topo_cluster_free(orig);
    free(conf);

    /* a name Slurm cannot read is refused, naming it */
    const char *bad = "{\"node_groups\": [{\"name\": \"h 100\", \"count\": 1, \"device\": \"H100\","
                      " \"devices_per_node\": 1, \"nic\": {\"bw_Gbps\": 1}}]}";
    fd = mkstemp(path2);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
    close(fd);
    conf = (char *)1;
    assert_int_equal(ai_slurm_topology_conf(path2, &conf), AI_ERR_INVALID);
    assert_null(conf);
    unlink(path2);
    if (!strstr(ai_last_error(), "node_groups[0].name 'h 100': a Slurm node name has no spaces"))
        fail_msg("%s", ai_last_error());
}

/* Run the CLI (AUTOINFRA_BIN) through sh; its stdout and stderr in out,
 * the exit status returned. */
static int run_cli(const char *args, char *out, size_t cap)
{
    const char *bin = getenv("AUTOINFRA_BIN");
    if (!bin)
        bin = "./autoinfra";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s %s 2>&1", src_dir(), bin, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

#define FX "tests/slurm/fixtures"
#define TINY "--model " FX "/tiny-model.json --training " FX "/tiny-training.json"

/* plan --from-slurm from files, and from scontrol (a stand-in script on
 * PATH): the srun line names the partition, the nodes and the tasks per
 * node of the plan */
static void test_plan_from_slurm_cli(void **state)
{
    (void)state;
    static char out[1 << 16];
    int rc = run_cli("plan --from-slurm h100 --slurm-conf " FX "/slurm.conf --topology " FX
                     "/topology.conf --nic-gbps 400 --nics 8 --intra-GBps 450 --model "
                     "examples/h2/model.json --training examples/h2/training.json --program 'python3 t.py'",
                     out, sizeof out);
    if (rc != 0 || !strstr(out, "run it: srun -p h100 -N 8 --ntasks-per-node 8 --autoinfra python3 t.py\n"))
        fail_msg("rc %d:\n%s", rc, out);

    char dir[] = "/tmp/ai-slurm-plan-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char args[2048];
    snprintf(args, sizeof args,
             "plan --from-slurm gpu --nic-gbps 400 --intra-GBps 450 --device 'hx0[3-4]=cpu:8' "
             "--cluster-out %s/c.json --json " TINY, dir);
    char *path = getenv("PATH"), newpath[4096];
    char *old = path ? strdup(path) : NULL;
    snprintf(newpath, sizeof newpath, "%s/" FX ":%s", src_dir(), path ? path : "/usr/bin:/bin");
    setenv("PATH", newpath, 1);
    rc = run_cli(args, out, sizeof out);
    /* the GPU and CPU nodes differ: no --ntasks-per-node, every node */
    if (rc != 0 || !strstr(out, "\"srun\": \"srun -p gpu -N 4 -n "))
        fail_msg("rc %d:\n%s", rc, out);
    char cpath[600];
    snprintf(cpath, sizeof cpath, "%s/c.json", dir);
    topo_cluster *c;
    assert_int_equal(topo_cluster_load(cpath, &c), AI_OK);
    assert_int_equal(c->nnodes, 4);
    assert_int_equal(c->ngroups, 2);
    assert_int_equal(c->nracks, 2);
    assert_string_equal(c->racks[1].name, "sb");
    assert_string_equal(c->nodes[0].device.name, "H100-SXM5-80GB");
    topo_cluster_free(c);
    unlink(cpath);
    rmdir(dir);

    rc = run_cli("plan --from-slurm nope --nic-gbps 1 " TINY, out, sizeof out);
    if (rc != 1 || !strstr(out, "no partition 'nope' (there are: gpu, debug)"))
        fail_msg("rc %d:\n%s", rc, out);
    if (old)
        setenv("PATH", old, 1);
    free(old);

    unsetenv("SLURM_JOB_NODELIST");
    rc = run_cli("plan --from-slurm-job --nic-gbps 1 " TINY, out, sizeof out);
    if (rc != 2 || !strstr(out, "SLURM_JOB_NODELIST is not set"))
        fail_msg("rc %d:\n%s", rc, out);
    rc = run_cli("plan --nic-gbps 1 --cluster examples/h2/cluster.json " TINY, out, sizeof out);
    if (rc != 2 || !strstr(out, "Slurm options need --from-slurm"))
        fail_msg("rc %d:\n%s", rc, out);
    rc = run_cli("plan --from-slurm h100 --slurm-conf " FX "/slurm.conf " TINY, out, sizeof out);
    if (rc != 1 || !strstr(out, "give the NIC rate (--nic-gbps"))
        fail_msg("rc %d:\n%s", rc, out);
    rc = run_cli("cluster from-slurm --slurm-conf " FX "/nonexistent.conf --nic-gbps 1", out, sizeof out);
    if (rc != 1 || !strstr(out, "nonexistent.conf: No such file"))
        fail_msg("rc %d:\n%s", rc, out);
}

/* --overlay F says what the options say; the command line wins; its
 * errors name the file and the key (syntax: line and column) */
static void test_overlay_cli(void **state)
{
    (void)state;
    static char a[1 << 16], b[1 << 16];
    const char *base = "cluster from-slurm --slurm-conf " FX "/slurm.conf --topology " FX "/topology.conf ";
    char args[2048];
    snprintf(args, sizeof args, "%s--overlay " FX "/overlay.json", base);
    assert_int_equal(run_cli(args, a, sizeof a), 0);
    snprintf(args, sizeof args, "%s--name fixture --device 'amp*=A100:4' --device login1=cpu:1 "
             "--nic-gbps 400 --nics 8 --intra-GBps 450 --linkspeed-mbps", base);
    assert_int_equal(run_cli(args, b, sizeof b), 0);
    assert_string_equal(a, b);
    assert_non_null(strstr(a, "\"name\": \"fixture\""));

    snprintf(args, sizeof args, "%s--overlay " FX "/overlay.json --nics 2 --device login1=H100:2", base);
    assert_int_equal(run_cli(args, a, sizeof a), 0);
    assert_null(strstr(a, "\"count\": 8,\n        \"bw_Gbps\""));
    assert_non_null(strstr(a, "\"device\": \"H100-SXM5-80GB\",\n      \"devices_per_node\": 2"));

    static const char *const bad[][2] = {
        {"{\"nic_gbps\": 4}", "nic_gbps: unknown key (known: devices, nic_Gbps"},
        {"{\"devices\": {\"a*\": 4}}", "devices.a*: expected a string \"KIND[:N]\""},
        {"{\"devices\": {\"a*\": \"Z80\"}}", ".json: devices 'a*=Z80': unknown device 'Z80'"},
        {"{\"nics\": 0}", "nics: expected an integer 1..64"},
        {"{\n \"nics\": 2,\n}", ".json:3:1: "},
    };
    char path[] = "/tmp/ai-slurm-ov-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char fpath[64];
        snprintf(fpath, sizeof fpath, "%s.json", path);
        FILE *f = fopen(fpath, "w");
        assert_non_null(f);
        fputs(bad[i][0], f);
        fclose(f);
        snprintf(args, sizeof args, "%s--overlay %s", base, fpath);
        int rc = run_cli(args, a, sizeof a);
        unlink(fpath);
        if (rc != 1 || !strstr(a, bad[i][1]) || !strstr(a, fpath))
            fail_msg("overlay %s: rc %d: %s", bad[i][0], rc, a);
    }
    unlink(path);
}

/* one prefix, two kinds of node: two groups, the second named prefix_2;
 * nodes in the order of their numbers, whatever the lines' order */
static void test_group_names(void **state)
{
    (void)state;
    const char *conf = "NodeName=gpu[10-11] Gres=gpu:h100:8\nNodeName=gpu[1-2] Gres=gpu:a100:8\n"
                       "NodeName=gpu[3,9] Gres=gpu:h100:8\n";
    const char *topo = "SwitchName=s Nodes=gpu[9-10]\n";
    ai_slurm_source s = {.nodes_text = conf, .nodes_label = "x.conf", .topology_text = topo,
                         .topology_label = "t.conf", .nic_Gbps = 100, .intra_GBps = 450};
    char *json;
    assert_int_equal(ai_slurm_cluster_json(&s, &json), AI_OK);
    topo_cluster *c = load_text(json);
    free(json);
    assert_int_equal(c->ngroups, 2);
    assert_string_equal(c->groups[0].name, "gpu");
    assert_int_equal(c->groups[0].count, 4);
    assert_string_equal(c->groups[1].name, "gpu_2");
    assert_string_equal(c->nodes[c->groups[1].first_node].device.name, "A100-SXM4-80GB");
    /* gpu3 gpu9 gpu10 gpu11 -> gpu-0..3: gpu9 and gpu10 are gpu-1 and gpu-2 */
    assert_string_equal(rack_of(c, "gpu-1"), "s");
    assert_string_equal(rack_of(c, "gpu-2"), "s");
    assert_string_equal(rack_of(c, "gpu-0"), "-");
    assert_string_equal(rack_of(c, "gpu-3"), "-");
    topo_cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostlist_expand),  cmocka_unit_test(test_hostlist_compress),
        cmocka_unit_test(test_import_fixture),   cmocka_unit_test(test_import_scontrol),
        cmocka_unit_test(test_import_errors),    cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_plan_from_slurm_cli), cmocka_unit_test(test_overlay_cli),
        cmocka_unit_test(test_group_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
