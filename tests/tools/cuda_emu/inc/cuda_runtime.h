// inc/cuda_runtime.h: a host emulation of the CUDA runtime pieces the kernels use, for run.sh: kernels run as
// std::threads (a pool started once; blockDim of them run a launch's blocks in order), __shared__ is static,
// __syncthreads a barrier. Not a CUDA implementation; just enough to execute this project's kernels on the CPU.
#pragma once
#include <atomic>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <semaphore>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
typedef int cudaError_t;
enum { cudaSuccess = 0 };
typedef void *cudaStream_t;
inline const char *cudaGetErrorName(cudaError_t) { return "?"; }
inline const char *cudaGetErrorString(cudaError_t) { return "?"; }
inline cudaError_t cudaGetLastError() { return 0; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return 0; }
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { memset(p, v, n); return 0; }
enum cudaMemcpyKind { cudaMemcpyDeviceToDevice = 3 };
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) { memmove(d, s, n); return 0; }
// 16-byte aligned like CUDA's float4, so UBSan's alignment check (run.sh) flags a float4 access through a
// pointer that is not 16-byte aligned, as the GPU would fault on it.
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
// the rounded-alone arithmetic intrinsics (never contracted into an FMA on the GPU; -std=c++20 keeps g++ from it)
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
// four 16-bit elements: 8-byte aligned like CUDA's uint2
struct alignas(8) uint2 { unsigned x, y; };
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<> *emu_block_bar;
inline std::barrier<> *emu_warp_bar[32];
inline double emu_warp_buf[32][32];
#define __syncthreads() emu_block_bar->arrive_and_wait()
inline double __shfl_down_sync(unsigned, double v, int o) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    emu_warp_buf[w][l] = v;
    emu_warp_bar[w]->arrive_and_wait();
    const double r = l + o < 32 ? emu_warp_buf[w][l + o] : v;
    emu_warp_bar[w]->arrive_and_wait();
    return r;
}
// __shfl_xor_sync: lane l gets lane (l ^ o)'s value (the butterfly of a warp-wide sum; exact for float and double)
inline double __shfl_xor_sync(unsigned, double v, int o) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    emu_warp_buf[w][l] = v;
    emu_warp_bar[w]->arrive_and_wait();
    const double r = emu_warp_buf[w][l ^ o];
    emu_warp_bar[w]->arrive_and_wait();
    return r;
}
inline float __shfl_xor_sync(unsigned m, float v, int o) { return (float)__shfl_xor_sync(m, (double)v, o); }
inline long emu_launches = 0;
// The emulated threads are a pool of OS threads started once and reused by every launch: starting blockDim new
// threads per launch (each with its ASan shadow stack) was most of this check's run time. Worker t runs thread t of
// every block of a launch; the launch waits until all blockDim of them are done.
struct EmuPool {
    std::vector<std::thread> workers;
    std::vector<std::counting_semaphore<1> *> go;  // one per worker: released when a launch wants it
    std::binary_semaphore done{0};
    std::atomic<unsigned> remaining{0};
    const std::function<void(unsigned)> *job = nullptr;
    void grow(unsigned n) {
        while (workers.size() < n) {
            const unsigned t = (unsigned)workers.size();
            go.push_back(new std::counting_semaphore<1>(0));
            // its own semaphore captured, not go[t] read each time: a later launch's grow() may be reallocating go
            workers.emplace_back([this, t, mine = go.back()] {
                for (;;) {
                    mine->acquire();
                    (*job)(t);
                    if (remaining.fetch_sub(1) == 1) done.release();
                }
            });
            workers.back().detach();  // parked in acquire() until the process exits
        }
    }
    void run(unsigned n, const std::function<void(unsigned)> &f) {
        grow(n);
        job = &f;
        remaining = n;
        for (unsigned t = 0; t < n; t++) go[t]->release();
        done.acquire();
    }
};
inline EmuPool *emu_pool = new EmuPool;  // never destroyed: its threads outlive main's return
template <class F> void emu_launch(dim3 grid, dim3 block, F f) {
    emu_launches++;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.x > 1024 || grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr, "EMU: bad launch config grid (%u,%u,%u) block %u\n", grid.x, grid.y, grid.z, block.x);
        abort();
    }
    gridDim = grid;
    blockDim = block;
    std::barrier<> bar((ptrdiff_t)block.x);
    emu_block_bar = &bar;
    for (unsigned w = 0; w < (block.x + 31) / 32; w++) emu_warp_bar[w] = new std::barrier<>(32);
    const std::function<void(unsigned)> thread_body = [&](unsigned t) {
        threadIdx = dim3(t, 0, 0);
        for (unsigned bz = 0; bz < grid.z; bz++)
            for (unsigned by = 0; by < grid.y; by++)
                for (unsigned bx = 0; bx < grid.x; bx++) {
                    blockIdx = dim3(bx, by, bz);
                    f();
                    bar.arrive_and_wait();
                }
    };
    emu_pool->run(block.x, thread_body);
    for (unsigned w = 0; w < (block.x + 31) / 32; w++) delete emu_warp_bar[w];
}
