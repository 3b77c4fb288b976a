#include "models/train_program.h"

#include <csignal>

#include <atomic>
#include <iostream>
#include <string>
#include <vector>

#include "models/train_flags.h"
#include "models/train_loop.h"

namespace rf::models {
namespace {

// Set by SIGTERM / SIGINT; read by the training loop at each step boundary. A signal
// handler can only reach a global, and a lock-free atomic store is async-signal-safe.
std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void request_stop(int) { g_stop_requested.store(true, std::memory_order_relaxed); }

// SA_RESETHAND: a second Ctrl-C (or TERM) is not caught and ends the process at once.
void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

}  // namespace

int train_program_main(int argc, char** argv, ModelKind kind) {
  const std::string name = std::string("train_") + model_name(kind);
  ParsedFlags flags;
  try {
    flags = parse_train_flags(std::vector<std::string>(argv + 1, argv + argc), kind);
  } catch (const FlagError& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 2;
  }
  if (flags.help) {
    std::cout << train_usage(kind);
    return 0;
  }
  install_stop_handlers();
  flags.options.stop_requested = &g_stop_requested;
  try {
    train(flags.options, std::cout);
  } catch (const std::exception& e) {
    std::cerr << name << ": error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace rf::models
