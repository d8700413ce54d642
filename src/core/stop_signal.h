/* stop_signal.h: SIGINT and SIGTERM, taken by a thread of their own rather than by a handler.
 *
 * Why not a handler: a handler runs on whichever thread the kernel picks, in the middle of what that thread is
 * doing, and oneDNN 2.6.3's JIT sgemm (the CPU backend's GEMM where OpenBLAS's kernels are older than the CPU) keeps
 * data below the stack pointer, where the kernel writes the handler's frame: a SIGINT during a GEMM corrupted the
 * heap ("corrupted size vs. prev_size while consolidating", once SIGFPE) about 1 run in 13 under load. So every
 * thread blocks both signals (stop_signal_start, first thing in main, before any thread exists: OpenMP's, oneDNN's,
 * the loaders', CUDA's and MPI's threads all inherit the mask) and one thread waits for them with sigwaitinfo; no
 * handler ever interrupts computing code. (A thread started before main, OpenBLAS's pool, gets a handler that only
 * passes the signal on to that thread.)
 *
 * What a signal does: while no command phase has said it polls (stop_signal_catch), the process ends by it as it
 * would without us (the default action: killed by the signal). While a phase polls, it is a request: the first
 * one's number is kept (stop_signal_requested) and the hooks run on the signal thread; the phase stops at its next
 * safe point (the training loop after its step, with a checkpoint; validation, the data checks, predict and bench
 * between their items), exit 130. */
#pragma once

/* Blocks SIGINT and SIGTERM in this thread (and so in every thread started after), starts the thread that takes
 * them. Call once, first in main. */
void stop_signal_start(void);
/* on 1: signals from here on are requests the command polls; 0: they end the process again (the default). */
void stop_signal_catch(int on);
/* The first signal asked for since stop_signal_catch(1) (SIGINT or SIGTERM), 0 when none. */
int stop_signal_requested(void);
/* Where a stop was asked: prints "voxscale: stopped by SIGINT during <during>; <after>" and exits 130. */
void stop_signal_honour(const char *during, const char *after);
/* A function the signal thread runs at every signal taken while catching (not on a handler's stack: any call is
 * fine, but the main thread may hold locks): the event files' flush, a rank's line under mpirun. At most 4. */
typedef void (*StopHook)(int sig);
void stop_signal_hook(StopHook fn);
/* In a forked child before exec: SIGINT and SIGTERM unblocked again (an exec'd program keeps the mask, and mpirun,
 * say, must take them as usual). */
void stop_signal_child_before_exec(void);
/* "SIGINT", "SIGTERM" */
const char *stop_signal_name(int sig);
