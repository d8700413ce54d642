/* backend.h: the op table the training loop calls. One instance per backend ("cpu" and "cuda"); the model and
 * the loop only ever see a `const Backend *`, never which one runs. Pointers passed to ops are backend memory
 * (host memory for the CPU backend, device memory for CUDA), allocated through the table's alloc.
 * On CUDA every op is enqueued on one compute stream and returns before the GPU has finished: results written to
 * backend memory (including the single floats of recon_loss, latent_forward and sumsq) are read back with
 * copy_to_host, which waits for the work enqueued before it, or with copy_to_host_async and an event.
 * Storage types: activations and their gradients are untyped pointers whose element type (dtype.h) the op is told,
 * in its shape (conv3d, groupnorm, latent) or as its first argument; parameters, parameter gradients, optimizer
 * state, statistics, noise and losses are float32. `supports` says which (op, dtype) pairs a backend runs: the CPU
 * backend is the float32 reference (and casts between any types); CUDA runs float32, bfloat16 and float16. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/device_options.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Timer slots of timer_mark / timer_elapsed_ms. */
#define BACKEND_TIMER_SLOTS 16

/* The ops: each folder of kernels/ defines a sub-table (its header's `<Name>Ops`) whose first member is an OpHead;
 * ops.def lists them, and the Backend holds one pointer per op (be->conv3d->forward(...)). A caller includes the
 * header of each op it calls; the Backend itself needs only their names. */
/* One id per registered op (OPID_conv3d, ...), for the tables that iterate over ops. */
typedef enum {
#define VX_OP(name, Type) OPID_##name,
#include "backend/ops.def"
#undef VX_OP
    OPID_COUNT
} OpId;

#define VX_OP(name, Type) struct Type;
#include "backend/ops.def"
#undef VX_OP

typedef struct Backend {
    const char *name; /* "cpu" or "cuda" */

    /* memory */
    void *(*alloc)(size_t bytes);
    void (*release)(void *ptr);
    void (*copy_to_device)(void *dst, const void *src, size_t bytes);
    void (*copy_to_host)(void *dst, const void *src, size_t bytes);
    void (*zero)(void *ptr, size_t bytes);
    void (*synchronize)(void); /* waits for all enqueued work (compute and uploads) */
    /* A small host-to-device copy enqueued on the compute stream, in order with the ops: the host buffer may be
     * reused as soon as it returns (CUDA stages pageable memory before returning), and the host does not wait for
     * the GPU. For the per-step values a step reads from device memory (the learning rate, the noise offset). */
    void (*write_async)(void *dst, const void *src, size_t bytes);
    /* A device-to-host copy enqueued on the compute stream after the work before it, into host memory from
     * alloc_host; it has landed when an event recorded after it has completed (event_synchronize). */
    void (*copy_to_host_async)(void *dst_host, const void *src, size_t bytes);

    /* Host staging buffers (the data loader's ring slots): pinned (page-locked) memory on CUDA, so uploads from
     * them are true asynchronous DMA; 64-byte aligned malloc on the CPU. Released with release_host only. */
    void *(*alloc_host)(size_t bytes);
    void (*release_host)(void *ptr);
    /* Asynchronous upload of host memory to backend memory. CUDA: the copy runs on a separate copy stream; it
     * starts once `after` (an event recorded on the compute stream with event_record) has completed, or, when after
     * is NULL, after all the compute work enqueued before this call (so dst may still be in use by it); compute
     * work enqueued after this call waits for the copy (so it sees the data). With `after` the last reader of dst,
     * a double-buffered upload overlaps the compute still running. The host buffer must stay untouched until
     * upload_wait returns. Call it from the thread that enqueues the ops: "the compute work enqueued before" is
     * that thread's, and the two events it reuses are not locked. CPU: memcpy. */
    void (*upload_async)(void *dst_device, const void *src_host, size_t bytes, void *after);
    /* Blocks the host until the last upload_async has finished reading its host buffer. CPU: nothing to wait for. */
    void (*upload_wait)(void);

    /* Step timing: timer_mark records a point on the compute stream's timeline in slot 0..BACKEND_TIMER_SLOTS-1
     * (CUDA: an event; CPU: the wall clock); timer_elapsed_ms waits until to_slot's point has been reached and
     * returns the milliseconds between the two marks. Both slots must have been marked. */
    void (*timer_mark)(int slot);
    double (*timer_elapsed_ms)(int from_slot, int to_slot);

    /* Ordering across streams (the NCCL communicator's stream, parallel/comm_nccl.cu): event_record records, on the
     * compute stream, the point after the work enqueued so far; event_wait makes the compute stream's later work
     * wait for an event recorded on another stream (no host block); event_synchronize blocks the host until the
     * event has completed. CPU: everything runs in program order, so an event is the wall-clock time of its record
     * and the waits do nothing. timed_event_create makes an event event_elapsed_ms can measure between (CUDA: with
     * timing, which makes waits on it slightly dearer; the others are created without): what per-layer timing
     * (bench step) records around each layer. */
    void *(*event_create)(void);
    void *(*timed_event_create)(void);
    void (*event_destroy)(void *ev);
    void (*event_record)(void *ev);
    void (*event_wait)(void *ev);
    void (*event_synchronize)(void *ev);
    double (*event_elapsed_ms)(void *from, void *to); /* both timed and recorded; waits for `to` */

    /* CUDA Graphs (--compile): graph_capture_begin starts recording the ops enqueued on the compute stream instead
     * of running them (no host synchronisation may happen until graph_capture_end: no copy_to_host, no
     * timer_elapsed_ms, no synchronize); graph_capture_end returns the instantiated graph, or NULL with the
     * reason in why (the capture is then abandoned and nothing was run); graph_launch enqueues one replay on the
     * compute stream. NULL on a backend without graphs (the CPU): the caller runs the ops directly. */
    void (*graph_capture_begin)(void);
    void *(*graph_capture_end)(char *why, size_t why_len);
    void (*graph_launch)(void *graph);
    void (*graph_destroy)(void *graph);

    /* Bytes currently allocated through alloc (not alloc_host, not the backend's internal buffers), and the
     * most there have been at once since the process started. */
    size_t (*bytes_in_use)(void);
    size_t (*peak_bytes)(void);

    /* the ops (ops.def): see each op's header for shapes and semantics */
#define VX_OP(name, Type) const struct Type *name;
#include "backend/ops.def"
#undef VX_OP
} Backend;

/* The sub-table of op `id` seen through its head, and whether the backend runs its function fn with type dt. */
const OpHead *backend_op(const Backend *be, OpId id);
int backend_supports(const Backend *be, OpId id, int fn, DType dt);

/* The float32 CPU backend (OpenMP + BLAS). Always available. */
const Backend *backend_cpu(void);
/* Sets the CPU backend's OpenMP thread count (0 = all cores). */
void backend_cpu_set_threads(int threads);

/* ---- CUDA backend (float32, bfloat16, float16; cuDNN convolutions, own kernels) ----------------------------
 * In a build without CUDA (make CUDA=0) backend_cuda_init always returns 0 with the reason and backend_cuda
 * returns NULL. */
/* Sets the CUDA backend's options; the defaults are {deterministic 0, allow_tf32 1} (PyTorch's for
 * convolutions). Call it before building the model: the convolution algorithms, and so the workspace sizes
 * that conv3d_workspace_bytes reports to the planner, are chosen under the options in force when a shape is
 * first seen (a shape is cached per options, so a later change plans new shapes and leaves old ones alone).
 * May be called before backend_cuda_init. */
void backend_cuda_set_options(const BackendOptions *o);
/* Makes GPU `device` the backend's device: sets it, creates the compute and copy streams, the cuDNN handle,
 * the timer events and the reduction scratch buffer. Returns 1 when the GPU is usable, else 0 with a one-line
 * reason in reason[reason_len] (no driver, no such device, compute capability below 8.0, cuDNN failed to
 * initialise, ...). Calling it again after success returns 1 and changes nothing. Registers
 * backend_cuda_shutdown with atexit. The ops are to be called from the thread that called init (the device is
 * per host thread); alloc/release and alloc_host/release_host select the device themselves and may be called
 * from any thread (the data loader's); upload_async/upload_wait belong to the ops' thread (see above). */
int backend_cuda_init(int device, char *reason, size_t reason_len);
/* The CUDA op table; NULL before a successful backend_cuda_init. */
const Backend *backend_cuda(void);
/* Frees everything the backend holds (streams, events, cuDNN handle and descriptors, scratch, and any alloc'd
 * buffer still live), so leak checkers stay quiet. Safe to call more than once and without init; after it,
 * backend_cuda() is NULL until the next init, and release / release_host of older buffers do nothing more. */
void backend_cuda_shutdown(void);

#ifdef __cplusplus
}
#endif
