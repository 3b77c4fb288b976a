#include "base/trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/str.h"

namespace rf {

namespace {
size_t round_up_pow2(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

void append_args(std::string& out, const TraceArgs& a) {
  char buf[160];
  int n = std::snprintf(buf, sizeof buf, "\"args\":{\"step\":%lld,\"g\":%lld,\"rank\":%d",
                        static_cast<long long>(a.step), static_cast<long long>(a.generation), a.rank);
  out.append(buf, static_cast<size_t>(n));
  if (a.bucket >= 0) {
    n = std::snprintf(buf, sizeof buf, ",\"bucket\":%d", a.bucket);
    out.append(buf, static_cast<size_t>(n));
  }
}
}  // namespace

Tracer::Tracer(const std::string& path, size_t capacity, Duration flush_every) : flush_every_(flush_every) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) throw Error(str("cannot open the trace file '", path, "': ", std::strerror(errno)));
  ring_.resize(round_up_pow2(capacity < 2 ? 2 : capacity));
  mask_ = ring_.size() - 1;
  out_.reserve(1 << 16);
  steady0_ = Clock::now();
  wall0_us_ = wall_us();
  writer_ = std::thread([this] { writer_loop(); });
}

Tracer::~Tracer() {
  if (!file_) return;
  {
    std::lock_guard<std::mutex> lk(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  writer_.join();
  flush();
  if (const uint64_t d = dropped()) {
    std::fprintf(file_,
                 "{\"name\":\"trace_dropped\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%lld,\"tid\":0,"
                 "\"args\":{\"spans\":%llu}}\n",
                 static_cast<long long>(wall_us()), static_cast<unsigned long long>(d));
  }
  std::fclose(file_);
}

void Tracer::instant_any(const std::string& name, const std::string& detail, const TraceArgs& args) {
  if (!file_) return;
  std::string line = "{\"name\":";
  append_json_string(line, name);
  line += str(",\"ph\":\"i\",\"s\":\"t\",\"ts\":", wall_us(), ",\"tid\":", kTrain, ",");
  append_args(line, args);
  line += ",\"detail\":";
  append_json_string(line, detail);
  line += "}}\n";
  std::lock_guard<std::mutex> lk(any_mu_);
  any_lines_.push_back(std::move(line));
}

void Tracer::flush() {
  if (!file_) return;
  std::lock_guard<std::mutex> lk(write_mu_);
  drain();
}

void Tracer::writer_loop() {
  std::unique_lock<std::mutex> lk(stop_mu_);
  while (!stop_) {
    stop_cv_.wait_for(lk, flush_every_, [this] { return stop_; });
    lk.unlock();
    {
      std::lock_guard<std::mutex> wl(write_mu_);
      drain();
    }
    lk.lock();
  }
}

// One fwrite of whole lines per drain: a process killed in the middle leaves at most one
// partial last line, which the merge skips (apps/ringfence/trace_merge.h).
void Tracer::drain() {
  out_.clear();
  const uint64_t t = tail_.load(std::memory_order_relaxed);
  const uint64_t h = head_.load(std::memory_order_acquire);
  char buf[256];
  for (uint64_t i = t; i < h; ++i) {
    const Record& r = ring_[i & mask_];
    int n;
    if (r.ph == 'X')
      n = std::snprintf(buf, sizeof buf, "{\"name\":\"%s\",\"ph\":\"X\",\"ts\":%lld,\"dur\":%lld,\"tid\":%d,", r.name,
                        static_cast<long long>(r.ts_us), static_cast<long long>(r.dur_us), r.lane);
    else
      n = std::snprintf(buf, sizeof buf, "{\"name\":\"%s\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%lld,\"tid\":%d,", r.name,
                        static_cast<long long>(r.ts_us), r.lane);
    out_.append(buf, static_cast<size_t>(std::min<int>(n, static_cast<int>(sizeof buf) - 1)));
    append_args(out_, r.args);
    out_ += "}}\n";
  }
  tail_.store(h, std::memory_order_release);  // the slots are copied out: the owner may reuse them
  {
    std::lock_guard<std::mutex> lk(any_mu_);
    for (const auto& l : any_lines_) out_ += l;
    any_lines_.clear();
  }
  if (out_.empty()) return;
  std::fwrite(out_.data(), 1, out_.size(), file_);
  std::fflush(file_);
}

}  // namespace rf
