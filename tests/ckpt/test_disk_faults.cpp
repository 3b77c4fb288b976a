// A full, failing or read-only disk: a checkpoint that cannot be written is a
// warning, never a crash; its partial file goes, the newest valid checkpoint stays, the
// next save tries again; only flush() of a state that is not on disk is an error. Resume
// past files that cannot be read, never starting fresh over them.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/str.h"
#include "ckpt/async_checkpointer.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/format_error.h"
#include "ckpt/resume.h"
#include "ckpt/storage_error.h"
#include "core/nn/layers.h"
#include "core/nn/sequential.h"
#include "core/optim/sgd.h"
#include "core/random.h"
#include "tests/ckpt/disk_test_support.h"

namespace fs = std::filesystem;
using rf::ckpt::CheckpointFile;
using rf::ckpt::StorageError;
using rf::ckpt::StorageFault;
using rf::ckpt::StorageOp;
using namespace rf::ckpt::testing;

namespace {

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<std::byte> image_of(Trainee& t, int64_t step) {
  std::vector<std::byte> image;
  rf::ckpt::serialize_state(*t.model, *t.sgd, meta_at(step), image);
  return image;
}

}  // namespace

TEST_CASE("write_checkpoint_file: a disk that fails leaves no partial file and the older checkpoint intact") {
  struct Case {
    int err;
    StorageOp op;
    const char* text;
  };
  for (const Case c : {Case{ENOSPC, StorageOp::Write, "write failed: No space left on device"},
                       Case{EDQUOT, StorageOp::Write, "write failed: Disk quota exceeded"},
                       Case{EIO, StorageOp::Fsync, "fsync failed: Input/output error"},
                       Case{EROFS, StorageOp::Create, "create failed: Read-only file system"}}) {
    CAPTURE(c.text);
    TempDir d;
    Trainee t;
    rf::ckpt::write_checkpoint_file(d.path, 99, image_of(t, 99));
    const std::string old_bytes = bytes_of(d / "ckpt-000000099.safetensors");
    CHECK(rf::ckpt::storage_fault_op(c.err) == c.op);
    try {
      rf::ckpt::write_checkpoint_file(d.path, 199, image_of(t, 199), {}, StorageFault{.err = c.err});
      FAIL("no error");
    } catch (const StorageError& e) {
      CHECK(e.err() == c.err);
      CHECK(e.op() == c.op);
      CHECK(e.path() == d / ".ckpt-000000199.safetensors.tmp");
      CHECK(std::string(e.what()) == d / ".ckpt-000000199.safetensors.tmp: " + c.text);
    }
    CHECK(names_in(d.path) == std::vector<std::string>{"ckpt-000000099.safetensors"});
    CHECK(bytes_of(d / "ckpt-000000099.safetensors") == old_bytes);
  }
}

TEST_CASE("write_checkpoint_file: a slow disk delays the write, which then succeeds") {
  TempDir d;
  Trainee t;
  const auto t0 = std::chrono::steady_clock::now();
  rf::ckpt::write_checkpoint_file(d.path, 5, image_of(t, 5), {}, StorageFault{.delay = std::chrono::milliseconds(150)});
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(150));
  CHECK(steps_in(d.path) == std::vector<int64_t>{5});
}

TEST_CASE("room_to_make: only out of space, only below a checkpoint this writer made durable") {
  const std::vector<CheckpointFile> disk = {{300, "c300"}, {200, "c200"}, {100, "c100"}};
  auto steps = [](const std::vector<CheckpointFile>& v) {
    std::vector<int64_t> s;
    for (auto& f : v) s.push_back(f.step);
    return s;
  };
  CHECK(steps(rf::ckpt::room_to_make(ENOSPC, 200, disk)) == std::vector<int64_t>{100});
  CHECK(steps(rf::ckpt::room_to_make(EDQUOT, 300, disk)) == std::vector<int64_t>{200, 100});
  CHECK(rf::ckpt::room_to_make(EIO, 300, disk).empty());           // not a space problem
  CHECK(rf::ckpt::room_to_make(ENOSPC, -1, disk).empty());         // nothing durable known
  CHECK(rf::ckpt::room_to_make(ENOSPC, 250, disk).empty());        // not on disk (any more)
  CHECK(rf::ckpt::room_to_make(ENOSPC, 100, disk).empty());        // nothing older
}

TEST_CASE("AsyncCheckpointer: a periodic checkpoint that cannot be written is a warning; training saves on") {
  TempDir d;
  Trainee t;
  std::ostringstream log;
  rf::ckpt::AsyncCheckpointer ck({.dir = d.path, .keep = 3}, &log);
  ck.save(*t.model, *t.sgd, meta_at(99));
  ck.flush();
  const std::string newest = d / "ckpt-000000099.safetensors";
  const std::string old_bytes = bytes_of(newest);
  CHECK(ck.newest_valid() == newest);

  for (const int err : {ENOSPC, EIO, EROFS, EDQUOT}) {
    CAPTURE(err);
    log.str("");
    const int64_t failed_before = ck.failures();
    ck.save(*t.model, *t.sgd, meta_at(199), StorageFault{.err = err});
    CHECK_THROWS_AS(ck.flush(), rf::ckpt::CheckpointWriteFailed);  // the state saved last is not on disk
    CHECK(ck.failures() == failed_before + 1);
    CHECK(ck.last_error().find(std::strerror(err)) != std::string::npos);
    CHECK(log.str().find("ckpt: warning: step 199 not checkpointed: ") != std::string::npos);
    CHECK(log.str().find("the newest valid checkpoint is " + newest + " (step 99)") != std::string::npos);
    CHECK(names_in(d.path) == std::vector<std::string>{"ckpt-000000099.safetensors", "ckpt.lock"});
    CHECK(bytes_of(newest) == old_bytes);
  }
  // The next save is not refused for the failures before it, and succeeds.
  ck.save(*t.model, *t.sgd, meta_at(299), StorageFault{.err = ENOSPC});
  t.set(2.0f);
  ck.save(*t.model, *t.sgd, meta_at(399));  // waits for 299's failure: no throw
  ck.flush();
  CHECK(ck.failures() == 5);
  CHECK(steps_in(d.path) == std::vector<int64_t>{399, 99});
  CHECK(ck.newest_valid() == d / "ckpt-000000399.safetensors");
}

TEST_CASE("AsyncCheckpointer: the final state not on disk is an error naming the newest valid checkpoint") {
  TempDir d;
  Trainee t;
  std::ostringstream log;
  rf::ckpt::AsyncCheckpointer ck({.dir = d.path, .keep = 3}, &log);
  ck.save(*t.model, *t.sgd, meta_at(0), StorageFault{.err = EIO});
  CHECK_THROWS_WITH_AS(ck.flush(), doctest::Contains(("no valid checkpoint in " + d.path).c_str()),
                       rf::ckpt::CheckpointWriteFailed);
  ck.save(*t.model, *t.sgd, meta_at(9));
  ck.save(*t.model, *t.sgd, meta_at(19), StorageFault{.err = ENOSPC});
  try {
    ck.flush();
    FAIL("flush did not throw");
  } catch (const rf::ckpt::CheckpointWriteFailed& e) {
    CHECK(std::string(e.what()) ==
          rf::str("the checkpoint of step 19 could not be written (", d / ".ckpt-000000019.safetensors.tmp",
                  ": write failed: No space left on device); the newest valid checkpoint is ",
                  d / "ckpt-000000009.safetensors", " (step 9)"));
  }
  // Restored from the directory: that file is the newest valid one until a newer is durable.
  ck.set_newest_valid(9, "restored");
  ck.save(*t.model, *t.sgd, meta_at(29), StorageFault{.err = EROFS});
  CHECK_THROWS_WITH_AS(ck.flush(), doctest::Contains("newest valid checkpoint is restored (step 9)"),
                       rf::ckpt::CheckpointWriteFailed);
}

TEST_CASE("AsyncCheckpointer: out of space, older checkpoints make room; the newest valid one never goes") {
  TempDir d;
  Trainee t;
  std::ostringstream log;
  int full = 0;  // writes that find the disk full (the hook throws as write() would)
  rf::ckpt::AsyncCheckpointer ck(
      {.dir = d.path, .keep = 3,
       .partial_write_hook =
           [&](const std::string& tmp, size_t, size_t) {
             if (full > 0) {
               --full;
               throw StorageError(tmp, StorageOp::Write, ENOSPC);
             }
           }},
      &log);
  for (int64_t s : {10, 20}) ck.save(*t.model, *t.sgd, meta_at(s));
  ck.flush();

  full = 1;  // full once: 10 goes, 30 is written on the second try
  ck.save(*t.model, *t.sgd, meta_at(30));
  ck.flush();
  CHECK(steps_in(d.path) == std::vector<int64_t>{30, 20});
  CHECK(ck.failures() == 0);
  CHECK(log.str().find("ckpt: removed " + d / "ckpt-000000010.safetensors" + " to make room") != std::string::npos);

  full = 2;  // still full after making room: 20 goes, 30 (the newest valid) stays
  ck.save(*t.model, *t.sgd, meta_at(40));
  CHECK_THROWS_AS(ck.flush(), rf::ckpt::CheckpointWriteFailed);
  CHECK(steps_in(d.path) == std::vector<int64_t>{30});
  CHECK(ck.failures() == 1);

  full = 1;  // nothing older than 30 left: no retry, a warning
  ck.save(*t.model, *t.sgd, meta_at(50));
  CHECK_THROWS_AS(ck.flush(), rf::ckpt::CheckpointWriteFailed);
  CHECK(steps_in(d.path) == std::vector<int64_t>{30});
  CHECK(full == 0);
}

TEST_CASE("resume: a checkpoint that cannot be read is skipped; none readable is an error, never a fresh start") {
  TempDir d;
  Trainee t, r;
  t.set(1.0f);
  rf::ckpt::write_checkpoint_file(d.path, 10, image_of(t, 10));
  const std::string digest10 = t.digest();
  // A file open() cannot read (ELOOP here; on a failing disk EIO): its bytes may be intact.
  fs::create_symlink("ckpt-000000020.safetensors", d / "ckpt-000000020.safetensors");
  std::ostringstream warn;
  auto p = rf::ckpt::resume_newest(d.path, *r.model, *r.sgd, {.model = "tiny"}, warn);
  REQUIRE(p);
  CHECK(p->meta.step == 10);
  CHECK(r.digest() == digest10);
  CHECK(warn.str().find("resume: skipping " + d / "ckpt-000000020.safetensors") == 0);
  CHECK(warn.str().find("the storage failed") != std::string::npos);

  fs::remove(d / "ckpt-000000010.safetensors");
  Trainee fresh;
  const std::string before = fresh.digest();
  CHECK_THROWS_WITH_AS(rf::ckpt::resume_newest(d.path, *fresh.model, *fresh.sgd, {.model = "tiny"}, warn),
                       doctest::Contains("not starting fresh over them"), rf::ckpt::UnreadableError);
  CHECK(fresh.digest() == before);
}

TEST_CASE("resume: a checkpoint truncated by a full disk is named as such and the older one used") {
  TempDir d;
  Trainee t, r;
  rf::ckpt::write_checkpoint_file(d.path, 10, image_of(t, 10));
  t.set(3.0f);
  rf::ckpt::write_checkpoint_file(d.path, 20, image_of(t, 20));
  const std::string newest = d / "ckpt-000000020.safetensors";
  fs::resize_file(newest, fs::file_size(newest) - 100);  // the data cut short
  std::ostringstream warn;
  auto p = rf::ckpt::resume_newest(d.path, *r.model, *r.sgd, {.model = "tiny"}, warn);
  REQUIRE(p);
  CHECK(p->meta.step == 10);
  CAPTURE(warn.str());
  CHECK(warn.str().find("truncated: a write cut short, e.g. by a full disk") != std::string::npos);
}
