/* The `autoinfra` command: one file per subcommand, each uses only
 * the public header (plus this one). Each returns a process exit status:
 * 0 success, 1 runtime failure, 2 usage error. */
#ifndef AI_CLI_H
#define AI_CLI_H

int cli_launch_main(int argc, char **argv);
int cli_bench_main(int argc, char **argv);
int cli_plan_main(int argc, char **argv);
int cli_cluster_main(int argc, char **argv);

#endif
