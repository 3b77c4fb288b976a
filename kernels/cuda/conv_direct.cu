// The one-channel direct convolution (conv_direct.h).
#include "kernels/cuda/conv_direct.h"

#include <limits>

#include "kernels/cuda/conv_index.h"
#include "kernels/cuda/launch.h"

namespace rf::kernels::cuda_ops {

namespace {

// The largest per-sample total: the block-stride loops' last step must not overflow int32.
constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max() - kBlock;
constexpr int64_t kMaxShared = 48 << 10;  // without the opt-in for more dynamic shared memory
// Blocks of the weight gradient, at most: about two per SM of an H100 (132) or H200, few
// enough slices for one warp per weight to sum quickly. A constant, so the summation
// order depends on the batch alone.
constexpr int64_t kWgradGroups = 256;

// ---- kernels ------------------------------------------------------------------------------

__device__ void stage_input(const OneChannel& d, const float* xn, float* xs) {
  for (int i = threadIdx.x; i < d.hs * d.ws; i += blockDim.x) {
    const int r = i / d.ws;
    xs[i] = staged_input(d, xn, r, i - r * d.ws);
  }
}

// Block n: sample n. Shared: the weights [KK][ocq] quads, then the staged plane.
__global__ void __launch_bounds__(kBlock) one_channel_forward_kernel(OneChannel d, const float* x, const float* w,
                                                                     const float* bias, float* out) {
  extern __shared__ Quad shared_quads[];
  const int KK = d.g.kh * d.g.kw, P = d.g.positions();
  Quad* wt = shared_quads;
  float* xs = reinterpret_cast<float*>(wt + KK * d.ocq);
  const float* xn = x + static_cast<size_t>(blockIdx.x) * d.g.h * d.g.w;
  float* on = out + static_cast<size_t>(blockIdx.x) * d.oc * P;
  for (int i = threadIdx.x; i < KK * d.ocq * 4; i += blockDim.x) {
    const int tap = i / (d.ocq * 4), oc = i - tap * d.ocq * 4;
    wt[tap * d.ocq + (oc >> 2)].v[oc & 3] = staged_weight(d, w, tap, oc);
  }
  stage_input(d, xn, xs);
  __syncthreads();
  // Positions fastest, so a warp's stores to each output plane are contiguous.
  const int quad_groups = (d.ocq + 3) / 4;
  for (int it = threadIdx.x; it < P * quad_groups; it += blockDim.x) {
    const int qg = it / P, p = it - qg * P;
    Quad acc[4];
    direct_forward_sums(d, xs, wt, p, qg * 4, acc);
    RF_UNROLL
    for (int j = 0; j < 4; ++j) {
      if (qg * 4 + j >= d.ocq) break;
      RF_UNROLL
      for (int l = 0; l < 4; ++l) {
        const int oc = (qg * 4 + j) * 4 + l;
        if (oc < d.oc) on[oc * P + p] = bias ? acc[j].v[l] + bias[oc] : acc[j].v[l];
      }
    }
  }
}

// Block b: samples [b*per, (b+1)*per) into slices[b][OC][KH][KW]. Thread t works on kernel
// row kh and quad q (item = t % items) for the tile positions t / items, t / items + S, ...
// Shared: the tile's output gradient [tp][ocq] quads, the threads' partials, the tile's
// staged origins, the staged plane.
__global__ void __launch_bounds__(kBlock) one_channel_wgrad_kernel(OneChannel d, int batch, int per, int tp,
                                                                   const float* x, const float* G, float* slices) {
  extern __shared__ Quad shared_quads[];
  const int P = d.g.positions(), KK = d.g.kh * d.g.kw, items = d.g.kh * d.ocq, S = blockDim.x / items;
  Quad* gq = shared_quads;
  Quad* part = gq + tp * d.ocq;
  int* org = reinterpret_cast<int*>(part + blockDim.x);
  float* xs = reinterpret_cast<float*>(org + tp);
  const int tid = threadIdx.x, item = tid % items, sub = tid / items, q = item % d.ocq, kh = item / d.ocq;
  Quad acc[kDirectMaxKw];
  RF_UNROLL
  for (int kw = 0; kw < kDirectMaxKw; ++kw)
    for (int l = 0; l < 4; ++l) acc[kw].v[l] = 0.0f;
  const int n_end = min(batch, (static_cast<int>(blockIdx.x) + 1) * per);
  for (int n = blockIdx.x * per; n < n_end; ++n) {
    const float* gn = G + static_cast<size_t>(n) * d.oc * P;
    __syncthreads();  // the previous sample's last tile is done with xs
    stage_input(d, x + static_cast<size_t>(n) * d.g.h * d.g.w, xs);
    for (int p0 = 0; p0 < P; p0 += tp) {
      const int len = min(tp, P - p0);
      __syncthreads();  // the previous tile is done with gq and org
      for (int i = tid; i < len * d.ocq * 4; i += blockDim.x) {
        const int pp = i / (d.ocq * 4), oc = i - pp * d.ocq * 4;
        gq[pp * d.ocq + (oc >> 2)].v[oc & 3] = oc < d.oc ? gn[oc * P + p0 + pp] : 0.0f;
      }
      for (int pp = tid; pp < len; pp += blockDim.x) org[pp] = staged_origin(d, p0 + pp);
      __syncthreads();
      if (sub < S)
        for (int pp = sub; pp < len; pp += S) direct_wgrad_terms(d, xs, org[pp], kh, gq[pp * d.ocq + q], acc);
    }
  }
  // The partials of one kernel column at a time, summed in thread order.
  float* slice = slices + static_cast<size_t>(blockIdx.x) * d.oc * KK;
  RF_UNROLL
  for (int kw = 0; kw < kDirectMaxKw; ++kw) {
    if (kw >= d.g.kw) break;
    __syncthreads();
    part[tid] = acc[kw];
    __syncthreads();
    if (tid < items) {
      Quad s = part[tid];
      for (int k = 1; k < S; ++k)
        for (int l = 0; l < 4; ++l) s.v[l] += part[k * items + tid].v[l];
      for (int l = 0; l < 4; ++l)
        if (4 * q + l < d.oc) slice[(4 * q + l) * KK + kh * d.g.kw + kw] = s.v[l];
    }
  }
}

// dw[i] += the sum over the slices of slices[k][i]: one warp per weight, lane l summing
// slices l, l + 32, ... in order, then a fixed shuffle tree. No grid-stride loop: count is
// at most 8 * 1024 weights (one_channel_wgrad_fits), 1024 blocks.
__global__ void sum_slices_kernel(int count, int n_slices, const float* slices, float* dw) {
  const int i = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
  if (i >= count) return;  // whole warps
  float v = 0.0f;
  for (int k = lane; k < n_slices; k += 32) v += slices[static_cast<size_t>(k) * count + i];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if (lane == 0) dw[i] = dw[i] + v;
}

// ---- host side ----------------------------------------------------------------------------

// Every per-sample quantity of s within int32, and the batch within half of it (block
// ranges are computed as (b + 1) * per).
bool indexable(const ConvShape& s) {
  const ConvGeometry& g = s.g;
  if (g.channels != 1 || s.batch > kMaxIndex / 2) return false;
  for (int64_t v : {g.height + 2 * g.padding, g.width + 2 * g.padding, g.kernel_h, g.kernel_w, g.stride,
                    s.out_channels + 3})
    if (v > 4096) return false;  // keeps every product below within int64 and the fits small
  return g.height * g.width <= kMaxIndex && s.out_channels * g.out_h() * g.out_w() <= kMaxIndex;
}

OneChannel one_channel_of(const ConvShape& s) {
  return one_channel_unchecked(geo32_unchecked(s.g), static_cast<int>(s.out_channels));
}

int64_t forward_shared(const OneChannel& d) {
  return int64_t{d.g.kh} * d.g.kw * d.ocq * 16 + int64_t{d.hs} * d.ws * 4;
}

int wgrad_tile(const OneChannel& d) {  // positions a tile: its gradient quads within 16 KiB
  const int tp = 1024 / d.ocq < 32 ? 32 : 1024 / d.ocq;
  return tp < d.g.positions() ? tp : d.g.positions();
}

int64_t wgrad_shared(const OneChannel& d) {
  const int64_t tp = wgrad_tile(d);
  return tp * d.ocq * 16 + int64_t{kBlock} * 16 + tp * 4 + int64_t{d.hs} * d.ws * 4;
}

}  // namespace

bool one_channel_forward_fits(const ConvShape& s) {
  return indexable(s) && forward_shared(one_channel_of(s)) <= kMaxShared;
}

bool one_channel_wgrad_fits(const ConvShape& s) {
  if (!indexable(s) || s.g.kernel_w > kDirectMaxKw) return false;
  const OneChannel d = one_channel_of(s);
  return d.g.kh * d.ocq <= kBlock && wgrad_shared(d) <= kMaxShared;
}

void one_channel_forward(const Exec& e, const ConvShape& s, const float* x, const float* w, const float* bias,
                         float* out) {
  const OneChannel d = one_channel_of(s);
  one_channel_forward_kernel<<<static_cast<unsigned>(s.batch), kBlock, static_cast<size_t>(forward_shared(d)),
                               stream_of(e)>>>(d, x, w, bias, out);
  RF_CUDA_CHECK_LAUNCH();
}

void one_channel_weight_grad(const Exec& e, const ConvShape& s, const float* x, const float* g, float* dw) {
  const OneChannel d = one_channel_of(s);
  const int64_t per = (s.batch + kWgradGroups - 1) / kWgradGroups, groups = (s.batch + per - 1) / per;
  const int count = d.oc * d.g.kh * d.g.kw;
  ScratchBlock slices(*e.scratch, sizeof(float) * static_cast<size_t>(groups * count));
  one_channel_wgrad_kernel<<<static_cast<unsigned>(groups), kBlock, static_cast<size_t>(wgrad_shared(d)),
                             stream_of(e)>>>(d, static_cast<int>(s.batch), static_cast<int>(per), wgrad_tile(d), x, g,
                                             slices.get());
  RF_CUDA_CHECK_LAUNCH();
  sum_slices_kernel<<<grid_for(int64_t{count} * 32), kBlock, 0, stream_of(e)>>>(count, static_cast<int>(groups),
                                                                                slices.get(), dw);
  RF_CUDA_CHECK_LAUNCH();
}

}  // namespace rf::kernels::cuda_ops
