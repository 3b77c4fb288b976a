// conv2d on CUDA (ops.h): a chunk of samples at a time, the chunk's columns laid out
// [C*KH*KW, nb*P] (P = OH*OW) so that each pass is one cuBLAS GEMM over the whole chunk:
//   forward:  Y[OC, nb*P] = W[OC, CKK] col, then Y permuted to [nb, OC, P] plus the bias;
//   dW     += Gt[OC, nb*P] col^T, Gt the chunk's output gradient permuted to [OC, nb, P]:
//             K = nb*P is huge and dW small, so it is split along K (gemm_abt_slices) into
//             slices that add up over the chunks, summed into dW once at the end;
//   dX      = col2im(W^T Gt), a gather: one thread per input element sums, in a fixed
//             order, the column entries that read it (no atomics);
//   dbias  += the bias reduction of G (bias_backward, a fixed tree per channel).
// Chunks are sized so the columns stay within kColBytes of scratch.
#include "kernels/cuda/blas.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"

namespace rf::kernels::cuda_ops {

namespace {

constexpr int64_t kColBytes = int64_t{64} << 20;

struct Geo {  // the geometry as plain values for the kernels
  int64_t c, h, w, kh, kw, stride, pad, oh, ow;
};
Geo geo_of(const ConvGeometry& g) {
  return {g.channels, g.height, g.width, g.kernel_h, g.kernel_w, g.stride, g.padding, g.out_h(), g.out_w()};
}

// col[(c*KH + kh)*KW + kw][n*P + oh*OW + ow] = x[n0 + n, c, oh*s - pad + kh, ow*s - pad + kw] or 0.
__global__ void im2col_kernel(Geo g, int64_t nb, const float* x, float* col) {
  const int64_t P = g.oh * g.ow, cols = nb * P, total = g.c * g.kh * g.kw * cols;
  for (int64_t i = thread_index(); i < total; i += grid_step()) {
    const int64_t row = i / cols, j = i % cols;
    const int64_t n = j / P, p = j % P, oh = p / g.ow, ow = p % g.ow;
    const int64_t kw = row % g.kw, kh = (row / g.kw) % g.kh, c = row / (g.kw * g.kh);
    const int64_t ih = oh * g.stride - g.pad + kh, iw = ow * g.stride - g.pad + kw;
    const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
    col[i] = inside ? x[((n * g.c + c) * g.h + ih) * g.w + iw] : 0.0f;
  }
}

// dx[n, c, h, w] (+)= sum over the taps (kh, kw) whose output position reads (h, w), in
// kh-then-kw order, of dcol[(c*KH + kh)*KW + kw][n*P + oh*OW + ow].
__global__ void col2im_kernel(Geo g, int64_t nb, const float* dcol, float* dx, bool acc) {
  const int64_t P = g.oh * g.ow, cols = nb * P, total = nb * g.c * g.h * g.w;
  for (int64_t i = thread_index(); i < total; i += grid_step()) {
    const int64_t w = i % g.w, h = (i / g.w) % g.h, c = (i / (g.w * g.h)) % g.c, n = i / (g.w * g.h * g.c);
    float s = 0.0f;
    for (int64_t kh = 0; kh < g.kh; ++kh) {
      const int64_t th = h + g.pad - kh;
      if (th < 0 || th % g.stride != 0 || th / g.stride >= g.oh) continue;
      const int64_t oh = th / g.stride;
      for (int64_t kw = 0; kw < g.kw; ++kw) {
        const int64_t tw = w + g.pad - kw;
        if (tw < 0 || tw % g.stride != 0 || tw / g.stride >= g.ow) continue;
        const int64_t ow = tw / g.stride;
        s += dcol[((c * g.kh + kh) * g.kw + kw) * cols + n * P + oh * g.ow + ow];
      }
    }
    dx[i] = acc ? dx[i] + s : s;
  }
}

// out[n, oc, p] = y[oc, n*P + p] (+ bias[oc])
__global__ void unpermute_bias_kernel(int64_t nb, int64_t oc_count, int64_t P, const float* y, const float* bias,
                                      float* out) {
  const int64_t total = nb * oc_count * P;
  for (int64_t i = thread_index(); i < total; i += grid_step()) {
    const int64_t p = i % P, oc = (i / P) % oc_count, n = i / (P * oc_count);
    const float v = y[oc * nb * P + n * P + p];
    out[i] = bias ? v + bias[oc] : v;
  }
}

// gt[oc, n*P + p] = g[n, oc, p]
__global__ void permute_kernel(int64_t nb, int64_t oc_count, int64_t P, const float* g, float* gt) {
  const int64_t total = nb * oc_count * P;
  for (int64_t i = thread_index(); i < total; i += grid_step()) {
    const int64_t p = i % P, oc = (i / P) % oc_count, n = i / (P * oc_count);
    gt[oc * nb * P + n * P + p] = g[i];
  }
}

// Samples per chunk: as many as keep the columns within kColBytes (at least one).
int64_t chunk_samples(const ConvShape& s) {
  const int64_t per = s.g.col_rows() * s.g.out_h() * s.g.out_w() * static_cast<int64_t>(sizeof(float));
  const int64_t nb = per > 0 ? kColBytes / per : s.batch;
  return nb < 1 ? 1 : (nb > s.batch ? s.batch : nb);
}

size_t floats(int64_t n) { return sizeof(float) * static_cast<size_t>(n); }

void im2col(const Exec& e, const Geo& g, int64_t nb, const float* x, float* col) {
  im2col_kernel<<<grid_for(g.c * g.kh * g.kw * nb * g.oh * g.ow), kBlock, 0, stream_of(e)>>>(g, nb, x, col);
  RF_CUDA_CHECK_LAUNCH();
}

}  // namespace

void conv2d_forward(const Exec& e, const ConvShape& s, const float* x, const float* w, const float* bias,
                    float* out) {
  const Geo g = geo_of(s.g);
  const int64_t OC = s.out_channels, P = g.oh * g.ow, CKK = s.g.col_rows(), in_plane = g.c * g.h * g.w;
  if (s.batch <= 0 || OC <= 0 || P <= 0) return;
  const int64_t chunk = chunk_samples(s);
  ScratchBlock col(*e.scratch, floats(CKK * chunk * P));
  ScratchBlock y(*e.scratch, floats(OC * chunk * P));
  for (int64_t n0 = 0; n0 < s.batch; n0 += chunk) {
    const int64_t nb = s.batch - n0 < chunk ? s.batch - n0 : chunk;
    im2col(e, g, nb, x + n0 * in_plane, col.get());
    gemm(e, false, false, OC, nb * P, CKK, 1.0f, w, CKK, col.get(), nb * P, 0.0f, y.get(), nb * P);
    unpermute_bias_kernel<<<grid_for(nb * OC * P), kBlock, 0, stream_of(e)>>>(nb, OC, P, y.get(), bias,
                                                                              out + n0 * OC * P);
    RF_CUDA_CHECK_LAUNCH();
  }
}

void conv2d_backward(const Exec& e, const ConvShape& s, const float* x, const float* w, const float* G, float* dX,
                     bool accumulate_dx, float* dW, float* db) {
  const Geo g = geo_of(s.g);
  const int64_t OC = s.out_channels, P = g.oh * g.ow, CKK = s.g.col_rows(), in_plane = g.c * g.h * g.w;
  if (s.batch <= 0 || OC <= 0) return;
  if (db) bias_backward(e, BiasShape{s.batch, OC, P, true}, G, db);
  if ((!dW && !dX) || P <= 0) {
    if (dX && !accumulate_dx) fill(e, s.batch * in_plane, 0.0f, dX);
    return;
  }
  const int64_t chunk = chunk_samples(s);
  ScratchBlock col(*e.scratch, floats(CKK * chunk * P));
  ScratchBlock gt(*e.scratch, floats(OC * chunk * P));
  // The pieces depend on the chunk's K alone (a short last chunk keeps the same count), so
  // every chunk adds into the same slices.
  const int64_t splits = dW ? split_k_pieces(OC, CKK, chunk * P) : 1;
  ScratchBlock slices(*e.scratch, splits > 1 ? floats(splits * OC * CKK) : 0);
  for (int64_t n0 = 0; n0 < s.batch; n0 += chunk) {
    const int64_t nb = s.batch - n0 < chunk ? s.batch - n0 : chunk;
    permute_kernel<<<grid_for(nb * OC * P), kBlock, 0, stream_of(e)>>>(nb, OC, P, G + n0 * OC * P, gt.get());
    RF_CUDA_CHECK_LAUNCH();
    if (dW) {
      im2col(e, g, nb, x + n0 * in_plane, col.get());
      if (splits > 1 && nb * P >= splits)
        gemm_abt_slices(e, OC, CKK, nb * P, splits, gt.get(), nb * P, col.get(), nb * P, n0 == 0 ? 0.0f : 1.0f,
                        slices.get());
      else if (splits > 1)  // a last chunk shorter than the pieces: one GEMM into slice 0
        gemm(e, false, true, OC, CKK, nb * P, 1.0f, gt.get(), nb * P, col.get(), nb * P, n0 == 0 ? 0.0f : 1.0f,
             slices.get(), CKK);
      else
        gemm(e, false, true, OC, CKK, nb * P, 1.0f, gt.get(), nb * P, col.get(), nb * P, 1.0f, dW, CKK);
    }
    if (dX) {  // the columns' gradient reuses the column block (the GEMM above is queued before it)
      gemm(e, true, false, CKK, nb * P, OC, 1.0f, w, CKK, gt.get(), nb * P, 0.0f, col.get(), nb * P);
      col2im_kernel<<<grid_for(nb * in_plane), kBlock, 0, stream_of(e)>>>(g, nb, col.get(), dX + n0 * in_plane,
                                                                          accumulate_dx);
      RF_CUDA_CHECK_LAUNCH();
    }
  }
  if (splits > 1) reduce_slices(e, OC * CKK, splits, slices.get(), true, dW);
}

}  // namespace rf::kernels::cuda_ops
