#pragma once
// The oracle's TableMemory (oracle_case.h) over a device's runtime (core/device_runtime.h):
// buffers from its caching allocator, uploads with write, downloads with read (which waits
// for everything issued), entries run on its stream with its allocator as scratch,
// counted so a leaked scratch block shows.
#include <atomic>
#include <map>

#include "core/device_runtime.h"
#include "tests/kernels/oracle_case.h"

namespace rf::kernels::oracle {

class RuntimeMemory final : public TableMemory, public Scratch {
 public:
  explicit RuntimeMemory(DeviceRuntime& rt) : rt_(rt) {}
  // The harness frees by pointer; the allocator wants the size back, so it is kept.
  void* alloc(size_t bytes) override {
    void* p = rt_.allocator().allocate(bytes);
    sizes_[p] = bytes;
    return p;
  }
  void free(void* p) override {
    const auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    rt_.allocator().release(p, it->second);
    sizes_.erase(it);
  }
  void upload(void* dst, const void* src, size_t bytes) override { rt_.write(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { rt_.read(dst, src, bytes); }
  Exec exec() override { return {rt_.stream(), this}; }
  long outstanding_scratch() const override { return outstanding_.load(); }
  void* get(size_t bytes) override {
    ++outstanding_;
    return rt_.allocator().allocate(bytes);
  }
  void put(void* p, size_t bytes) override {
    --outstanding_;
    rt_.allocator().release(p, bytes);
  }

 private:
  DeviceRuntime& rt_;
  std::map<void*, size_t> sizes_;
  std::atomic<long> outstanding_{0};
};

}  // namespace rf::kernels::oracle
