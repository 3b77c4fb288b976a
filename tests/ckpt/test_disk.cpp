// Disk checkpoints: names, durable writes, keep-K pruning, the writer lock, the async
// writer, and resume falling back past damaged files to the newest valid one.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/async_checkpointer.h"
#include "base/str.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/format_error.h"
#include "ckpt/resume.h"
#include "core/nn/layers.h"
#include "core/nn/sequential.h"
#include "core/optim/sgd.h"
#include "core/random.h"
#include "tests/ckpt/disk_test_support.h"

namespace fs = std::filesystem;
using namespace rf::ckpt::testing;

namespace {

void write_state(const std::string& dir, Trainee& t, int64_t step) {
  std::vector<std::byte> image;
  rf::ckpt::serialize_state(*t.model, *t.sgd, meta_at(step), image);
  rf::ckpt::write_checkpoint_file(dir, step, image);
}

}  // namespace

TEST_CASE("checkpoint names sort like steps and parse back") {
  CHECK(rf::ckpt::checkpoint_name(49) == "ckpt-000000049.safetensors");
  CHECK(rf::ckpt::parse_checkpoint_name("ckpt-000000049.safetensors") == 49);
  CHECK(rf::ckpt::parse_checkpoint_name(rf::ckpt::checkpoint_name(12345678901)) == 12345678901);
  CHECK(!rf::ckpt::parse_checkpoint_name(".ckpt-000000049.safetensors.tmp"));
  CHECK(!rf::ckpt::parse_checkpoint_name("ckpt-.safetensors"));
  CHECK(!rf::ckpt::parse_checkpoint_name("ckpt--1.safetensors"));
  CHECK(!rf::ckpt::parse_checkpoint_name("ckpt-12a.safetensors"));
  CHECK(!rf::ckpt::parse_checkpoint_name("ckpt.lock"));
}

TEST_CASE("write_checkpoint_file: atomic name, listing newest first, keep-K pruning") {
  TempDir d;
  Trainee t(1);
  for (int64_t s : {9, 19, 29, 39, 49}) write_state(d.path, t, s);
  CHECK(steps_in(d.path) == std::vector<int64_t>{49, 39, 29, 19, 9});
  for (auto& e : fs::directory_iterator(d.path)) CHECK(e.path().extension() == ".safetensors");  // no temps left

  auto removed = rf::ckpt::prune_checkpoints(d.path, 2, 49);
  CHECK(removed.size() == 3);
  CHECK(steps_in(d.path) == std::vector<int64_t>{49, 39});
  // After resuming from 39 and writing 39 again, the abandoned 49 is stale and goes.
  removed = rf::ckpt::prune_checkpoints(d.path, 2, 39);
  CHECK(removed == std::vector<std::string>{d / "ckpt-000000049.safetensors"});
  CHECK(steps_in(d.path) == std::vector<int64_t>{39});
}

TEST_CASE("one writer per directory: the lock refuses a second writer until the first is gone") {
  TempDir d;
  {
    rf::ckpt::CheckpointLock first(d.path);
    // flock locks belong to the open file description, so a second open in this very
    // process conflicts exactly as another process would.
    CHECK_THROWS_AS(rf::ckpt::CheckpointLock(d.path), rf::ckpt::CheckpointLocked);
    try {
      rf::ckpt::CheckpointLock again(d.path);
    } catch (const rf::ckpt::CheckpointLocked& e) {
      CHECK(std::string(e.what()).find("another checkpoint writer") != std::string::npos);
      CHECK(std::string(e.what()).find(std::to_string(::getpid())) != std::string::npos);
    }
    rf::ckpt::CheckpointerOptions o{.dir = d.path};
    CHECK_THROWS_AS(rf::ckpt::AsyncCheckpointer(o, nullptr), rf::ckpt::CheckpointLocked);
  }
  rf::ckpt::CheckpointLock later(d.path);  // released with the first
}

TEST_CASE("AsyncCheckpointer: copies at save, writes in the background, keeps K, restores bitwise") {
  TempDir d;
  Trainee t(1);
  std::ostringstream log;
  std::vector<std::string> digests;
  {
    rf::ckpt::AsyncCheckpointer ck({.dir = d / "sub", .keep = 2}, &log);  // creates the dir
    for (int64_t s = 0; s < 4; ++s) {
      t.set(static_cast<float>(s));
      digests.push_back(t.digest());
      ck.save(*t.model, *t.sgd, meta_at(s));
      t.set(-1.0f);  // changed right after save: the file must hold the saved state
    }
    ck.flush();
    CHECK(ck.last_written_step() == 3);
    CHECK(ck.saves() == 4);
  }
  CHECK(steps_in(d / "sub") == std::vector<int64_t>{3, 2});
  CHECK(log.str().find("ckpt: wrote " + d / "sub/ckpt-000000003.safetensors") != std::string::npos);
  CHECK(log.str().find("ckpt: removed " + d / "sub/ckpt-000000000.safetensors") != std::string::npos);

  Trainee back(7);
  rf::ckpt::resume_from_file(d / "sub/ckpt-000000002.safetensors", *back.model, *back.sgd, {});
  CHECK(back.digest() == digests[2]);
  rf::ckpt::resume_from_file(d / "sub/ckpt-000000003.safetensors", *back.model, *back.sgd, {});
  CHECK(back.digest() == digests[3]);
}

TEST_CASE("AsyncCheckpointer: a temp file left by a killed writer is removed; a failed write is reported") {
  TempDir d;
  { std::ofstream(d / ".ckpt-000000007.safetensors.tmp") << "half a file"; }
  { std::ofstream(d / "notes.txt") << "not ours"; }
  Trainee t(1);
  std::ostringstream log;
  rf::ckpt::AsyncCheckpointer ck(
      {.dir = d.path, .keep = 3,
       .partial_write_hook = [](const std::string& tmp, size_t written, size_t total) {
         if (tmp.find("000000005") != std::string::npos)
           throw rf::Error(rf::str("injected failure after ", written, " of ", total, " bytes"));
       }},
      &log);
  CHECK(!fs::exists(d / ".ckpt-000000007.safetensors.tmp"));
  CHECK(fs::exists(d / "notes.txt"));
  CHECK(log.str().find("removed " + d / ".ckpt-000000007.safetensors.tmp") != std::string::npos);

  ck.save(*t.model, *t.sgd, meta_at(4));
  ck.save(*t.model, *t.sgd, meta_at(5));
  CHECK_THROWS_WITH_AS(ck.flush(), doctest::Contains("injected failure after"), rf::Error);
  CHECK(!fs::exists(d / ".ckpt-000000005.safetensors.tmp"));  // cleaned up, not renamed
  CHECK(steps_in(d.path) == std::vector<int64_t>{4});
  ck.save(*t.model, *t.sgd, meta_at(6));  // the writer goes on after a failure
  ck.flush();
  CHECK(steps_in(d.path) == std::vector<int64_t>{6, 4});
}

TEST_CASE("resume: the newest valid checkpoint; damaged newer ones are skipped with file and reason") {
  TempDir d;
  std::vector<std::string> digests;
  Trainee t(1);
  for (int64_t s : {10, 20, 30}) {
    t.set(static_cast<float>(s));
    digests.push_back(t.digest());
    write_state(d.path, t, s);
  }
  const std::string newest = d / "ckpt-000000030.safetensors";
  const auto size = fs::file_size(newest);
  Trainee r(9);
  std::ostringstream warn;
  std::string reason;

  SUBCASE("all intact: newest") {
    auto p = rf::ckpt::resume_newest(d.path, *r.model, *r.sgd, {.model = "tiny"}, warn);
    REQUIRE(p);
    CHECK(p->meta.step == 30);
    CHECK(r.digest() == digests[2]);
    CHECK(warn.str().empty());
    return;
  }
  SUBCASE("truncated") {
    fs::resize_file(newest, size / 2);
    reason = "";  // any of the header/offset errors; checked generically below
  }
  SUBCASE("a flipped byte in the data") {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 5));
    char c = 0;
    f.seekg(static_cast<std::streamoff>(size - 5));
    f.get(c);
    f.seekp(static_cast<std::streamoff>(size - 5));
    f.put(static_cast<char>(c ^ 0x10));
    reason = "corrupted: crc32c";
  }
  SUBCASE("a wrong header length") {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    const char len[8] = {0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00};  // 2^32 bytes
    f.write(len, 8);
    reason = "header";
  }
  SUBCASE("a header that is not JSON") {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put('#');  // was '{'
    reason = "JSON";
  }
  SUBCASE("renamed by hand: named for a step it does not hold") {
    fs::copy_file(d / "ckpt-000000010.safetensors", newest, fs::copy_options::overwrite_existing);
    reason = "step 10, expected step 30";
  }
  SUBCASE("vanished between listing and reading (a directory named like a checkpoint)") {
    fs::remove(newest);
    fs::create_directory(newest);
    reason = "ckpt-000000030.safetensors";
  }

  auto p = rf::ckpt::resume_newest(d.path, *r.model, *r.sgd, {.model = "tiny"}, warn);
  REQUIRE(p);
  CHECK(p->meta.step == 20);
  CHECK(p->path == d / "ckpt-000000020.safetensors");
  CHECK(r.digest() == digests[1]);
  CAPTURE(warn.str());
  CHECK(warn.str().find("resume: skipping " + newest + ": " + newest) == 0);
  CHECK(warn.str().find(reason) != std::string::npos);
  CHECK(warn.str().find("ckpt-000000020") == std::string::npos);  // only the bad one is named
}

TEST_CASE("resume: an intact checkpoint of another model or optimizer is refused, not skipped") {
  // Skipped, it let this run start in the directory (fresh, or from an older file) and its
  // checkpoints then overwrote and pruned the other run's: train_cnn --resume in train_mlp's
  // directory destroyed the MLP's checkpoints.
  TempDir d;
  Trainee t(1);
  t.set(10.0f);
  write_state(d.path, t, 10);  // an older checkpoint of ours: still not reached
  const std::string newest = d / "ckpt-000000030.safetensors";
  std::vector<std::byte> image;
  std::string reason;
  SUBCASE("another model's shapes") {
    Trainee other(1, /*hidden=*/5);
    rf::ckpt::serialize_state(*other.model, *other.sgd, meta_at(30), image);
    reason = "'0.weight' shape is [5, 4], expected [6, 4]";
  }
  SUBCASE("another model's name") {
    auto m = meta_at(30);
    m.model = "mlp";
    rf::ckpt::serialize_state(*t.model, *t.sgd, m, image);
    reason = "is a snapshot of model 'mlp', expected 'tiny'";
  }
  SUBCASE("another optimizer") {
    auto m = meta_at(30);
    m.optimizer = "adamw";
    rf::ckpt::serialize_state(*t.model, *t.sgd, m, image);
    reason = "holds optimizer 'adamw' state, expected 'sgd'";
  }
  std::ofstream(newest, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
  Trainee r(9);
  const std::string before = r.digest();
  std::ostringstream warn;
  try {
    rf::ckpt::resume_newest(d.path, *r.model, *r.sgd, {.model = "tiny", .optimizer = "sgd"}, warn);
    FAIL("resume_newest skipped another run's checkpoint");
  } catch (const rf::ckpt::ForeignStateError& e) {
    const std::string m = e.what();
    CAPTURE(m);
    CHECK(m.find(newest + ": ") == 0);
    CHECK(m.find(reason) != std::string::npos);
    CHECK(m.find("holds the state of another run; not resuming in " + d.path) != std::string::npos);
  }
  CHECK(r.digest() == before);  // nothing restored, not even the older file of ours
  CHECK(warn.str().empty());
}

TEST_CASE("resume: a checkpoint whose digests have no version, or another, is refused, never compared") {
  // This build computes "x3:" digests only. A file that records another version (or, written
  // before digests carried one, none) cannot be checked; every older file is of that
  // version too, so skipping it would start fresh over the run's work.
  TempDir d;
  Trainee t(1);
  t.set(10.0f);
  write_state(d.path, t, 10);  // an older checkpoint of ours: still not reached
  t.set(30.0f);
  const std::string x3 = t.digest();
  REQUIRE(x3.rfind("x3:", 0) == 0);
  std::string version, recorded;
  SUBCASE("no version: as written before digests were versioned") {
    version = "'none'";
    recorded = x3.substr(3);
  }
  SUBCASE("a version this build does not know") {
    version = "'x9'";
    recorded = "x9:" + x3.substr(3);
  }
  std::vector<std::byte> image;
  rf::ckpt::serialize_state(*t.model, *t.sgd, meta_at(30), image, /*rf_digest=*/recorded);
  // The image digest the writer recorded, rewritten to the same version (the header keeps
  // its length: spaces after the value are JSON whitespace).
  std::string bytes(reinterpret_cast<const char*>(image.data()), image.size());
  const std::string key = "\"state_digest\":\"";
  const size_t at = bytes.find(key + "x3:");
  REQUIRE(at != std::string::npos);
  const std::string old_value = bytes.substr(at + key.size(), 35);
  std::string new_value = old_value.substr(3);
  if (version == "'x9'") new_value = "x9:" + new_value;
  new_value += "\"" + std::string(35 - new_value.size(), ' ');
  bytes.replace(at + key.size(), 36, new_value);
  bytes.resize(image.size());
  const std::string newest = d / "ckpt-000000030.safetensors";
  std::ofstream(newest, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));

  Trainee r(9);
  const std::string before = r.digest();
  std::ostringstream warn;
  try {
    rf::ckpt::resume_newest(d.path, *r.model, *r.sgd, {.model = "tiny", .optimizer = "sgd"}, warn);
    FAIL("resume_newest compared or skipped a checkpoint of another digest version");
  } catch (const rf::ckpt::DigestVersionMismatch& e) {
    const std::string m = e.what();
    CAPTURE(m);
    CHECK(m.find(newest + ": metadata 'state_digest'") == 0);
    CHECK(m.find("of version " + version) != std::string::npos);
    CHECK(m.find("this build computes 'x3'") != std::string::npos);
    CHECK(m.find("not resuming in " + d.path) != std::string::npos);
  }
  CHECK(r.digest() == before);  // nothing restored, not even the older file of ours
  CHECK(warn.str().empty());
}

TEST_CASE("resume: none valid starts fresh with a warning; a demanded file is an error") {
  TempDir d;
  Trainee t(1), r(2);
  const std::string before = r.digest();
  std::ostringstream warn;
  CHECK(!rf::ckpt::resume_newest(d / "missing", *r.model, *r.sgd, {}, warn));
  CHECK(warn.str().find("no valid checkpoint") != std::string::npos);
  CHECK(warn.str().find("(none found)") != std::string::npos);

  write_state(d.path, t, 5);
  fs::resize_file(d / "ckpt-000000005.safetensors", 100);
  warn.str("");
  CHECK(!rf::ckpt::resume_newest(d.path, *r.model, *r.sgd, {}, warn));
  CHECK(warn.str().find("skipping " + d / "ckpt-000000005.safetensors") != std::string::npos);
  CHECK(warn.str().find("(1 skipped); starting fresh") != std::string::npos);
  CHECK(r.digest() == before);

  CHECK_THROWS_WITH_AS(rf::ckpt::resume_from_file(d / "ckpt-000000005.safetensors", *r.model, *r.sgd, {}),
                       doctest::Contains("ckpt-000000005.safetensors"), rf::ckpt::FormatError);
  CHECK_THROWS_WITH_AS(rf::ckpt::resume_from_file(d / "nope.safetensors", *r.model, *r.sgd, {}),
                       doctest::Contains("cannot open"), rf::ckpt::FormatError);
  CHECK(r.digest() == before);
}
