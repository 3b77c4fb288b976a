// conv2d on CUDA (ops.h). A one-channel input (a network's first layer) goes to the direct
// kernels of conv_direct.h where they fit; everything else is im2col + cuBLAS over chunks
// of samples, the columns laid out per pass (conv_index.h) so that no pass permutes the
// larger of its operands:
//   forward: col sample-major ([nb][CKK][P]); one strided-batched GEMM writes
//            out_n[OC, P] = W[OC, CKK] col_n straight into the NCHW output, then the bias
//            is added per output plane;
//   dX:      dcol_n[CKK, P] = W^T G_n, a strided-batched GEMM reading G in NCHW as it is,
//            then col2im, a gather: one thread per input element sums, in a fixed order, the
//            column entries that read it (no atomics);
//   dW    += Gt[OC, nb*P] col^T with col row-major ([CKK][nb*P]): one GEMM whose K runs over
//            every sample and position, so the sum over samples is the GEMM's own, in a
//            fixed order. It needs G as [OC, nb*P]: the chunk of G is permuted, OC*P floats
//            a sample against CKK*P for the columns (the other way, per-sample products
//            summed afterwards, would write and read OC*CKK floats a sample instead). K is
//            huge and dW small, so the GEMM is split along K (gemm_abt_slices) into slices
//            that add up over the chunks and are summed into dW once at the end;
//   dbias += the bias reduction of G (bias_backward, a fixed tree per channel).
// Every index inside a chunk fits int32 (checked before any launch); the kernels do their
// arithmetic in 32 bits and only the chunks' base pointers are offset in 64.
#include <limits>

#include "base/error.h"
#include "base/str.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/conv_direct.h"
#include "kernels/cuda/conv_index.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"

namespace rf::kernels::cuda_ops {

namespace {

// The columns of one chunk, at most. A chunk's working set is its columns plus its slices
// of X, G, the permuted G and dX: for the CNN's second convolution (CKK = 400, P = 196,
// OC = 32) about 1.3 times the columns, so 24 MiB of columns keep the chunk within the
// 50 MB L2 of an H100 or H200 from im2col's writes to the GEMM's reads. Smaller chunks
// mean more launches (about 6 a chunk in the backward pass; 13 chunks for that layer at
// batch 1024). Not measured: the value to try first on a GPU.
constexpr int64_t kColBytes = int64_t{24} << 20;
// The largest chunk total: the grid-stride loops' last step must not overflow int32.
constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max() - kMaxGrid * kBlock;

// Samples per chunk: as many as keep the columns within kColBytes and every index of the
// chunk within int32; at least one (throws when a single sample is already too big).
int64_t chunk_samples(const ConvShape& s) {
  const ConvGeometry& g = s.g;
  const int64_t P = g.out_h() * g.out_w(), col = g.col_rows() * P;
  int64_t per = col;
  for (int64_t v : {g.channels * g.height * g.width, s.out_channels * P})
    if (v > per) per = v;
  if (per > kMaxIndex || g.height + 2 * g.padding > kMaxIndex || g.width + 2 * g.padding > kMaxIndex)
    throw rf::InvalidInput(rf::str("cuda conv2d: one sample's columns or planes (", per,
                                   " floats) exceed the kernels' 32-bit indexing"));
  int64_t nb = col > 0 ? kColBytes / (col * static_cast<int64_t>(sizeof(float))) : s.batch;
  if (nb > kMaxIndex / per) nb = kMaxIndex / per;
  return nb < 1 ? 1 : (nb > s.batch ? s.batch : nb);
}

size_t floats(int64_t n) { return sizeof(float) * static_cast<size_t>(n); }

// ---- kernels ------------------------------------------------------------------------------

// The 32-bit grid-stride loop of this file (totals are below 2^31, checked by the launcher).
__device__ inline int index32() { return static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); }
__device__ inline int step32() { return static_cast<int>(gridDim.x * blockDim.x); }

__global__ void im2col_kernel(Geo32 g, int nb, ColLayout layout, const float* x, float* col) {
  const int total = nb * g.rows() * g.positions();
  for (int i = index32(); i < total; i += step32()) {
    const int src = im2col_source(g, col_entry(g, nb, layout, i));
    col[i] = src >= 0 ? x[src] : 0.0f;
  }
}

__global__ void col2im_kernel(Geo32 g, int nb, const float* dcol, float* dx, bool acc) {
  const int total = nb * g.in_plane();
  for (int i = index32(); i < total; i += step32()) {
    const float s = col2im_sum(g, dcol, i);
    dx[i] = acc ? dx[i] + s : s;
  }
}

// out[plane][p] += bias[plane % oc] over planes (n, oc) of P elements: blockIdx.y walks the
// planes, blockIdx.x a plane's positions, so no element needs a division.
__global__ void add_bias_kernel(int planes, int oc_count, int P, const float* bias, float* out) {
  for (int plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const float b = bias[plane % oc_count];
    float* o = out + static_cast<size_t>(plane) * P;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < P; p += gridDim.x * blockDim.x) o[p] = o[p] + b;
  }
}

// gt[oc, n*P + p] = g[n, oc, p]
__global__ void permute_kernel(int nb, int oc_count, int P, const float* g, float* gt) {
  const int total = nb * oc_count * P;
  for (int i = index32(); i < total; i += step32()) {
    const int p = i % P, q = i / P, oc = q % oc_count, n = q / oc_count;
    gt[(oc * nb + n) * P + p] = g[i];
  }
}

// ---- launchers ----------------------------------------------------------------------------

void im2col(const Exec& e, const Geo32& g, int nb, ColLayout layout, const float* x, float* col) {
  im2col_kernel<<<grid_for(int64_t{nb} * g.rows() * g.positions()), kBlock, 0, stream_of(e)>>>(g, nb, layout, x,
                                                                                                col);
  RF_CUDA_CHECK_LAUNCH();
}

void add_bias(const Exec& e, int planes, int oc_count, int P, const float* bias, float* out) {
  const unsigned x_blocks = static_cast<unsigned>((P + kBlock - 1) / kBlock);
  const unsigned y_blocks = static_cast<unsigned>(planes < 65535 ? planes : 65535);
  add_bias_kernel<<<dim3(x_blocks > 64 ? 64 : x_blocks, y_blocks), kBlock, 0, stream_of(e)>>>(planes, oc_count, P,
                                                                                             bias, out);
  RF_CUDA_CHECK_LAUNCH();
}

// The forward pass by im2col + one strided-batched GEMM per chunk.
void forward_gemm(const Exec& e, const ConvShape& s, const float* x, const float* w, const float* bias, float* out) {
  const Geo32 g = geo32_unchecked(s.g);
  const int64_t chunk = chunk_samples(s);
  const int OC = static_cast<int>(s.out_channels), P = g.positions(), CKK = g.rows();
  ScratchBlock col(*e.scratch, floats(CKK * chunk * P));
  for (int64_t n0 = 0; n0 < s.batch; n0 += chunk) {
    const int nb = static_cast<int>(s.batch - n0 < chunk ? s.batch - n0 : chunk);
    float* out_chunk = out + n0 * OC * P;
    im2col(e, g, nb, ColLayout::kSampleMajor, x + n0 * g.in_plane(), col.get());
    gemm_strided_batched(e, false, false, OC, P, CKK, 1.0f, w, CKK, 0, col.get(), P, int64_t{CKK} * P, 0.0f,
                         out_chunk, P, int64_t{OC} * P, nb);
    if (bias) add_bias(e, nb * OC, OC, P, bias, out_chunk);
  }
}

// dX (when dx is not null) and dW (when dw is not null) by im2col + GEMM, per chunk.
void backward_gemm(const Exec& e, const ConvShape& s, const float* x, const float* w, const float* G, float* dX,
                   bool accumulate_dx, float* dW) {
  const Geo32 g = geo32_unchecked(s.g);
  const int64_t chunk = chunk_samples(s);
  const int OC = static_cast<int>(s.out_channels), P = g.positions(), CKK = g.rows(), in_plane = g.in_plane();
  ScratchBlock col(*e.scratch, floats(CKK * chunk * P));
  ScratchBlock gt(*e.scratch, dW ? floats(OC * chunk * P) : 0);
  // The pieces depend on the chunk's K alone (a short last chunk keeps the same count), so
  // every chunk adds into the same slices.
  const int64_t splits = dW ? split_k_pieces(OC, CKK, chunk * P) : 1;
  ScratchBlock slices(*e.scratch, splits > 1 ? floats(splits * OC * CKK) : 0);
  for (int64_t n0 = 0; n0 < s.batch; n0 += chunk) {
    const int nb = static_cast<int>(s.batch - n0 < chunk ? s.batch - n0 : chunk);
    const int K = nb * P;
    const float* g_chunk = G + n0 * OC * P;
    if (dW) {
      permute_kernel<<<grid_for(int64_t{K} * OC), kBlock, 0, stream_of(e)>>>(nb, OC, P, g_chunk, gt.get());
      RF_CUDA_CHECK_LAUNCH();
      im2col(e, g, nb, ColLayout::kRowMajor, x + n0 * in_plane, col.get());
      if (splits > 1 && K >= splits)
        gemm_abt_slices(e, OC, CKK, K, splits, gt.get(), K, col.get(), K, n0 == 0 ? 0.0f : 1.0f, slices.get());
      else if (splits > 1)  // a last chunk shorter than the pieces: one GEMM into slice 0
        gemm(e, false, true, OC, CKK, K, 1.0f, gt.get(), K, col.get(), K, n0 == 0 ? 0.0f : 1.0f, slices.get(), CKK);
      else
        gemm(e, false, true, OC, CKK, K, 1.0f, gt.get(), K, col.get(), K, 1.0f, dW, CKK);
    }
    if (dX) {  // the columns' gradient reuses the column block (the GEMM above is queued before it)
      gemm_strided_batched(e, true, false, CKK, P, OC, 1.0f, w, CKK, 0, g_chunk, P, int64_t{OC} * P, 0.0f,
                           col.get(), P, int64_t{CKK} * P, nb);
      col2im_kernel<<<grid_for(int64_t{nb} * in_plane), kBlock, 0, stream_of(e)>>>(g, nb, col.get(),
                                                                                    dX + n0 * in_plane, accumulate_dx);
      RF_CUDA_CHECK_LAUNCH();
    }
  }
  if (splits > 1) reduce_slices(e, int64_t{OC} * CKK, splits, slices.get(), true, dW);
}

}  // namespace

void conv2d_forward(const Exec& e, const ConvShape& s, const float* x, const float* w, const float* bias,
                    float* out) {
  if (s.batch <= 0 || s.out_channels <= 0 || s.g.out_h() * s.g.out_w() <= 0) return;
  if (one_channel_forward_fits(s)) return one_channel_forward(e, s, x, w, bias, out);
  forward_gemm(e, s, x, w, bias, out);
}

void conv2d_backward(const Exec& e, const ConvShape& s, const float* x, const float* w, const float* G, float* dX,
                     bool accumulate_dx, float* dW, float* db) {
  if (s.batch <= 0 || s.out_channels <= 0) return;
  if (db) bias_backward(e, BiasShape{s.batch, s.out_channels, s.g.out_h() * s.g.out_w(), true}, G, db);
  if (s.g.out_h() * s.g.out_w() <= 0) {
    if (dX && !accumulate_dx) fill(e, s.batch * s.g.channels * s.g.height * s.g.width, 0.0f, dX);
    return;
  }
  if (dW && one_channel_wgrad_fits(s)) {
    one_channel_weight_grad(e, s, x, G, dW);
    dW = nullptr;
  }
  if (dW || dX) backward_gemm(e, s, x, w, G, dX, accumulate_dx, dW);
}

}  // namespace rf::kernels::cuda_ops
