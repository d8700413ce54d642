/* upconv_phase.h: nearest x2 upsampling followed by a 3x3x3 convolution (stride 1, padding 1: the autoencoder's
 * decoder.up.L.upsample), computed at the input's resolution. Output voxel 2i+a (a = 0 or 1, per axis) of the
 * upsampled grid sees input voxels i-1 and i when a = 0 (with the kernel's tap 0, then taps 1+2 summed) and i and i+1
 * when a = 1 (taps 0+1, then tap 2). So each of the 8 phases (a, e, f) along (d, h, w) is a 2x2x2 convolution of the
 * input with summed weights, and all 8 are one convolution (kernel 2, padding 1, stride 1, 8*c_out outputs: phase
 * p = 4a + 2e + f owns outputs [p*c_out, (p+1)*c_out)) whose output z [n][d+1][h+1][w+1][8*c_out] is then shuffled:
 *   y[b][2i+a][2j+e][2k+f][o] = z[b][i+a][j+e][k+f][p*c_out + o]
 * 8 taps for each of 8 phases at the input's resolution against 27 taps at 8x the voxels: 3.4x fewer FLOPs, the
 * same function (up to the order of the float32 sums). The op's four parts (the convolution is conv3d's):
 *   weights   w [c_out][3][3][3][c_in] (float32 master) -> pw [8*c_out][2][2][2][c_in] (storage type), per phase
 *             and tap the sum of the taps it covers, in a fixed order (d's taps outer, then h's, then w's); the bias
 *             b [c_out] (may be NULL) -> pb [8*c_out] (float32), b repeated per phase
 *   fold      the transpose of weights: dw = beta*dw + for each 3x3x3 tap the sum of the phase taps that covered it
 *             (8 terms, phases in order); db = beta*db + the sum over phases of dpb (all float32)
 *   shuffle   z -> y as above (storage type)
 *   unshuffle dy -> dz, the shuffle's transpose: each z element the dy element it was shuffled to, 0 for the ones
 *             no phase uses (the first plane of a = 1's and the last of a = 0's, per axis); overwrites dz
 * CPU: the float32 reference; CUDA: every storage type, float32 math. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"
#include "common/vx_hd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n, d, h, w; /* the input's (before upsampling) */
    int c_in, c_out; /* the 3x3x3 convolution's */
    DType dtype;     /* storage of pw, z, y, dy, dz */
} UpconvPhaseShape;

/* Counts: the 3x3x3 weights, the phase weights, z (the phase convolution's output), y (the upsampled output). */
long upconv_phase_weight_count(const UpconvPhaseShape *s);
long upconv_phase_phase_weight_count(const UpconvPhaseShape *s);
long upconv_phase_z_count(const UpconvPhaseShape *s);
long upconv_phase_y_count(const UpconvPhaseShape *s);

/* The op's sub-table (kernels/backend/ops.def): be->upconv_phase->... */
enum { UPCONV_PHASE_WEIGHTS, UPCONV_PHASE_FOLD, UPCONV_PHASE_SHUFFLE, UPCONV_PHASE_UNSHUFFLE }; /* for supports() */
typedef struct UpconvPhaseOps {
    OpHead head;
    void (*weights)(const UpconvPhaseShape *s, const float *w, const float *b, void *pw, float *pb);
    void (*fold)(const UpconvPhaseShape *s, const float *dpw, const float *dpb, float *dw, float *db, float beta);
    void (*shuffle)(const UpconvPhaseShape *s, const void *z, void *y);
    void (*unshuffle)(const UpconvPhaseShape *s, const void *dy, void *dz);
} UpconvPhaseOps;
extern const UpconvPhaseOps upconv_phase_ops_cpu;
extern const UpconvPhaseOps upconv_phase_ops_cuda; /* CUDA builds only */

/* Which 3x3x3 taps phase a's tap t covers along one axis: taps lo..hi of {0, 1, 2} (a = 0: t 0 -> {0}, t 1 -> {1, 2};
 * a = 1: t 0 -> {0, 1}, t 1 -> {2}); and the tap of phase a that covers 3x3x3 tap k (the fold's). Shared by the CPU,
 * CUDA and reference code so that all sum in one order. */
VX_HD int upconv_phase_tap_lo(int a, int t) { return a == 0 ? (t == 0 ? 0 : 1) : (t == 0 ? 0 : 2); }
VX_HD int upconv_phase_tap_hi(int a, int t) { return a == 0 ? (t == 0 ? 0 : 2) : (t == 0 ? 1 : 2); }
VX_HD int upconv_phase_tap_of(int a, int k) { return a == 0 ? k > 0 : k > 1; }

#ifdef __cplusplus
}
#endif
