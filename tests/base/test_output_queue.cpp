// OutputQueue (base/output_queue.h): the pump's bounded, line-keeping queue.
#include <doctest/doctest.h>

#include <string>

#include "base/output_queue.h"
#include "base/str.h"

using rf::OutputQueue;

namespace {
std::string drain(OutputQueue& q) {
  std::string all;
  for (std::string s = q.take(7); !s.empty(); s = q.take(7)) all += s;  // small chunks on purpose
  return all;
}
}  // namespace

TEST_CASE("OutputQueue: what fits comes out whole and in order") {
  OutputQueue q(100);
  q.push("one\ntw");
  q.push("o\nthree\r");
  CHECK(q.queued() == 14);
  CHECK(drain(q) == "one\ntwo\nthree\r");
  CHECK(q.empty());
  CHECK(q.dropped_lines() == 0);
}

TEST_CASE("OutputQueue: past the capacity whole lines are dropped, counted, and noted where they were") {
  OutputQueue q(10);
  q.push("aaaa\n");   // 5
  q.push("bbbb\n");   // 10: full
  q.push("cccc\n");   // dropped
  q.push("dd");       // dropped, and the rest of its line with it
  CHECK(q.queued() == 10);
  CHECK(drain(q) == "aaaa\nbbbb\n");
  q.push("dd\n");     // the end of the dropped line: dropped too
  q.push("eeee\n");   // fits again: the note comes first
  CHECK(q.dropped_lines() == 2);
  CHECK(q.dropped_bytes() == 10);
  CHECK(drain(q) == rf::str(rf::dropped_note(2, 10), "eeee\n"));
}

TEST_CASE("OutputQueue: a line already started is finished past the capacity, not cut") {
  OutputQueue q(8);
  q.push("start of a");
  q.push(" line\n");
  CHECK(drain(q) == "start of a line\n");
  CHECK(q.dropped_bytes() == 0);
}

TEST_CASE("OutputQueue: a line longer than kMaxLine past the capacity is ended and its rest dropped") {
  OutputQueue q(16);
  const std::string big(OutputQueue::kMaxLine + 100, 'x');
  q.push("x");
  q.push(big);
  q.push("tail\n");
  q.push("next\n");
  // "x" and the big piece would take the queue past capacity + kMaxLine: the line ends
  // after "x", the rest is dropped.
  CHECK(drain(q) == rf::str("x\n", rf::dropped_note(1, big.size() + 5), "next\n"));
}

TEST_CASE("OutputQueue: the note goes before the next line queued, or alone at note_drops()") {
  OutputQueue q(4);
  q.push("abc\n");
  q.push("toolong\n");  // the queue is full: dropped
  CHECK(drain(q) == "abc\n");
  q.note_drops();  // a flush with no line to follow: the note alone
  CHECK(drain(q) == rf::dropped_note(1, 8));
  q.note_drops();
  CHECK(q.empty());
  q.push("abc\n");
  q.push("xy\n");  // dropped
  CHECK(drain(q) == "abc\n");
  q.push("ab");  // the next line carries the note before it
  q.note_drops();  // nothing more to note
  q.push("\n");
  CHECK(drain(q) == rf::str(rf::dropped_note(1, 3), "ab\n"));
}

TEST_CASE("OutputQueue: discard_all() drops what is queued and all that comes after, counted") {
  OutputQueue q(100);
  q.push("a\nb\n");
  q.discard_all();
  CHECK(q.empty());
  q.push("c\n");
  CHECK(q.empty());
  CHECK(q.dropped_lines() == 3);
  CHECK(q.dropped_bytes() == 6);
}

TEST_CASE("OutputQueue: take() ends at the last line end it can, so another stream may write between takes") {
  OutputQueue q(100);
  q.push("one\ntwo\nthr");
  CHECK(q.take(10) == "one\ntwo\n");  // not "one\ntwo\nth": the line "three" is not cut
  q.push("ee\r");
  CHECK(q.take(3) == "thr");          // no line end within 3 bytes: the line is cut after all
  CHECK(q.take(100) == "ee\r");
  q.push("partial");
  CHECK(q.only_part_of_a_line());
  CHECK(q.take(100) == "partial");    // take() does not hold back a line whose end has not come
  CHECK(q.empty());
  q.push(" line\nnext");
  CHECK_FALSE(q.only_part_of_a_line());
  CHECK(q.take(100) == " line\n");    // the line end queued: up to it
}
