#include "base/output_queue.h"

#include <algorithm>

#include "base/str.h"

namespace rf {

std::string dropped_note(uint64_t lines, uint64_t bytes) {
  return str("ringfence: ", lines, " line(s) of output (", bytes,
             " bytes) dropped here: the output was not read while they were written\n");
}

void OutputQueue::push(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t end = bytes.find_first_of("\n\r");
    const bool ends_line = end != std::string_view::npos;
    const std::string_view seg = bytes.substr(0, ends_line ? end + 1 : bytes.size());
    bytes.remove_prefix(seg.size());
    if (discarding_ || dropping_line_) {
      drop(seg, ends_line);
      continue;
    }
    const bool fits = queued() + seg.size() <= capacity_ + kMaxLine;
    if (mid_line_) {
      // The rest of a line already started goes with it up to kMaxLine past the capacity;
      // past that the line is ended here and its rest dropped.
      if (!fits) {
        append("\n");
        mid_line_ = false;
        drop(seg, ends_line);
        continue;
      }
      append(seg);
      if (ends_line) mid_line_ = false;
      continue;
    }
    if (queued() >= capacity_ || !fits) {
      drop(seg, ends_line);
      continue;
    }
    note_drops();
    append(seg);
    if (!ends_line) mid_line_ = true;
  }
}

void OutputQueue::note_drops() {
  if (dropped_lines_ == 0 && dropped_bytes_ == 0) return;
  if (mid_line_ || discarding_) return;  // after the line in progress
  append(dropped_note(dropped_lines_, dropped_bytes_));
  dropped_lines_ = dropped_bytes_ = 0;
}

std::string OutputQueue::take(size_t max) {
  size_t n = std::min(max, queued());
  if (n < queued() || mid_line_) {  // end at the last line end within n, if there is one
    const size_t end = std::string_view(buf_).substr(head_, n).find_last_of("\n\r");
    if (end != std::string_view::npos) n = end + 1;
  }
  std::string out = buf_.substr(head_, n);
  head_ += n;
  if (head_ == buf_.size()) {
    buf_.clear();
    head_ = 0;
  } else if (head_ > buf_.size() / 2) {
    buf_.erase(0, head_);
    head_ = 0;
  }
  return out;
}

bool OutputQueue::only_part_of_a_line() const {
  return mid_line_ && std::string_view(buf_).substr(head_).find_first_of("\n\r") == std::string_view::npos;
}

void OutputQueue::discard_all() {
  discarding_ = true;
  const std::string_view rest = std::string_view(buf_).substr(head_);
  const auto lines = static_cast<uint64_t>(std::count_if(rest.begin(), rest.end(), [](char c) { return c == '\n' || c == '\r'; }));
  dropped_bytes_ += rest.size();
  dropped_bytes_total_ += rest.size();
  dropped_lines_ += lines;
  dropped_lines_total_ += lines;
  buf_.clear();
  head_ = 0;
  mid_line_ = false;
}

void OutputQueue::append(std::string_view s) { buf_.append(s); }

void OutputQueue::drop(std::string_view s, bool ends_line) {
  dropped_bytes_ += s.size();
  dropped_bytes_total_ += s.size();
  if (ends_line) {
    ++dropped_lines_;
    ++dropped_lines_total_;
  }
  dropping_line_ = !ends_line;
}

}  // namespace rf
