#pragma once
// Exact gradient sums (exact mode, docs/exact.md): floats to integers under an agreed
// power-of-two scale, summed as integers (associative: any order, any W), rounded to float
// once. Pure functions on host memory, unit-tested on their own (tests/ddp/test_exact.cpp).
//
// A tensor's scale is 2^shift with shift = 62 - headroom - e, where max_abs < 2^e is the
// largest |g| of that tensor over every addend of the sum (every micro-shard of the global
// batch: ranks agree on it exactly, a maximum being the same in any order) and 2^headroom
// >= the number of addends. Then every fixed-point addend has |q| <= 2^(62 - headroom) and
// the whole sum |S| <= 2^62: int64 never overflows. An element keeps every bit of its float
// when it is within 2^-(38 - headroom) of the tensor's largest; smaller ones lose low bits
// (less than one unit in 2^(62 - headroom) of the largest), the same bits on every rank.
#include <cstdint>

namespace rf::ddp::exact {

// ceil(log2(addends)) for addends >= 1: the carries a sum of that many terms may need.
int headroom_bits(int64_t addends);
// The shift for a tensor whose largest |g| over all addends is max_abs (finite, >= 0) in a
// sum of `addends` terms. 0 for max_abs == 0 (every q is 0 whatever the shift).
int fixed_shift(float max_abs, int64_t addends);
// max |x[i]|, or +infinity when any element is NaN or infinite.
float max_abs(const float* x, int64_t n);
// acc[i] += round(x[i] * 2^shift), rounding half to even. |x[i]| must be below the max_abs
// the shift was made for.
void add_fixed(const float* x, int64_t n, int shift, int64_t* acc);
// out[i] = float(acc[i] * 2^-shift / divisor): the sum's value, divided, rounded to float
// (through double: the same bits on every machine with IEEE arithmetic).
void round_fixed(const int64_t* acc, int64_t n, int shift, double divisor, float* out);

}  // namespace rf::ddp::exact
