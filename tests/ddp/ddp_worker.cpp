// ddp_worker — the example worker of the ddp tests: the resilient Trainer on a small MLP
// and synthetic data, launched by `ringfence run`. At the end it writes a JSON result
// (last step, state digest, final loss, generation, world, recoveries) that the tests
// compare between runs.
//   ddp_worker --result-dir DIR [--audit-dir DIR] [--steps N] [--batch B] [--samples N]
//              [--hidden H] [--seed S] [--verify-every N] [--bucket-kib K] [--no-overlap]
//              [--stall-ms M] [--log-interval N] [--lr LR] [--replacement-delay-ms M]
//              [--ckpt-dir D --ckpt-every N [--resume]]
//              [--corrupt-at STEP] [--step-ms M] [--hang-ms M]  (slot 1 silently changes a weight after STEP)
// --audit-dir also receives comm's flight records (flight-*.jsonl) instead of stderr.
#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/str.h"
#include "core/optim/sgd.h"
#include "core/state_digest.h"
#include "ddp/trainer.h"
#include "elastic/errors.h"
#include "test_model.h"

using namespace rf;

int main(int argc, char** argv) {
  ddp::TrainerConfig cfg;
  cfg.steps = 40;
  cfg.global_batch = 64;
  int64_t samples = 2048, hidden = 64;
  float lr = 0.02f;
  int replacement_delay_ms = 0;
  int64_t corrupt_at = -1;
  int step_ms = 0;  // extra compute per step (stands in for a bigger model)  // slot 1 flips a parameter bit after applying this step
  std::string result_dir, audit_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw InvalidInput(str("ddp_worker: ", f, " needs a value"));
      return argv[++i];
    };
    try {
      if (f == "--steps") cfg.steps = std::stoll(val());
      else if (f == "--batch") cfg.global_batch = std::stoll(val());
      else if (f == "--samples") samples = std::stoll(val());
      else if (f == "--lr") lr = std::stof(val());
      else if (f == "--hidden") hidden = std::stoll(val());
      else if (f == "--seed") cfg.seed = std::stoull(val());
      else if (f == "--verify-every") cfg.verify_every = std::stoll(val());
      else if (f == "--bucket-kib") cfg.reducer.bucket_cap_bytes = std::stoull(val()) << 10;
      else if (f == "--no-overlap") cfg.reducer.overlap = false;
      else if (f == "--stall-ms") cfg.stall_timeout = std::chrono::milliseconds(std::stoll(val()));
      else if (f == "--log-interval") cfg.log_interval = std::stoll(val());
      else if (f == "--replacement-delay-ms") replacement_delay_ms = std::stoi(val());
      else if (f == "--corrupt-at") corrupt_at = std::stoll(val());
      else if (f == "--hang-ms") cfg.hang_timeout = std::chrono::milliseconds(std::stoll(val()));
      else if (f == "--step-ms") step_ms = std::stoi(val());
      else if (f == "--ckpt-dir") cfg.ckpt_dir = val();
      else if (f == "--ckpt-every") cfg.ckpt_every = std::stoll(val());
      else if (f == "--resume") cfg.resume = true;
      else if (f == "--result-dir") result_dir = val();
      else if (f == "--audit-dir") audit_dir = val();
      else {
        std::fprintf(stderr, "ddp_worker: unknown option %s\n", f.c_str());
        return 2;
      }
    } catch (const std::logic_error&) {
      std::fprintf(stderr, "ddp_worker: bad value for %s\n", f.c_str());
      return 2;
    }
  }
  const char* slot = std::getenv("RINGFENCE_SLOT");
  const char* inc = std::getenv("RINGFENCE_INCARNATION");
  const std::string tag = str("slot", slot ? slot : "x", "-inc", inc ? inc : "x");
  if (!audit_dir.empty()) {
    cfg.audit_log = audit_dir + "/audit-" + tag + ".jsonl";
    cfg.flight_recorder = audit_dir + "/flight-" + tag + ".jsonl";
  }
  // A slow restart (models a replacement that comes after the join window, so the group
  // shrinks first and grows back at a step boundary: PROTOCOL.md "Planned changes").
  if (replacement_delay_ms > 0 && inc && std::string(inc) != "0") ::poll(nullptr, 0, replacement_delay_ms);
  try {
    auto model = ddp::testing::make_test_mlp(cfg.seed + 1, hidden);
    const data::Dataset ds = ddp::testing::make_test_data(samples, cfg.seed + 2);
    optim::SGD sgd(model->named_parameters(), {.lr = lr, .momentum = 0.9f});
    const bool corrupt = corrupt_at >= 0 && slot && std::string(slot) == "1";
    cfg.on_step = [&](int64_t s, double) {
      if (corrupt && s == corrupt_at) model->parameters()[0].values()[0] += 1e-3f;  // silent corruption
      if (step_ms > 0) ::poll(nullptr, 0, step_ms);
    };
    ddp::Trainer trainer(*model, ddp::testing::sum_loss, ds, sgd, cfg);
    const ddp::TrainerResult r = trainer.run();
    if (!result_dir.empty()) {
      nlohmann::json j = {{"step", r.step},           {"digest", r.digest},         {"final_loss", r.final_loss},
                          {"generation", r.generation}, {"world", r.world},         {"recoveries", r.recoveries},
                          {"standby", r.standby},     {"state_digest", state_digest(*model, sgd)},
                          {"train_seconds", r.train_seconds},
                          {"resumed_step", r.resumed_step}};
      std::ofstream f(result_dir + "/result-" + tag + ".json");
      f << j.dump() << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_worker %s: %s\n", tag.c_str(), e.what());
    return 1;
  }
}
