#pragma once
// The harness of the oracle tests (oracle_checks.h): a table under test and the memory its
// pointers live in, random inputs, and Case — one call of one entry on the reference and
// on the table under test, every buffer compared afterwards (inputs bitwise, outputs
// within a tolerance), or, in a determinism run, two calls on the table compared bitwise.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/op_table.h"
#include "kernels/reference/table.h"

namespace rf::kernels::oracle {

// ---- the tables under test and the memory their pointers live in ----

class TableMemory {
 public:
  virtual ~TableMemory() = default;
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;    // host -> table
  virtual void download(void* dst, const void* src, size_t bytes) = 0;  // table -> host, after all work
  virtual Exec exec() = 0;
  virtual long outstanding_scratch() const = 0;  // blocks got and not yet put
};

// Host memory, 64-byte aligned; the scratch counts its blocks so a leak shows.
class HostMemory final : public TableMemory, public Scratch {
 public:
  void* alloc(size_t bytes) override { return std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64); }
  void free(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  Exec exec() override { return {nullptr, this}; }
  long outstanding_scratch() const override { return outstanding_; }
  void* get(size_t bytes) override {
    ++outstanding_;
    return alloc(bytes);
  }
  void put(void* p, size_t) override {
    --outstanding_;
    free(p);
  }

 private:
  long outstanding_ = 0;
};

// twice: instead of against the reference, every call runs on the table twice, on fresh
// copies of the same inputs, and both runs must agree bit for bit (determinism).
struct TableUnderTest {
  const OpTable* table;
  TableMemory* memory;
  bool twice = false;
};

// ---- random inputs ----

struct Rng {
  std::mt19937_64 g;
  float uni(float lo = -1.0f, float hi = 1.0f) { return std::uniform_real_distribution<float>(lo, hi)(g); }
  int64_t range(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); }
  bool coin() { return range(0, 1) == 1; }
  std::vector<float> vec(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = uni(lo, hi);
    return v;
  }
};

inline uint64_t oracle_seed() {
  if (const char* s = std::getenv("RINGFENCE_ORACLE_SEED")) return std::strtoull(s, nullptr, 10);
  return static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
}

inline std::string exact(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", static_cast<double>(v));
  return b;
}

inline std::vector<float> garbage(int64_t n) { return std::vector<float>(static_cast<size_t>(n), std::nanf("")); }

// ---- one call of one entry on both tables, its buffers compared ----

struct Tol {
  double rtol, atol;
};
constexpr Tol kExact{0.0, 0.0};
constexpr Tol kUlps{3e-7, 1e-7};  // one or two roundings more or less (a fused multiply-add)
// A float sum of `terms` products of values in [-1, 1], against one rounded in double.
inline Tol sum_tol(int64_t terms) { return {1e-5, 1e-6 + 2e-7 * static_cast<double>(terms)}; }

struct Ptrs {
  std::vector<float*> f;
  std::vector<int32_t*> i;
};
using Call = std::function<void(const OpTable&, const Exec&, const Ptrs&)>;

class Case {
 public:
  // Inputs must come back bitwise unchanged; outputs within their tolerance. A buffer
  // added with null() is a null pointer.
  int in(std::vector<float> v) { return add(std::move(v), kExact, false); }
  int out(std::vector<float> v, Tol t) { return add(std::move(v), t, false); }
  int null() { return add({}, kExact, true); }
  int in_i32(std::vector<int32_t> v) { return add_i32(std::move(v)); }
  int out_i32(std::vector<int32_t> v) { return add_i32(std::move(v)); }

  void run(const TableUnderTest& t, const Call& call) {
    if (t.twice) return run_twice(t, call);
    // The reference, on host copies.
    std::vector<std::vector<float>> rf = f_;
    std::vector<std::vector<int32_t>> ri = i_;
    Ptrs hp;
    for (size_t k = 0; k < rf.size(); ++k) hp.f.push_back(null_[k] ? nullptr : rf[k].data());
    for (auto& v : ri) hp.i.push_back(v.data());
    HostMemory ref_mem;
    call(reference_table(), ref_mem.exec(), hp);

    std::vector<std::vector<float>> df;
    std::vector<std::vector<int32_t>> di;
    run_on(t, call, df, di);
    for (size_t k = 0; k < df.size(); ++k) compare_f(k, rf[k], df[k]);
    for (size_t k = 0; k < di.size(); ++k) {
      CAPTURE(k);
      size_t bad = 0;
      for (size_t e = 0; e < di[k].size(); ++e) bad += di[k][e] != ri[k][e];
      CHECK_MESSAGE(bad == 0, "int32 buffer ", k, ": ", bad, " of ", di[k].size(), " elements differ");
    }
  }

 private:
  // Two runs on the table under test, compared bitwise (NaN bits included).
  void run_twice(const TableUnderTest& t, const Call& call) {
    std::vector<std::vector<float>> f1, f2;
    std::vector<std::vector<int32_t>> i1, i2;
    run_on(t, call, f1, i1);
    run_on(t, call, f2, i2);
    for (size_t k = 0; k < f1.size(); ++k) {
      CAPTURE(k);
      size_t bad = 0;
      for (size_t e = 0; e < f1[k].size(); ++e) bad += std::memcmp(&f1[k][e], &f2[k][e], sizeof(float)) != 0;
      CHECK_MESSAGE(bad == 0, "float buffer ", k, ": ", bad, " of ", f1[k].size(), " elements differ between two runs");
    }
    for (size_t k = 0; k < i1.size(); ++k) {
      CAPTURE(k);
      CHECK_MESSAGE(i1[k] == i2[k], "int32 buffer ", k, " differs between two runs");
    }
  }

  // One call on the table under test, in its memory; every buffer read back.
  void run_on(const TableUnderTest& t, const Call& call, std::vector<std::vector<float>>& df,
              std::vector<std::vector<int32_t>>& di) {
    TableMemory& m = *t.memory;
    Ptrs dp;
    for (size_t k = 0; k < f_.size(); ++k) {
      float* p = null_[k] ? nullptr : static_cast<float*>(m.alloc(sizeof(float) * (f_[k].size() + 1)));
      if (p && !f_[k].empty()) m.upload(p, f_[k].data(), sizeof(float) * f_[k].size());
      dp.f.push_back(p);
    }
    for (auto& v : i_) {
      auto* p = static_cast<int32_t*>(m.alloc(sizeof(int32_t) * (v.size() + 1)));
      if (!v.empty()) m.upload(p, v.data(), sizeof(int32_t) * v.size());
      dp.i.push_back(p);
    }
    call(*t.table, m.exec(), dp);
    df = f_;
    di = i_;
    for (size_t k = 0; k < df.size(); ++k)
      if (dp.f[k] && !df[k].empty()) m.download(df[k].data(), dp.f[k], sizeof(float) * df[k].size());
    for (size_t k = 0; k < di.size(); ++k)
      if (!di[k].empty()) m.download(di[k].data(), dp.i[k], sizeof(int32_t) * di[k].size());
    for (float* p : dp.f)
      if (p) m.free(p);
    for (int32_t* p : dp.i) m.free(p);
    CHECK(m.outstanding_scratch() == 0);
  }

  int add(std::vector<float> v, Tol t, bool is_null) {
    f_.push_back(std::move(v));
    tol_.push_back(t);
    null_.push_back(is_null);
    return static_cast<int>(f_.size() - 1);
  }
  int add_i32(std::vector<int32_t> v) {
    i_.push_back(std::move(v));
    return static_cast<int>(i_.size() - 1);
  }
  void compare_f(size_t k, const std::vector<float>& ref, const std::vector<float>& got) {
    const Tol t = tol_[k];
    size_t bad = 0, first = 0;
    for (size_t e = 0; e < ref.size(); ++e) {
      const float r = ref[e], g = got[e];
      bool ok;
      if (std::isnan(r) || std::isnan(g)) ok = std::isnan(r) && std::isnan(g);
      else if (t.rtol == 0.0 && t.atol == 0.0) ok = std::memcmp(&r, &g, sizeof r) == 0;
      else ok = std::fabs(double{g} - r) <= t.atol + t.rtol * std::fabs(double{r});
      if (!ok && bad++ == 0) first = e;
    }
    CHECK_MESSAGE(bad == 0, "float buffer ", k, ": ", bad, " of ", ref.size(), " elements off; first at ",
                  first, ": ", exact(bad ? got[first] : 0.0f), " vs reference ", exact(bad ? ref[first] : 0.0f));
  }
  std::vector<std::vector<float>> f_;
  std::vector<Tol> tol_;
  std::vector<bool> null_;
  std::vector<std::vector<int32_t>> i_;
};

// ---- which entries were checked ----

class Checked {
 public:
  template <typename F>
  void mark(F OpTable::*entry) {
    static const OpTable probe{};
    offsets_.insert(reinterpret_cast<const char*>(&(probe.*entry)) - reinterpret_cast<const char*>(&probe));
  }
  int count() const { return static_cast<int>(offsets_.size()); }

 private:
  std::set<std::ptrdiff_t> offsets_;
};

}  // namespace rf::kernels::oracle
