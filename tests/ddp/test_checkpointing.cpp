// Checkpointing: when rank 0 saves (periodic, deferred while the writer is busy, forced,
// never a step twice), the refusal of a directory holding another run's checkpoints, and
// the restores from disk.
#include <doctest/doctest.h>

#include <fstream>
#include <memory>
#include <vector>

#include "base/error.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/format_error.h"
#include "core/optim/sgd.h"
#include "ddp/checkpointing.h"
#include "ddp/train_state.h"
#include "../data/temp_dir.h"
#include "test_model.h"

using namespace rf;
using namespace rf::ddp;

namespace {

// Records what it was asked to do; `busy` is what writing() says.
struct FakeLog {
  std::vector<int64_t> saved;  // steps, in order
  std::vector<ckpt::SnapshotMeta> metas;
  std::vector<ckpt::StorageFault> faults;
  std::vector<ckpt::SaveKind> kinds;
  int reports = 0, flushes = 0, made = 0;
  bool busy = false;
  bool fail_flush = false;  // flush() says the newest saved state is not on disk
};
class FakeWriter final : public CheckpointWriter {
 public:
  explicit FakeWriter(FakeLog& log) : log_(log) {}
  bool writing() const override { return log_.busy; }
  void save(const nn::Module&, const optim::Optimizer&, const ckpt::SnapshotMeta& meta,
            const ckpt::StorageFault& fault, ckpt::SaveKind kind) override {
    log_.saved.push_back(meta.step);
    log_.kinds.push_back(kind);
    log_.metas.push_back(meta);
    log_.faults.push_back(fault);
  }
  void report() override { ++log_.reports; }
  void flush() override {
    ++log_.flushes;
    if (log_.fail_flush) throw ckpt::CheckpointWriteFailed("the checkpoint of step 6 could not be written (full)");
  }
  int64_t failures() const override { return log_.fail_flush ? 1 : 0; }
  std::string last_error() const override { return log_.fail_flush ? "full" : ""; }
  void set_newest_valid(int64_t, const std::string&) override {}

 private:
  FakeLog& log_;
};

struct Worker {
  std::shared_ptr<nn::Sequential> model;
  optim::SGD sgd;
  TrainState state;
  Worker(uint64_t seed = 7)
      : model(ddp::testing::make_test_mlp(seed, 16)), sgd(model->named_parameters(), optim::SgdOptions{}),
        state(*model, sgd, "mlp") {}
};

CheckpointingOptions options(const std::string& dir, int64_t every = 0, bool resume = false) {
  return {.dir = dir, .every = every, .keep = 3, .resume = resume, .model_name = "mlp"};
}

CheckpointWriterFactory fake(FakeLog& log) {
  return [&log](const ckpt::CheckpointerOptions&) {
    ++log.made;
    return std::make_unique<FakeWriter>(log);
  };
}

const CheckpointOrigin kRank0{.rank = 0, .world = 2, .generation = 1, .job_id = "job-a"};

}  // namespace

TEST_CASE("checkpointing: periodic saves every N steps, deferred while the writer is busy") {
  Worker w;
  FakeLog log;
  Checkpointing c(options("/nonexistent-not-written", 2), *w.model, w.sgd, w.state, fake(log));
  w.state.set_step(0);
  c.after_step(kRank0, false);  // not due: (0 + 1) % 2
  CHECK(log.made == 0);
  w.state.set_step(1);
  c.after_step(kRank0, false);  // due
  CHECK(log.saved == std::vector<int64_t>{1});
  CHECK(log.reports == 1);
  log.busy = true;
  w.state.set_step(3);
  c.after_step(kRank0, false);  // due, writer busy: deferred, training does not wait
  CHECK(c.deferred());
  w.state.set_step(4);
  c.after_step(kRank0, false);  // still busy: still deferred
  CHECK(c.deferred());
  CHECK(log.saved == std::vector<int64_t>{1});
  log.busy = false;
  w.state.set_step(5);
  c.after_step(kRank0, false);  // the writer is free: the deferred one is taken now
  CHECK_FALSE(c.deferred());
  CHECK(log.saved == std::vector<int64_t>{1, 5});
  CHECK(c.saved_step() == 5);
  CHECK(log.made == 1);  // one writer for the whole run
}

TEST_CASE("checkpointing: a forced save waits for nobody, and no step is saved twice") {
  Worker w;
  FakeLog log;
  Checkpointing c(options("/nonexistent-not-written"), *w.model, w.sgd, w.state, fake(log));
  w.state.set_step(-1);
  c.final_save(kRank0);  // nothing applied yet: nothing to save
  CHECK(log.made == 0);
  w.state.set_step(6);
  log.busy = true;
  c.after_step(kRank0, true);  // checkpoint-now (R5): saved even though the writer is busy
  CHECK(log.saved == std::vector<int64_t>{6});
  c.after_step(kRank0, true);
  c.final_save(kRank0);  // the end of training at the step just saved: flushed, not saved again
  CHECK(log.saved == std::vector<int64_t>{6});
  CHECK(log.flushes == 1);
}

TEST_CASE("checkpointing: the final state's save is Final (it may be staged), a periodic one's Periodic") {
  Worker w;
  FakeLog log;
  Checkpointing c(options("/nonexistent-not-written", /*every=*/2), *w.model, w.sgd, w.state, fake(log));
  w.state.set_step(1);
  c.after_step(kRank0, false);  // periodic
  w.state.set_step(3);
  c.after_step(kRank0, true, rf::ckpt::SaveKind::Final);  // the job's last step (or the stop's)
  w.state.set_step(4);
  c.final_save(kRank0);  // a step not saved yet
  CHECK(log.saved == std::vector<int64_t>{1, 3, 4});
  CHECK(log.kinds == std::vector<rf::ckpt::SaveKind>{rf::ckpt::SaveKind::Periodic, rf::ckpt::SaveKind::Final,
                                                     rf::ckpt::SaveKind::Final});
}

TEST_CASE("checkpointing: only rank 0 saves; a former rank 0 still drains its writer") {
  Worker w;
  FakeLog log;
  Checkpointing c(options("/nonexistent-not-written", 1), *w.model, w.sgd, w.state, fake(log));
  const CheckpointOrigin rank1{.rank = 1, .world = 2, .generation = 1, .job_id = "job-a"};
  w.state.set_step(0);
  c.after_step(rank1, true);
  CHECK(log.made == 0);
  c.after_step(kRank0, false);
  CHECK(log.saved == std::vector<int64_t>{0});
  w.state.set_step(1);
  c.after_step(rank1, false);  // now rank 1 (a new generation): no save, but reports
  c.final_save(rank1);
  CHECK(log.saved == std::vector<int64_t>{0});
  CHECK(log.reports == 2);
  CHECK(log.flushes == 1);
}

TEST_CASE("checkpointing: no directory, no checkpoints") {
  Worker w;
  FakeLog log;
  Checkpointing c(options(""), *w.model, w.sgd, w.state, fake(log));
  w.state.set_step(3);
  c.after_step(kRank0, true);
  c.final_save(kRank0);
  CHECK(log.made == 0);
  CHECK_NOTHROW(c.refuse_foreign());
  CHECK_FALSE(c.restore_own("job-a", 2));
}

TEST_CASE("checkpointing: a fresh start refuses a directory holding another run's checkpoints") {
  TempDir dir;
  Worker w;
  Checkpointing empty(options(dir.path.string()), *w.model, w.sgd, w.state);
  CHECK_NOTHROW(empty.refuse_foreign());
  { std::ofstream(dir.file("notes.txt")) << "not a checkpoint"; }
  CHECK_NOTHROW(empty.refuse_foreign());  // only checkpoints count
  {
    Checkpointing writer(options(dir.path.string()), *w.model, w.sgd, w.state);
    w.state.set_step(4);
    writer.final_save(kRank0);  // the real writer: ckpt-000000004.safetensors
  }
  REQUIRE(ckpt::list_checkpoints(dir.path.string()).size() == 1);
  Worker fresh;
  Checkpointing c(options(dir.path.string()), *fresh.model, fresh.sgd, fresh.state);
  bool refused = false;
  try {
    c.refuse_foreign();
  } catch (const InvalidInput& e) {
    refused = true;
    CHECK(std::string(e.what()).find(dir.path.string()) != std::string::npos);
    CHECK(std::string(e.what()).find("--resume") != std::string::npos);
  }
  CHECK(refused);
  Checkpointing resuming(options(dir.path.string(), 0, true), *fresh.model, fresh.sgd, fresh.state);
  CHECK_NOTHROW(resuming.refuse_foreign());  // with resume the files are this lineage's
}

TEST_CASE("checkpointing: restores bring back the saved step and state; a whole-job restart only its own job's") {
  TempDir dir;
  Worker a(7);
  {
    Checkpointing writer(options(dir.path.string()), *a.model, a.sgd, a.state);
    a.state.set_step(9);
    writer.final_save(kRank0);
  }
  const std::string saved = a.state.digest();
  Worker b(8);  // another initial state
  REQUIRE(b.state.digest() != saved);
  Checkpointing other_job(options(dir.path.string()), *b.model, b.sgd, b.state);
  // job-a's intact checkpoint: refused, never taken as job-b's (the trainer stops the job)
  CHECK_THROWS_AS(other_job.restore_own("job-b", 3), ckpt::ForeignStateError);
  CHECK(other_job.resumed_step() == -1);
  CHECK(b.state.step() == -1);
  Checkpointing own(options(dir.path.string()), *b.model, b.sgd, b.state);
  REQUIRE(own.restore_own("job-a", 3));
  CHECK(b.state.step() == 9);
  CHECK(b.state.digest() == saved);
  CHECK(own.resumed_step() == 9);
  CHECK(own.saved_step() == 9);  // a restored step is on disk already: never saved again
  Checkpointing any(options(dir.path.string(), 0, true), *b.model, b.sgd, b.state);
  CHECK(any.restore_newest("", 0));  // `resume`: any job's newest
}

TEST_CASE("checkpointing: every checkpoint records the optimizer's hyper-parameters and the data order") {
  // Under `ringfence run` they were {} and absent: resuming by hand warned of other
  // hyper-parameters though they were the same.
  Worker w;
  FakeLog log;
  CheckpointingOptions o = options("/nonexistent-not-written", 1);
  o.optimizer_hparams = R"({"lr":0.05,"momentum":0.9})";
  o.data_order = R"({"batch":128,"samples":60000,"seed":0})";
  Checkpointing c(o, *w.model, w.sgd, w.state, fake(log));
  w.state.set_step(0);
  c.after_step(kRank0, false);
  REQUIRE(log.metas.size() == 1);
  CHECK(log.metas[0].optimizer_hparams == o.optimizer_hparams);
  CHECK(log.metas[0].data_order == o.data_order);
  CHECK(log.metas[0].job_id == "job-a");
  CHECK(log.metas[0].world_size == 2);
}

TEST_CASE("checkpointing: the storage fault of a step goes with its save") {
  Worker w;
  FakeLog log;
  Checkpointing c(options("/nonexistent-not-written", 1), *w.model, w.sgd, w.state, fake(log));
  std::vector<int64_t> asked;
  c.set_storage_faults([&](int64_t s) {
    asked.push_back(s);
    return s == 1 ? ckpt::StorageFault{.err = 28} : ckpt::StorageFault{};
  });
  for (int64_t s : {0, 1, 2}) {
    w.state.set_step(s);
    c.after_step(kRank0, false);
  }
  CHECK(asked == std::vector<int64_t>{0, 1, 2});
  REQUIRE(log.faults.size() == 3);
  CHECK(log.faults[1].err == 28);
  CHECK(log.faults[2].err == 0);
}

TEST_CASE("checkpointing: the final state not on disk is rank 0's error; a former rank 0's only a warning") {
  Worker w;
  FakeLog log;
  Checkpointing c(options("/nonexistent-not-written"), *w.model, w.sgd, w.state, fake(log));
  w.state.set_step(6);
  log.fail_flush = true;
  CHECK_THROWS_WITH_AS(c.final_save(kRank0),
                       ("the final state (step 6, state " + w.state.digest() +
                        ") is not in the checkpoint directory: the checkpoint of step 6 could not be written (full)").c_str(),
                       ckpt::CheckpointWriteFailed);
  CHECK(c.failures() == 1);
  CHECK(c.last_error() == "full");
  const CheckpointOrigin rank1{.rank = 1, .world = 2, .generation = 2, .job_id = "job-a"};
  CHECK_NOTHROW(c.final_save(rank1));  // the final checkpoint is the new rank 0's
}
