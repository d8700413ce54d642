/* allreduce.c: `voxscale bench allreduce`: the all-reduce of the ranks present (comm.h: NCCL on GPU ranks, MPI on
 * CPU ranks under mpirun, tcp under `train --gpus`-style launchers, nothing on one process) swept over message sizes,
 * printed in nccl-tests' layout so the figures sit beside theirs:
 *
 *   size count type redop root | out-of-place: time algbw busbw #wrong | in-place: time algbw busbw #wrong
 *
 * time is the mean of --iters back-to-back collectives after --warmup, on rank 0's clock (all ranks start together
 * after a barrier); algbw = size / time; busbw = algbw x 2(n-1)/n (nccl-tests' definition for all-reduce: the
 * bytes each rank's busiest link carries). Our communicator is in-place only, so "out-of-place" is a device copy of
 * the send buffer into the receive buffer followed by the in-place all-reduce, and its time includes the copy.
 * #wrong: every element of a separate run on fresh data is compared with the exact sum; the inputs are small
 * integers, whose float sums are exact at any rank count used here.
 *
 * Then the alpha-beta ring model T(S) = 2(n-1) a + 2(n-1)/n S/B is fitted to the in-place times by least squares
 * (a: latency per ring step, B: the bus bandwidth it implies), the input of bench scaling's projection; the JSON and
 * Markdown land in results/<device>/allreduce_<n>ranks.json|md. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bench/bench.h"
#include "bench/bench_util.h"
#include "bench/scaling_model.h"
#include "core/fsutil.h"
#include "core/util.h"
#include "parallel/comm.h"
#include "parallel/launch.h"
#include "hw/hw.h"
#include "elementwise/elementwise.h"

typedef struct {
    double bytes, time_oop, time_ip; /* seconds */
    long wrong_oop, wrong_ip;
} Row;

static double expected(long i, int world) { return (double)((i % 7) + 1) * world * (world + 1) / 2.0; }

static void fill(const Backend *be, float *dev, float *host, size_t count, int rank) {
    for (size_t i = 0; i < count; i++) host[i] = (float)((long)(i % 7) + 1) * (float)(rank + 1);
    be->copy_to_device(dev, host, count * sizeof(float));
}

static long count_wrong(const Backend *be, const float *dev, float *host, size_t count, int world) {
    be->copy_to_host(host, dev, count * sizeof(float));
    long wrong = 0;
    for (size_t i = 0; i < count; i++) wrong += host[i] != (float)expected((long)i, world);
    return wrong;
}

/* one collective, waited for on the host (on a GPU: the compute stream made to wait, then synchronized) */
static void allreduce_once(Comm *c, const Backend *be, float *buf, size_t count, const char *what) {
    comm_wait(c, comm_allreduce(c, buf, count, COMM_SUM, what), NULL);
    be->synchronize();
}

/* The mean seconds of `iters` collectives (each preceded by the copy when out of place) after `warmup` untimed ones,
 * all ranks starting together after a barrier. */
static double timed(Comm *c, const Backend *be, float *send, float *recv, size_t count, int iters, int warmup,
                    int out_of_place) {
    float *buf = out_of_place ? recv : send;
    for (int i = 0; i < warmup; i++) {
        if (out_of_place) be->elementwise->accumulate(DT_F32, (long)count, send, recv, 0.0f); /* recv = send: the copy */
        allreduce_once(c, be, buf, count, "bench allreduce");
    }
    comm_wait(c, comm_barrier(c, "bench allreduce: barrier"), NULL);
    be->synchronize();
    const double t0 = vx_now();
    for (int i = 0; i < iters; i++) {
        if (out_of_place) be->elementwise->accumulate(DT_F32, (long)count, send, recv, 0.0f);
        allreduce_once(c, be, buf, count, "bench allreduce");
    }
    return (vx_now() - t0) / iters;
}

int bench_allreduce(const BenchAllreduceOptions *o) {
    DistEnv env;
    dist_detect(&env);
    if (env.world > 1) vx_log_rank = env.rank;
    const Backend *be = backend_cpu();
    int on_gpu = 0;
    char why[512] = "";
    if (strcmp(o->device, "cpu") != 0) {
        on_gpu = backend_cuda_init(env.local_rank, why, sizeof why);
        if (on_gpu) be = backend_cuda();
        else if (strcmp(o->device, "cuda") == 0)
            vx_usage_error("bench allreduce --device cuda: no usable GPU (%s); use --device cpu", why);
    }
    Comm *c = comm_open(&env, on_gpu, on_gpu ? NULL : why, 300.0);
    const int n = c->world;
    char slug[400], commit[64], dir[700], path[1024];
    if (c->rank == 0) { /* the results' names, refused before the sweep rather than after */
        HwInfo hw;
        hw_detect(&hw);
        /* the folder every benchmark of this device writes to (the CPU's ISA level in it: bench_cpu_slug) */
        if (on_gpu) bench_slugify(hw.n_gpus ? hw.gpus[0].name : "gpu", slug, sizeof slug);
        else bench_cpu_slug(&hw, slug, sizeof slug);
        snprintf(dir, sizeof dir, "%s/%s", o->results_dir ? o->results_dir : "results", slug);
        for (int k = 0; k < 2; k++) {
            snprintf(path, sizeof path, "allreduce_%dranks.%s", n, k ? "md" : "json");
            bench_claim_result(dir, path, o->overwrite);
        }
    }
    vx_log("# bench allreduce: %d rank%s, %s communicator, %s buffers\n", n, n > 1 ? "s" : "", c->name,
           on_gpu ? "GPU" : "host");
    if (!on_gpu && strcmp(o->device, "cpu") != 0) vx_log("# no usable GPU (%s): CPU ranks\n", why);
    if (n == 1) vx_log("# one process: the single communicator does nothing (the buffer already holds the sum); "
                       "run under mpirun -np N, or on GPUs, for real figures\n");
    const size_t max_count = (size_t)(o->max_bytes / 4) > 2 ? (size_t)(o->max_bytes / 4) : 2;
    float *send = be->alloc(max_count * sizeof(float)), *recv = be->alloc(max_count * sizeof(float));
    float *host = vx_malloc(max_count * sizeof(float));
    Row rows[64];
    int nr = 0;
    vx_log("#\n#                                        out-of-place (copy + in-place)          in-place\n"
           "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
           "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n");
    const double bus = n > 1 ? 2.0 * (n - 1) / n : 0.0;
    double bus_sum = 0;
    for (double bytes = o->min_bytes; bytes <= o->max_bytes && nr < 64; bytes *= o->factor) {
        size_t count = (size_t)(bytes / 4);
        if (count < 2) count = 2;
        Row *r = &rows[nr++];
        r->bytes = (double)count * 4;
        const int iters = o->iters > 0 ? o->iters : (r->bytes >= (64 << 20) ? 5 : 20);
        const int warmup = o->warmup >= 0 ? o->warmup : 2;
        fill(be, send, host, count, c->rank);
        be->elementwise->accumulate(DT_F32, (long)count, send, recv, 0.0f);
        allreduce_once(c, be, recv, count, "bench allreduce: check");
        r->wrong_oop = count_wrong(be, recv, host, count, n);
        r->time_oop = timed(c, be, send, recv, count, iters, warmup, 1);
        fill(be, send, host, count, c->rank);
        allreduce_once(c, be, send, count, "bench allreduce: check");
        r->wrong_ip = count_wrong(be, send, host, count, n);
        r->time_ip = timed(c, be, send, recv, count, iters, warmup, 0);
        const double a0 = r->bytes / r->time_oop * 1e-9, a1 = r->bytes / r->time_ip * 1e-9;
        bus_sum += a1 * bus;
        vx_log("%12.0f  %12zu     float     sum      -1  %7.1f %7.2f %7.2f %6ld  %7.1f %7.2f %7.2f %6ld\n", r->bytes,
               count, r->time_oop * 1e6, a0, a0 * bus, r->wrong_oop, r->time_ip * 1e6, a1, a1 * bus, r->wrong_ip);
        if (r->bytes * o->factor > o->max_bytes * 1.0000001) break;
        if (o->factor <= 1) break;
    }
    long wrong = 0;
    for (int i = 0; i < nr; i++) wrong += rows[i].wrong_oop + rows[i].wrong_ip;
    vx_log("# Out of bounds values : %ld %s\n# Avg bus bandwidth    : %g \n#\n", wrong, wrong ? "FAILED" : "OK",
           nr ? bus_sum / nr : 0.0);

    /* the alpha-beta fit (scaling_model.c) */
    double fit_a = 0, fit_b = 0, fit_err = 0;
    const char *fit_method = "none";
    if (n > 1 && nr >= 2) {
        double sizes[64], secs[64];
        for (int i = 0; i < nr; i++) sizes[i] = rows[i].bytes, secs[i] = rows[i].time_ip;
        const RingFit fit = scaling_fit_ring(n, nr, sizes, secs);
        fit_a = fit.alpha, fit_b = fit.bus, fit_err = fit.worst_error, fit_method = fit.method;
        vx_log("# alpha-beta ring fit (in-place, %s): a = %.2f us per step, B = %.2f GB/s bus bandwidth; worst "
               "error %.0f%% at 1 MiB and above\n", fit_method, fit_a * 1e6, fit_b * 1e-9, 100 * fit_err);
    }

    if (c->rank == 0) {
        bench_build_commit(commit, sizeof commit);
        fs_mkdirs(dir);
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "benchmark", "allreduce");
        cJSON_AddStringToObject(j, "device", slug);
        char isa[420] = "";
        if (!on_gpu) bench_cpu_isa(isa, sizeof isa);
        cJSON_AddStringToObject(j, "isa", isa);
        cJSON_AddStringToObject(j, "communicator", c->name);
        cJSON_AddStringToObject(j, "launcher", env.launcher);
        cJSON_AddNumberToObject(j, "ranks", n);
        cJSON_AddStringToObject(j, "buffers", on_gpu ? "gpu" : "host");
        cJSON_AddStringToObject(j, "commit", commit);
        cJSON_AddStringToObject(j, "out_of_place", "a copy of the send buffer into the receive buffer, then in place");
        cJSON *arr = cJSON_AddArrayToObject(j, "rows");
        for (int i = 0; i < nr; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "bytes", rows[i].bytes);
            cJSON_AddNumberToObject(e, "oop_time_us", rows[i].time_oop * 1e6);
            cJSON_AddNumberToObject(e, "oop_busbw_gbps", rows[i].bytes / rows[i].time_oop * 1e-9 * bus);
            cJSON_AddNumberToObject(e, "oop_wrong", (double)rows[i].wrong_oop);
            cJSON_AddNumberToObject(e, "ip_time_us", rows[i].time_ip * 1e6);
            cJSON_AddNumberToObject(e, "ip_algbw_gbps", rows[i].bytes / rows[i].time_ip * 1e-9);
            cJSON_AddNumberToObject(e, "ip_busbw_gbps", rows[i].bytes / rows[i].time_ip * 1e-9 * bus);
            cJSON_AddNumberToObject(e, "ip_wrong", (double)rows[i].wrong_ip);
            cJSON_AddItemToArray(arr, e);
        }
        cJSON_AddNumberToObject(j, "avg_bus_bandwidth_gbps", nr ? bus_sum / nr : 0.0);
        cJSON_AddNumberToObject(j, "wrong", (double)wrong);
        cJSON *fit = cJSON_AddObjectToObject(j, "fit");
        cJSON_AddNumberToObject(fit, "alpha_us", fit_a * 1e6);
        cJSON_AddNumberToObject(fit, "bus_gbps", fit_b * 1e-9);
        cJSON_AddNumberToObject(fit, "worst_error_1mib_up", fit_err);
        cJSON_AddStringToObject(fit, "method", fit_method);
        snprintf(path, sizeof path, "allreduce_%dranks.json", n);
        bench_write_json(dir, path, j, o->overwrite);
        char md[16384];
        size_t len = (size_t)snprintf(md, sizeof md,
                                      "# bench allreduce: %d ranks, %s communicator, %s buffers, on %s\n\n"
                                      "| size (B) | in-place time (us) | algbw (GB/s) | busbw (GB/s) | #wrong | "
                                      "out-of-place time (us) |\n|---|---|---|---|---|---|\n",
                                      n, c->name, on_gpu ? "GPU" : "host", slug);
        for (int i = 0; i < nr && len < sizeof md - 200; i++)
            len += (size_t)snprintf(md + len, sizeof md - len, "| %.0f | %.1f | %.2f | %.2f | %ld | %.1f |\n",
                                    rows[i].bytes, rows[i].time_ip * 1e6, rows[i].bytes / rows[i].time_ip * 1e-9,
                                    rows[i].bytes / rows[i].time_ip * 1e-9 * bus, rows[i].wrong_ip + rows[i].wrong_oop,
                                    rows[i].time_oop * 1e6);
        len += (size_t)snprintf(md + len, sizeof md - len,
                                "\nAvg bus bandwidth %.3f GB/s. Alpha-beta ring fit (%s): a = %.2f us per step, B = %.2f "
                                "GB/s (worst error %.0f%% from 1 MiB up). Commit %s; launcher %s.\n",
                                nr ? bus_sum / nr : 0.0, fit_method, fit_a * 1e6, fit_b * 1e-9, 100 * fit_err, commit,
                                env.launcher);
        snprintf(path, sizeof path, "allreduce_%dranks.md", n);
        bench_write_text(dir, path, md, len, o->overwrite);
        vx_log("written: %s/allreduce_%dranks.{json,md}\n", dir, n);
    }
    be->release(send);
    be->release(recv);
    free(host);
    comm_close(c);
    return wrong ? VX_EXIT_FAIL : 0;
}
