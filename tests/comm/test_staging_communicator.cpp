// The UCX fallback's staging communicator (comm/staging/staging_communicator.h) without a GPU
// or UCX: "device" memory is host memory, the device copies a fake whose copies into
// staging wait behind a gate (the GPU not yet at the bucket), the inner communicator a fake
// that records the order it is asked in and adds 1 to every float (so a result that did
// not go through staging and back is visible).
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/str.h"
#include "comm/staging/staging_communicator.h"
#include "comm/staging/staging_slots.h"
#include "comm/errors.h"

using namespace rf::comm;
using namespace rf::comm::cuda;
using rf::Clock;
using rf::Duration;
using rf::TimePoint;

namespace {

class DoneWork final : public Work {
 public:
  bool test() override { return true; }
  void wait(TimePoint) override {}
};
class ErrorWork final : public Work {
 public:
  explicit ErrorWork(std::exception_ptr e) : e_(std::move(e)) {}
  bool test() override { std::rethrow_exception(e_); }
  void wait(TimePoint) override { std::rethrow_exception(e_); }

 private:
  std::exception_ptr e_;
};

// A world of one whose all-reduce adds 1 to every float; aborted: every start fails.
class FakeInner final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  uint64_t generation() const override { return 5; }
  WorkPtr allreduce_start(Buffer b, OpId id, Stream s) override {
    REQUIRE(b.device == Device::host);
    REQUIRE(s == nullptr);
    if (auto w = refuse("all-reduce", id)) return w;
    for (size_t i = 0; i < b.count; ++i) static_cast<float*>(b.data)[i] += 1.0f;
    return log(rf::str("all-reduce ", id.step, ".", id.op));
  }
  WorkPtr broadcast_start(Buffer, int, OpId id, Stream) override {
    if (auto w = refuse("broadcast", id)) return w;
    return log(rf::str("broadcast ", id.step, ".", id.op));
  }
  WorkPtr allgather_start(Buffer in, Buffer out, OpId id, Stream) override {
    if (auto w = refuse("all-gather", id)) return w;
    std::memcpy(out.data, in.data, in.bytes());
    return log(rf::str("all-gather ", id.step, ".", id.op));
  }
  WorkPtr barrier_start(OpId id) override {
    if (auto w = refuse("barrier", id)) return w;
    return log(rf::str("barrier ", id.step, ".", id.op));
  }
  WorkPtr send_start(int, const void*, size_t, OpId id) override { return log(rf::str("send ", id.step)); }
  WorkPtr recv_start(int, void*, size_t, OpId id) override { return log(rf::str("recv ", id.step)); }
  void abort(const std::string& reason) override { set_abort(reason, false); }
  void abort_failed(const std::string& reason) override { set_abort(reason, true); }
  bool aborted() const override { return aborted_.load(); }
  void inject_drop() override { drops.fetch_add(1); }
  void set_stall_timeout(Duration t) override {
    stall_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(t).count());
  }
  Duration stall_timeout() const override { return std::chrono::nanoseconds(stall_ns_.load()); }

  std::vector<std::string> order() {
    std::lock_guard<std::mutex> lk(mu_);
    return order_;
  }
  bool blamed_self() {
    std::lock_guard<std::mutex> lk(mu_);
    return blame_;
  }
  std::atomic<int> drops{0};

 private:
  WorkPtr log(std::string what) {
    std::lock_guard<std::mutex> lk(mu_);
    order_.push_back(std::move(what));
    return std::make_shared<DoneWork>();
  }
  WorkPtr refuse(const char* name, OpId id) {
    if (!aborted_.load()) return nullptr;
    CommErrorInfo i;
    i.rank = 0;
    i.collective = name;
    i.generation = 5;
    i.step = static_cast<int64_t>(id.step);
    i.op = id.op;
    std::lock_guard<std::mutex> lk(mu_);
    i.cause = reason_;
    return std::make_shared<ErrorWork>(std::make_exception_ptr(Aborted(i)));
  }
  void set_abort(const std::string& reason, bool blame) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      reason_ = reason;
      blame_ = blame;
    }
    aborted_.store(true);
  }
  std::mutex mu_;
  std::vector<std::string> order_;
  std::string reason_;
  bool blame_ = false;
  std::atomic<bool> aborted_{false};
  std::atomic<int64_t> stall_ns_{int64_t{30} * 1000 * 1000 * 1000};
};

// Copies into staging wait until the gate opens (the stream has not reached them yet).
class FakeCopies final : public DeviceCopies {
 public:
  int device() const override { return 0; }
  void make_current() override {}
  StagingLease take(const StagingKey& key) override {
    std::lock_guard<std::mutex> lk(mu_);
    StagingSlots::Pick p = slots_.take(key);
    int i = p.slot;
    if (i < 0) {
      i = slots_.add(key);
      if (mem_.size() <= static_cast<size_t>(i)) mem_.resize(static_cast<size_t>(i) + 1);
      mem_[static_cast<size_t>(i)].assign(staging_capacity(key.bytes), 0);
      ++made;
    }
    StagingLease l;
    l.index = i;
    l.host = mem_[static_cast<size_t>(i)].data();
    return l;
  }
  void give(const StagingLease& l) override {
    std::lock_guard<std::mutex> lk(mu_);
    slots_.give(l.index);
    ++given;
  }
  void copy_in(const StagingLease& l, const void* src, size_t bytes, bool copy, Stream) override {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.push_back({l.host, src, copy ? bytes : 0});
  }
  bool copied_in(const StagingLease&) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!gate.load()) return false;
    for (const Copy& c : pending_) std::memcpy(c.dst, c.src, c.bytes);
    pending_.clear();
    return true;
  }
  void copy_out(const StagingLease& l, void* dst, size_t bytes, bool copy, Stream) override {
    if (copy) std::memcpy(dst, l.host, bytes);
    ++copies_out;
  }
  std::atomic<bool> gate{true};
  std::atomic<int> made{0}, given{0}, copies_out{0};

 private:
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  std::mutex mu_;
  StagingSlots slots_{size_t{1} << 30};
  std::vector<std::vector<char>> mem_;
  std::vector<Copy> pending_;
};

Buffer device_buffer(std::vector<float>& v) { return Buffer{v.data(), v.size(), DType::f32, Device::cuda, 0}; }
double ms_since(TimePoint t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct Fixture {
  std::shared_ptr<FakeInner> inner = std::make_shared<FakeInner>();
  std::shared_ptr<FakeCopies> copies = std::make_shared<FakeCopies>();
  std::shared_ptr<Communicator> comm = make_staging_communicator(inner, copies);
};

}  // namespace

TEST_CASE("staging communicator: a device all-reduce goes through staging and back; slots are reused across steps") {
  Fixture f;
  std::vector<float> a(1000, 2.0f), b(70000, 3.0f);
  for (uint64_t step = 0; step < 3; ++step) {
    WorkPtr wa = f.comm->allreduce_start(device_buffer(a), OpId{step, 0});
    WorkPtr wb = f.comm->allreduce_start(device_buffer(b), OpId{step, 1});
    wa->wait();
    wb->wait();
  }
  CHECK(a[0] == 5.0f);
  CHECK(a[999] == 5.0f);
  CHECK(b[69999] == 6.0f);
  CHECK(f.copies->made == 2);  // one slot per bucket, made in the first step only
  CHECK(f.copies->given == 6);
  CHECK(f.inner->order() ==
        std::vector<std::string>{"all-reduce 0.0", "all-reduce 0.1", "all-reduce 1.0", "all-reduce 1.1",
                                 "all-reduce 2.0", "all-reduce 2.1"});
}

TEST_CASE("staging communicator: host work queues behind pending device work, in start order") {
  Fixture f;
  f.copies->gate = false;  // the GPU has not reached the bucket yet
  std::vector<float> a(10, 1.0f), h(4, 1.0f);
  WorkPtr wa = f.comm->allreduce_start(device_buffer(a), OpId{1, 0});
  WorkPtr wh = f.comm->allreduce_start(Buffer{h.data(), h.size(), DType::f32}, OpId{1, 1});
  WorkPtr wbar = f.comm->barrier_start(OpId{1, 2});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(wa->test());
  CHECK_FALSE(wh->test());
  CHECK_FALSE(wbar->test());
  CHECK(f.inner->order().empty());
  f.copies->gate = true;
  wbar->wait();
  wh->wait();
  wa->wait();
  CHECK(f.inner->order() == std::vector<std::string>{"all-reduce 1.0", "all-reduce 1.1", "barrier 1.2"});
  CHECK(a[0] == 2.0f);
  CHECK(h[0] == 2.0f);
  // Nothing pending: host work starts at once.
  f.comm->barrier(OpId{2, 0});
  CHECK(f.inner->order().back() == "barrier 2.0");
}

TEST_CASE("staging communicator: broadcast and all-gather stage what they must") {
  Fixture f;
  std::vector<float> x(8, 7.0f), in(3, 4.0f), out(3, 0.0f);
  f.comm->broadcast_start(device_buffer(x), 0, OpId{1, 0})->wait();
  CHECK(x[0] == 7.0f);  // the root's buffer, through staging and back unchanged
  f.comm->allgather_start(device_buffer(in), device_buffer(out), OpId{1, 1})->wait();
  CHECK(out == std::vector<float>(3, 4.0f));
  std::vector<float> host_out(3);
  CHECK_THROWS_AS(f.comm->allgather_start(device_buffer(in), Buffer{host_out.data(), 3, DType::f32}, OpId{1, 2}),
                  rf::InvalidInput);
  Buffer other = device_buffer(x);
  other.device_index = 1;
  CHECK_THROWS_AS(f.comm->allreduce_start(other, OpId{1, 3}), rf::InvalidInput);
}

TEST_CASE("staging communicator: abort from another thread fails a collective whose copy is pending") {
  Fixture f;
  f.copies->gate = false;
  std::vector<float> a(100, 1.0f);
  WorkPtr w = f.comm->allreduce_start(device_buffer(a), OpId{812, 1});
  std::atomic<int64_t> at{0};
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    at = rf::now_ns();
    f.comm->abort("test: coordinator revoked g=5");
  });
  std::string what;
  try {
    w->wait();
  } catch (const Aborted& e) {
    what = e.what();
  }
  const double ms = static_cast<double>(rf::now_ns() - at.load()) / 1e6;
  aborter.join();
  CHECK(what.find("coordinator revoked g=5") != std::string::npos);
  CHECK(what.find("s=812") != std::string::npos);
  CHECK(ms < 100.0);  // 10 ms by contract; the bound leaves room for a loaded machine
  CHECK(a[0] == 1.0f);  // nothing was copied back
  CHECK(f.copies->copies_out == 0);
  CHECK(f.comm->aborted());
  CHECK_THROWS_AS(f.comm->allreduce_start(device_buffer(a), OpId{813, 0})->wait(), Aborted);
}

TEST_CASE("staging communicator: a copy that makes no progress times out and fences the rank") {
  Fixture f;
  f.copies->gate = false;
  f.comm->set_stall_timeout(std::chrono::milliseconds(50));
  CHECK(f.inner->stall_timeout() == std::chrono::milliseconds(50));
  std::vector<float> a(100, 1.0f);
  const TimePoint t = Clock::now();
  std::string what;
  try {
    f.comm->allreduce_start(device_buffer(a), OpId{9, 0})->wait();
  } catch (const TimedOut& e) {
    what = e.what();
  }
  CHECK(what.find("made no progress") != std::string::npos);
  CHECK(ms_since(t) >= 50.0);
  CHECK(ms_since(t) < 1000.0);
  CHECK(f.comm->aborted());
  CHECK(f.inner->blamed_self());  // abort_failed: peers fail naming this rank
}

TEST_CASE("staging communicator: the caller's deadline leaves the collective running; seams pass through") {
  Fixture f;
  f.copies->gate = false;
  std::vector<float> a(16, 1.0f);
  WorkPtr w = f.comm->allreduce_start(device_buffer(a), OpId{3, 0});
  CHECK_THROWS_AS(w->wait(Clock::now() + std::chrono::milliseconds(20)), TimedOut);
  f.copies->gate = true;
  w->wait();
  CHECK(a[0] == 2.0f);
  f.comm->inject_drop();
  CHECK(f.inner->drops == 1);
  CHECK(f.comm->generation() == 5);
  CHECK(f.comm->world_size() == 1);
}

TEST_CASE("staging communicator: an abandoned Work's staging stays out of the pool until the communicator goes") {
  std::vector<float> a(16, 1.0f);
  auto copies = std::make_shared<FakeCopies>();
  {
    auto inner = std::make_shared<FakeInner>();
    auto comm = make_staging_communicator(inner, copies);
    copies->gate = false;
    WorkPtr w = comm->allreduce_start(device_buffer(a), OpId{1, 0});
    w.reset();  // abandoned (the reducer after a failure)
    CHECK(copies->given == 0);
    copies->gate = true;
  }
  CHECK(copies->given == 1);
}
