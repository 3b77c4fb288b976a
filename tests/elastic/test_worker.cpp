// A tiny worker for the multi-process tests: it uses the real Client exactly like the
// trainer will (join, report a fake state, follow the plan, ready, heartbeat its step),
// but its "state" is just the step number, so the digest of S is digest("state@<step>").
// A receiver "transfers" by adopting T. It obeys revocation (callback), the reconfigure
// and stop flags, self-fences and re-joins (D4), and the worker-side fault specs of
// RINGFENCE_INJECT (kill/exit/hang/stop at a step, only in incarnation 0 so the
// replacement does not repeat it).
//   test_worker [--steps N] [--step-ms M] [--init-state] [--bad-digest-slot S]
#include <signal.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/digest.h"
#include "base/str.h"
#include "elastic/client.h"
#include "elastic/fault_spec.h"

using namespace rf::elastic;
using namespace std::chrono_literals;

namespace {

std::atomic<bool> g_revoked{false};

void compute_for(int ms) { ::poll(nullptr, 0, ms); }  // stands in for forward/backward

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 100;
  int step_ms = 10;
  int bad_digest_slot = -1;
  bool init_state = false;  // report the initial state (step -1) as state, as after a restore
  for (int i = 1; i < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--init-state") {
      init_state = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "test_worker: %s needs a value\n", f.c_str());
      return 2;
    }
    if (f == "--steps") steps = std::atoll(argv[i + 1]);
    else if (f == "--step-ms") step_ms = std::atoi(argv[i + 1]);
    else if (f == "--bad-digest-slot") bad_digest_slot = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "test_worker: unknown option %s\n", f.c_str());
      return 2;
    }
  }
  try {
    ClientOptions opt = ClientOptions::from_env();
    const char* inject_env = std::getenv("RINGFENCE_INJECT");
    const auto faults = parse_fault_specs(inject_env ? inject_env : "");
    Client client(opt);
    client.on_revoked([](const Revocation&) { g_revoked = true; });
    try {
      client.join();
    } catch (const JobFinished&) {
      return 0;  // started (a spare, a restart) after every member had left
    }
    int64_t step = -1;
    auto digest = [&](int64_t s) {
      std::string d = rf::digest_hex(rf::str("state@", s).data(), rf::str("state@", s).size());
      // Same digest version ("x3:"), different value: a divergence, not a mix of builds.
      return opt.slot == bad_digest_slot ? d.substr(0, 3) + "bad" + d.substr(6) : d;
    };
    while (true) {
      // Recovery: report, plan, "transfer", ready (docs/protocol.md steps 2-7).
      Plan plan;
      try {
        // Before its first step a worker has no state worth sending: a new or restarted
        // worker reports "no state" (docs/protocol.md step 2); if nobody has state, the plan
        // says fresh_start and everyone initialises the same way.
        plan = client.next_plan(
            [&] {
              return step >= 0 || init_state ? StateReport{true, step, digest(step)} : StateReport{};
            },
            24h);  // a standby spare may wait for a hole as long as the job runs
      } catch (const JobFinished&) {
        return 0;  // a spare that was never needed
      }
      const PlanRank* me = plan.find(opt.slot);
      if (me->source_rank) step = plan.target_step;  // the fake state transfer
      if (plan.fresh_start) step = -1;
      client.set_step(step);
      client.phase_timing(plan.generation, RecoveryPhase::Transfer, 0.0);
      g_revoked = false;
      ReadyQuery rq = client.ready(plan.generation, 60s);
      if (rq.kind == ReadyQuery::Stopped) {
        std::fprintf(stderr, "test_worker slot %d: job stopped: %s\n", opt.slot, rq.error.c_str());
        return 3;
      }
      if (rq.kind != ReadyQuery::Running) continue;  // revoked during the round: again
      std::printf("slot %d inc %lld: generation %llu rank %d world %d T %lld\n", opt.slot,
                  static_cast<long long>(opt.incarnation), static_cast<unsigned long long>(plan.generation), me->rank,
                  plan.world(), static_cast<long long>(plan.target_step));
      std::fflush(stdout);
      // Training steps until the end, a revocation, a planned change or a stop.
      while (true) {
        if (client.fenced()) {
          client.join();  // D4: come back as a new member
          break;
        }
        if (g_revoked || client.seen_generation() > client.generation()) break;
        if (client.stop_requested() || step + 1 >= steps) {
          client.leave();
          return 0;
        }
        if (client.reconfigure_requested()) break;  // leave g after this step (R5)
        compute_for(step_ms);
        if (g_revoked) break;  // the step's all-reduce was aborted: not applied (R1)
        ++step;
        client.set_step(step);
        for (const auto& f : faults) {
          if (f.launcher_side() || f.step != step || f.rank != me->rank || opt.incarnation != 0) continue;
          std::fprintf(stderr, "test_worker slot %d: inject %s\n", opt.slot, f.to_string().c_str());
          client.injected(client.generation(), step, f.to_string());
          if (f.kind == FaultKind::Kill) raise(SIGKILL);
          if (f.kind == FaultKind::Stop) raise(SIGSTOP);
          if (f.kind == FaultKind::Exit) _exit(3);
          if (f.kind == FaultKind::Hang) compute_for(1 << 30);
        }
      }
    }
  } catch (const rf::Error& e) {
    std::fprintf(stderr, "test_worker: %s\n", e.what());
    return 1;
  }
}
