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
#include "ckpt/staging.h"
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

TEST_CASE("plan_staging: only out of space, only with older checkpoints, only when they make room") {
  using rf::ckpt::StagingVerdict;
  const auto plan = [](int err, uint64_t available, std::vector<rf::ckpt::SizedCheckpoint> on_disk) {
    return rf::ckpt::plan_staging(
        {.err = err, .step = 50, .bytes = 5000, .available = available, .block = 1000, .on_disk = std::move(on_disk)});
  };
  const std::vector<rf::ckpt::SizedCheckpoint> one = {{{30, "c30"}, 5000}};
  auto p = plan(ENOSPC, 1000, one);  // 1000 free + 5000 freed = 6000 = 5000 + a spare block
  CHECK(p.verdict == StagingVerdict::Stage);
  REQUIRE(p.remove.size() == 1);
  CHECK(p.remove[0].path == "c30");
  CHECK(plan(EDQUOT, 1000, one).verdict == StagingVerdict::Stage);
  CHECK(plan(ENOSPC, 999, one).verdict == StagingVerdict::TooSmall);  // no spare block
  CHECK(plan(ENOSPC, 999, one).remove.empty());
  CHECK(plan(ENOSPC, 0, {{{30, "c30"}, 4001}}).verdict == StagingVerdict::TooSmall);  // 4001 takes 5000 in blocks
  CHECK(plan(ENOSPC, 1000, {{{30, "c30"}, 4001}}).verdict == StagingVerdict::Stage);
  CHECK(plan(EIO, 1 << 30, one).verdict == StagingVerdict::NotOutOfSpace);
  CHECK(plan(EROFS, 1 << 30, one).verdict == StagingVerdict::NotOutOfSpace);
  CHECK(plan(ENOSPC, 1 << 30, {}).verdict == StagingVerdict::NothingOlder);
  // A newer file (an abandoned lineage) is not older: it neither goes nor makes room.
  CHECK(plan(ENOSPC, 1 << 30, {{{60, "c60"}, 5000}}).verdict == StagingVerdict::NothingOlder);
  p = plan(ENOSPC, 0, {{{60, "c60"}, 9000}, {{40, "c40"}, 3000}, {{30, "c30"}, 3000}});
  CHECK(p.verdict == StagingVerdict::Stage);
  CHECK(p.remove.size() == 2);
}

namespace {
// An AsyncCheckpointer whose directory is full for the next `full` writes into it (its hook
// throws as write() would; the staging directory has no hook), staging into `staging`.
struct FullDisk {
  TempDir d, staging;
  Trainee t;
  std::ostringstream log;
  int full = 0;
  std::unique_ptr<rf::ckpt::AsyncCheckpointer> ck;
  explicit FullDisk(bool with_staging = true) {
    ck = std::make_unique<rf::ckpt::AsyncCheckpointer>(
        rf::ckpt::CheckpointerOptions{.dir = d.path, .keep = 3,
                                      .staging_dir = with_staging ? staging.path : std::string(),
                                      .partial_write_hook =
                                          [this](const std::string& tmp, size_t, size_t) {
                                            if (full > 0) {
                                              --full;
                                              throw StorageError(tmp, StorageOp::Write, ENOSPC);
                                            }
                                          }},
        &log);
    ck->save(*t.model, *t.sgd, meta_at(9));
    ck->flush();
  }
  void save_final(int64_t step, const StorageFault& fault = {}) {
    t.set(static_cast<float>(step));
    ck->save(*t.model, *t.sgd, meta_at(step), fault, rf::ckpt::SaveKind::Final);
  }
};
}  // namespace

TEST_CASE("AsyncCheckpointer: a final checkpoint with room only without the older one is staged, then fits") {
  FullDisk f;
  f.full = 1;  // the first try finds the disk full; after step 9's file goes, 19 fits
  f.save_final(19);
  f.ck->flush();  // no throw: the final state is in the directory
  CHECK(steps_in(f.d.path) == std::vector<int64_t>{19});
  CHECK(f.ck->failures() == 0);
  CHECK(f.ck->newest_valid() == f.d / "ckpt-000000019.safetensors");
  CHECK(names_in(f.staging.path).empty());  // the staged copy is gone
  const std::string log = f.log.str();
  CHECK(log.find("ckpt: step 19's checkpoint does not fit next to the older ones in " + f.d.path +
                 ": staged it as " + f.staging.path + "/ringfence-ckpt-") != std::string::npos);
  CHECK(log.find("ckpt: removed " + f.d / "ckpt-000000009.safetensors" + " (step 19 is staged)") != std::string::npos);
  CHECK(log.find("ckpt: moved the staged checkpoint of step 19 into " + f.d.path) != std::string::npos);
  Trainee back(11);
  std::ostringstream warn;
  const auto p = rf::ckpt::resume_newest(f.d.path, *back.model, *back.sgd, {.model = "tiny"}, warn);
  REQUIRE(p);
  CHECK(p->meta.step == 19);
  CHECK(back.digest() == f.t.digest());
}

TEST_CASE("AsyncCheckpointer: a periodic checkpoint is never staged; neither is an injected full disk's") {
  FullDisk f;
  f.full = 1;
  f.t.set(19.0f);
  f.ck->save(*f.t.model, *f.t.sgd, meta_at(19));  // periodic
  CHECK_THROWS_AS(f.ck->flush(), rf::ckpt::CheckpointWriteFailed);
  CHECK(steps_in(f.d.path) == std::vector<int64_t>{9});
  CHECK(names_in(f.staging.path).empty());
  // An injected full disk stays full: moving the older one out would not make room.
  f.save_final(29, StorageFault{.err = ENOSPC});
  const std::string named = "newest valid checkpoint is " + f.d / "ckpt-000000009.safetensors";
  CHECK_THROWS_WITH_AS(f.ck->flush(), doctest::Contains(named.c_str()), rf::ckpt::CheckpointWriteFailed);
  CHECK(steps_in(f.d.path) == std::vector<int64_t>{9});
  CHECK(names_in(f.staging.path).empty());
  // Not out of space: staging would not help.
  f.save_final(39, StorageFault{.err = EIO});
  CHECK_THROWS_AS(f.ck->flush(), rf::ckpt::CheckpointWriteFailed);
  CHECK(steps_in(f.d.path) == std::vector<int64_t>{9});
  CHECK(names_in(f.staging.path).empty());
}

TEST_CASE("AsyncCheckpointer: staging that fails touches nothing; without a staging directory none is tried") {
  {
    FullDisk f;
    fs::remove_all(f.staging.path);  // the staging directory is gone: mkdtemp fails
    f.full = 1;
    f.save_final(19);
    try {
      f.ck->flush();
      FAIL("flush did not throw");
    } catch (const rf::ckpt::CheckpointWriteFailed& e) {
      const std::string what = e.what();
      CHECK(what.find("write failed: No space left on device; " + f.staging.path + ": create") != std::string::npos);
      CHECK(what.find("the newest valid checkpoint is " + f.d / "ckpt-000000009.safetensors") != std::string::npos);
    }
    CHECK(steps_in(f.d.path) == std::vector<int64_t>{9});
  }
  FullDisk f(/*with_staging=*/false);
  f.full = 1;
  f.save_final(19);
  CHECK_THROWS_AS(f.ck->flush(), rf::ckpt::CheckpointWriteFailed);
  CHECK(steps_in(f.d.path) == std::vector<int64_t>{9});
  CHECK(f.full == 0);  // one try only
}

TEST_CASE("AsyncCheckpointer: staged, then the directory fills again: the staged copy is the newest valid one") {
  FullDisk f;
  f.full = 2;  // full before staging and again after step 9's file went
  f.save_final(19);
  std::string staged;
  try {
    f.ck->flush();
    FAIL("flush did not throw");
  } catch (const rf::ckpt::CheckpointWriteFailed& e) {
    const std::string what = e.what();
    CHECK(what.find("(after staging); the final checkpoint stays at " + f.staging.path) != std::string::npos);
    CHECK(what.find("the newest valid checkpoint is " + f.staging.path + "/ringfence-ckpt-") != std::string::npos);
  }
  staged = f.ck->newest_valid();
  CHECK(staged.rfind(f.staging.path + "/ringfence-ckpt-", 0) == 0);
  CHECK(steps_in(f.d.path).empty());  // step 9's went once 19 was durable in staging
  Trainee back(11);
  std::ostringstream warn;
  const auto p = rf::ckpt::resume_newest(fs::path(staged).parent_path().string(), *back.model, *back.sgd,
                                         {.model = "tiny"}, warn);
  REQUIRE(p);
  CHECK(p->meta.step == 19);
  CHECK(back.digest() == f.t.digest());
}
