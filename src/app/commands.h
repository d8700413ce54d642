/* commands.h: the subcommands main.c dispatches to, each parsing its own flags (exit 2 on a bad one). */
#pragma once

int cmd_bench(int argc, char **argv);

/* cmd_bench_dist.c: `bench allreduce` and `bench scaling`, called by cmd_bench */
int cmd_bench_allreduce(int argc, char **argv);
int cmd_bench_scaling(int argc, char **argv);

/* cmd_export.c: `export --ckpt C --out F.safetensors` */
int cmd_export(int argc, char **argv);
/* cmd_predict.c: `predict --ckpt C | --weights F --data CSV|DIR|FILE --out DIR` */
int cmd_predict(int argc, char **argv);
/* cmd_ckpt.c: `ckpt consolidate`, a sharded checkpoint made one ordinary checkpoint */
int cmd_ckpt(int argc, char **argv);
