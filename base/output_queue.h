#pragma once
// The pure core of OutputPump (output_pump.h): a bounded queue of a stream's bytes that
// keeps whole lines. push() queues each line while the queue holds less than `capacity`
// bytes; past that the line is dropped whole and counted, and the next line that is queued
// again is preceded by one note saying how many were dropped. A line ends at '\n' or '\r'
// (a status line rewritten in place ends at '\r'). A line may take the queue up to kMaxLine
// past the capacity, so a line is never cut in two unless the queue would pass that; then
// it is ended where it was cut and its rest is dropped.
//
//   OutputQueue q(4 << 20);
//   q.push(bytes_read);          // never blocks, never grows past capacity + kMaxLine
//   std::string out = q.take(65536);  // what to write next (empty: nothing queued)
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rf {

class OutputQueue {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  explicit OutputQueue(size_t capacity) : capacity_(capacity) {}

  void push(std::string_view bytes);
  // Up to `max` bytes from the front, removed from the queue (empty when nothing is
  // queued). They end at a line end when one lies within `max` bytes of the front (or
  // everything queued fits), so what another stream writes between two takes lands
  // between lines.
  std::string take(size_t max);
  // The output cannot be written any more (the reader is gone): what is queued and what
  // comes later is counted as dropped.
  void discard_all();
  // Queues the note for lines dropped since the last one now, if any (at a flush: no
  // later line may come to carry it). Not inside a line.
  void note_drops();

  // What is queued is the start of one line, its end not pushed yet.
  bool only_part_of_a_line() const;
  size_t queued() const { return buf_.size() - head_; }
  bool empty() const { return queued() == 0; }
  uint64_t dropped_lines() const { return dropped_lines_total_; }
  uint64_t dropped_bytes() const { return dropped_bytes_total_; }

 private:
  void append(std::string_view s);
  void drop(std::string_view s, bool ends_line);

  size_t capacity_;
  std::string buf_;
  size_t head_ = 0;
  bool mid_line_ = false;       // the queue ends inside a line (its end not pushed yet)
  bool dropping_line_ = false;  // the line being pushed is being dropped (its start was)
  bool discarding_ = false;     // discard_all(): everything is dropped from now on
  uint64_t dropped_lines_ = 0;  // since the last note
  uint64_t dropped_bytes_ = 0;
  uint64_t dropped_lines_total_ = 0;
  uint64_t dropped_bytes_total_ = 0;
};

// The note queued before the first line after a drop.
std::string dropped_note(uint64_t lines, uint64_t bytes);

}  // namespace rf
