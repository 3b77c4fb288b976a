// ddp_worker — the example worker of the ddp tests: the resilient Trainer on a small MLP
// and synthetic data, launched by `ringfence run`. At the end it writes a JSON result
// (last step, state digest, final loss, generation, world, recoveries) that the tests
// compare between runs.
//   ddp_worker --result-dir DIR [--audit-dir DIR] [--steps N] [--batch B] [--samples N]
//              [--hidden H] [--seed S] [--verify-every N] [--bucket-kib K] [--no-overlap] [--overlap-ab K]
//              [--stall-ms M] [--log-interval N] [--lr LR] [--micro-shards M]  (exact mode)
//              [--ckpt-dir D --ckpt-every N [--resume]]
//              [--corrupt-at STEP]                 slot 1 silently changes a weight after STEP
//              [--replacement-waits-for-world N --event-log F]
//                  a replacement (incarnation > 0) joins only once the coordinator's event
//                  log F shows a generation of world N running (a shrink happened first)
//              [--hold-shrunk-until-grow]  after the first step applied in a world smaller
//                  than RINGFENCE_WORLD, wait until the coordinator's reconfigure flag (a
//                  joiner waits) has reached this worker
//              [--hold-at STEP]  after applying STEP, wait until a graceful stop was asked
//                  for (the test signals the launcher once STEP is applied)
// The holds are conditions, never sleeps: every one has a deadline (--hold-deadline-s,
// 60 s) after which the worker fails naming what it waited for.
// --audit-dir also receives comm's flight records (flight-*.jsonl) instead of stderr.
#include <poll.h>

#include <chrono>
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
  int64_t corrupt_at = -1;
  int wait_world = 0;
  bool hold_shrunk = false;
  int64_t hold_at = -1;
  int hold_deadline_s = 60;
  std::string result_dir, audit_dir, event_log;
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
      else if (f == "--overlap-ab") cfg.overlap_ab_period = std::stoll(val());
      else if (f == "--micro-shards") cfg.micro_shards = std::stoi(val());
      else if (f == "--stall-ms") cfg.stall.ceiling = std::chrono::milliseconds(std::stoll(val()));
      else if (f == "--log-interval") cfg.log_interval = std::stoll(val());
      else if (f == "--replacement-waits-for-world") wait_world = std::stoi(val());
      else if (f == "--event-log") event_log = val();
      else if (f == "--hold-shrunk-until-grow") hold_shrunk = true;
      else if (f == "--hold-at") hold_at = std::stoll(val());
      else if (f == "--hold-deadline-s") hold_deadline_s = std::stoi(val());
      else if (f == "--corrupt-at") corrupt_at = std::stoll(val());
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
  const auto hold_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(hold_deadline_s);
  // Polls cond every 2 ms (a condition, not a timed wait) until it holds or the deadline.
  auto wait_until = [&](const char* what, const auto& cond) {
    while (!cond()) {
      if (std::chrono::steady_clock::now() > hold_deadline)
        throw Error(str("ddp_worker ", tag, ": waited ", hold_deadline_s, " s for ", what));
      ::poll(nullptr, 0, 2);
    }
  };
  try {
    // A replacement that comes after the join window: the group shrinks first and grows
    // back at a step boundary (docs/protocol.md "Planned changes").
    if (wait_world > 0 && inc && std::string(inc) != "0") {
      if (event_log.empty()) throw InvalidInput("--replacement-waits-for-world needs --event-log");
      const std::string want = str("world ", wait_world);
      wait_until("the shrunk generation to run", [&] {
        std::ifstream f(event_log);
        for (std::string line; std::getline(f, line);) {
          if (line.empty() || line.back() != '}') continue;  // a line still being written
          const auto j = nlohmann::json::parse(line, nullptr, false);
          if (!j.is_discarded() && j.value("event", "") == "running" && j.value("detail", "") == want) return true;
        }
        return false;
      });
    }
    auto model = ddp::testing::make_test_mlp(cfg.seed + 1, hidden);
    const data::Dataset ds = ddp::testing::make_test_data(samples, cfg.seed + 2);
    optim::SGD sgd(model->named_parameters(), {.lr = lr, .momentum = 0.9f});
    const bool corrupt = corrupt_at >= 0 && slot && std::string(slot) == "1";
    const char* target_world = std::getenv("RINGFENCE_WORLD");
    const int target = target_world ? std::atoi(target_world) : 0;
    ddp::Trainer* trainer_ptr = nullptr;
    bool held_shrunk = false;
    cfg.on_step = [&](int64_t s, double) {
      if (corrupt && s == corrupt_at) model->parameters()[0].values()[0] += 1e-3f;  // silent corruption
      const ddp::Trainer& t = *trainer_ptr;
      if (hold_shrunk && !held_shrunk && t.progress().world < target) {
        held_shrunk = true;
        wait_until("the reconfigure flag (a joiner)", [&] { return t.progress().reconfigure_requested; });
      }
      if (s == hold_at) wait_until("a graceful stop", [&] { return t.progress().stop_requested; });
    };
    ddp::Trainer trainer(*model, ddp::testing::sum_loss, ds, sgd, cfg);
    trainer_ptr = &trainer;
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
