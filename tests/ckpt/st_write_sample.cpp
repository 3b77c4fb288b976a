// The C++ side of the Python interoperability check:
//   st_write_sample OUT.safetensors      writes a ringfence snapshot with known values
//   st_write_sample --check IN.safetensors   reads a file that Python's safetensors wrote
//                                        (check_with_python.py --write) and compares values
// Values follow simple formulas that check_with_python.py recomputes independently.
#include <cstdio>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "ckpt/snapshot_meta.h"

namespace {

struct Sample {
  std::vector<float> w = std::vector<float>(4 * 3), b = std::vector<float>(3);
  std::vector<double> m = std::vector<double>(5);
  std::vector<int64_t> i64 = {-5, 0, 7, INT64_MIN, INT64_MAX};
  std::vector<uint64_t> u64 = {0, 1, 1ULL << 63, UINT64_MAX};
  Sample() {
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f - 2.0f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = 1.0f / static_cast<float>(i + 1);
    for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<double>(i) / 7.0;
  }
};

template <typename T>
int compare(const rf::ckpt::SafetensorsReader& r, const char* name, rf::ckpt::DType dt,
            std::initializer_list<int64_t> shape, const std::vector<T>& want) {
  std::vector<T> got(want.size());
  r.copy_to(name, dt, shape, got.data());  // throws MismatchError on dtype/shape
  if (got != want) {
    std::fprintf(stderr, "MISMATCH: %s: values differ\n", name);
    return 1;
  }
  return 0;
}

int check(const char* path) {
  // Python's file has no ringfence integrity metadata: it is read like any foreign file.
  auto r = rf::ckpt::SafetensorsReader::open(path);
  Sample s;
  int bad = compare(r, "1.weight", rf::ckpt::DType::F32, {3, 4}, s.w) +
            compare(r, "1.bias", rf::ckpt::DType::F32, {3}, s.b) +
            compare(r, "optim.1.weight.momentum", rf::ckpt::DType::F64, {5}, s.m) +
            compare(r, "ints", rf::ckpt::DType::I64, {5}, s.i64) +
            compare(r, "uints", rf::ckpt::DType::U64, {2, 2}, s.u64);
  if (r.tensors().size() != 5) {
    std::fprintf(stderr, "MISMATCH: %zu tensors, expected 5\n", r.tensors().size());
    ++bad;
  }
  auto it = r.metadata().find("writer");
  if (it == r.metadata().end() || it->second != "python") {
    std::fprintf(stderr, "MISMATCH: metadata 'writer' missing or not \"python\"\n");
    ++bad;
  }
  std::printf("C++ reader on the Python-written file: %zu tensors, %d mismatches\n", r.tensors().size(), bad);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--check") {
    try {
      return check(argv[2]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "st_write_sample: %s\n", e.what());
      return 1;
    }
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.safetensors | --check IN.safetensors\n", argv[0]);
    return 2;
  }
  try {
    Sample smp;
    auto& w = smp.w;
    auto& b = smp.b;
    auto& m = smp.m;
    auto& i64 = smp.i64;
    auto& u64 = smp.u64;
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
