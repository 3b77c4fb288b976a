// One rank without fault tolerance, the program's own step (TrainerConfig::local_step, e.g.
// models/graph_step.h's CUDA graph): the batch of step s gathered on the host, the whole
// step (forward, backward, the division by the batch's size, the optimizer) done by the
// program, then an applied step's hooks as after the trainer's own step. One rank has
// nothing to reduce: the communicator is not used, and no coordinator is told.
#include "base/log.h"
#include "ddp/trainer_impl.h"

namespace rf::ddp {

std::optional<WorkerEvent> Trainer::Impl::local_train_step(int64_t s, StepRates& rates) {
  StepTimes t;
  t.began = Clock::now();
  watch.begin_step(s);
  const TraceArgs ta{.step = s, .generation = static_cast<int64_t>(current.plan.generation), .rank = current.rank};
  const auto idx = sampler.local_batch(s, current.rank, current.world);  // W = 1: the global batch (R3)
  const auto samples = static_cast<int64_t>(idx.size());
  Tensor x = Tensor::empty({samples, ds.c, ds.h, ds.w});
  y_buf.resize(static_cast<size_t>(samples));
  data::gather_batch(ds, idx, x.data(), y_buf.data());
  const Tensor loss_sum = cfg.local_step(x, y_buf);
  // The step's one wait for the device; the mean as the reducer computes it.
  local_loss = static_cast<double>(loss_sum.item()) / static_cast<double>(samples);
  t.end = Clock::now();
  tracer.span("step", Tracer::kTrain, t.began, t.end, ta);
  state.set_step(s);
  log::set_step(s);
  watch.end_step(t.end - t.began);
  ControlBlock sums;
  sums.samples = samples;
  return after_apply(s, sums, rates);
}

}  // namespace rf::ddp
