/* commands.h: the subcommands main.c dispatches to, each parsing its own flags (exit 2 on a bad one), and the tables
 * of commands `voxscale --help` lists and "did you mean" searches. */
#pragma once
#include "app/cli.h"

/* cmd_bench.c: `bench step|kernels|allreduce|scaling|gemm`, and their table */
int cmd_bench(int argc, char **argv);
extern const CliCommand BENCH_COMMANDS[];
extern const int N_BENCH_COMMANDS;

/* cmd_bench_dist.c: `bench allreduce` and `bench scaling`, called by cmd_bench */
int cmd_bench_allreduce(int argc, char **argv);
int cmd_bench_scaling(int argc, char **argv);

/* cmd_export.c: `export --ckpt C --out F.safetensors` */
int cmd_export(int argc, char **argv);
/* cmd_predict.c: `predict --ckpt C | --weights F --data CSV|DIR|FILE --out DIR` */
int cmd_predict(int argc, char **argv);
/* cmd_ckpt.c: `ckpt consolidate`, a sharded checkpoint made one ordinary checkpoint */
int cmd_ckpt(int argc, char **argv);
/* cmd_env.c: `env`, this machine, this build and the plan, for a bug report */
int cmd_env(int argc, char **argv);
