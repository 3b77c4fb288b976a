// Writes a ringfence snapshot with known values, for the Python check:
//   st_write_sample OUT.safetensors
// Values follow simple formulas that check_with_python.py recomputes independently.
#include <cstdio>
#include <cstdint>
#include <exception>
#include <vector>

#include "ckpt/safetensors.h"
#include "ckpt/snapshot_meta.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.safetensors\n", argv[0]);
    return 2;
  }
  try {
    std::vector<float> w(4 * 3), b(3);
    std::vector<double> m(5);
    std::vector<int64_t> i64 = {-5, 0, 7, INT64_MIN, INT64_MAX};
    std::vector<uint64_t> u64 = {0, 1, 1ULL << 63, UINT64_MAX};
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f - 2.0f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = 1.0f / static_cast<float>(i + 1);
    for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<double>(i) / 7.0;
    rf::ckpt::SafetensorsWriter wr;
    wr.add("1.weight", rf::ckpt::DType::F32, {3, 4}, w.data());
    wr.add("1.bias", rf::ckpt::DType::F32, {3}, b.data());
    wr.add("optim.1.weight.momentum", rf::ckpt::DType::F64, {5}, m.data());
    wr.add("ints", rf::ckpt::DType::I64, {5}, i64.data());
    wr.add("uints", rf::ckpt::DType::U64, {2, 2}, u64.data());
    rf::ckpt::SnapshotMeta meta;
    meta.model = "sample";
    meta.step = 42;
    meta.generation = 2;
    meta.world_size = 3;
    meta.optimizer = "sgd";
    meta.optimizer_hparams = R"({"lr":0.05,"momentum":0.9})";
    rf::ckpt::write_snapshot_meta(wr, meta);
    wr.write_file(argv[1]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "st_write_sample: %s\n", e.what());
    return 1;
  }
}
