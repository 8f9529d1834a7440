#include "autoinfra.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *summary;
} commands[] = {
    {"launch", cli_launch_main, "start N local ranks of a command with the runtime's environment"},
    {"bench", cli_bench_main, "measure collectives (nccl-tests style), run under launch/mpirun/srun"},
    {"plan", cli_plan_main, "find the parallel plan, placement and batch size for a training job"},
    {"cluster", cli_cluster_main, "a cluster spec's nodes and racks, and collective lower bounds on it"},
    {"kb", cli_kb_main, "what the learner knows: show, export/import, rules for Open MPI and MPICH"},
    {"env", cli_env_main, "every AUTOINFRA_* setting: value in effect, source, range, doc"},
    {"profile", cli_profile_main, "the training job's measured compute in the knowledge base: import, show"},
    {"sim", cli_sim_main, "simulate whole training runs under failures: checkpoint policy, recovery, ETTR"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: autoinfra <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'autoinfra <command> --help' describes each command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("autoinfra %d.%d\n", AI_VERSION_MAJOR, AI_VERSION_MINOR);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "autoinfra: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
