// Recovery's contract with the trainer where it needs no coordinator: a failure is recovered
// from only with fault tolerance on; without a coordinator the caller rethrows.
#include <doctest/doctest.h>

#include <memory>

#include "base/error.h"
#include "comm/errors.h"
#include "core/optim/sgd.h"
#include "ddp/recovery.h"
#include "test_model.h"

using namespace rf;
using namespace rf::ddp;

TEST_CASE("recovery: failure() without a coordinator is a broken invariant (EnforceError), outside any handler too") {
  auto model = ddp::testing::make_test_mlp(7, 16);
  optim::SGD sgd(model->named_parameters(), optim::SgdOptions{});
  TrainState state(*model, sgd, "mlp");
  TrainerConfig cfg;
  CurrentGeneration current;
  Reducer reducer(model->named_parameters());
  StepWatch watch(cfg.stall);
  Checkpointing checkpointing(CheckpointingOptions{}, *model, sgd, state);
  Recovery recovery({cfg, current, state, reducer, watch, checkpointing});
  comm::CommErrorInfo info;
  info.rank = 0;
  info.collective = "all-reduce";
  info.peer = 1;
  const comm::PeerFailed failed(info);
  CHECK_THROWS_AS(recovery.failure(failed), EnforceError);
}
