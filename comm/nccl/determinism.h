#pragma once
// NCCL's summation order, fixed (docs/gpu.md "Bitwise equal with NCCL"). NCCL picks an
// algorithm (ring, tree, NVLS, CollNet), a protocol (LL, LL128, Simple) and a number of
// channels per call from its tuning model and the topology, and each choice adds a
// buffer's elements in another order. Two runs on the same machines agree, but a
// replacement rank, or a shrunk communicator against a fresh one, may tune differently:
// the final weights are then no longer bitwise those of the run that never failed.
//
// Deterministic mode (on by default for training) fixes all three: the ring algorithm
// (every element is summed around the ring in rank order from a fixed start), the Simple
// protocol, a fixed channel count (the config's minCTAs = maxCTAs), NVLS and CollNet off.
// The sum's order then depends only on W, the ring and the buffer's size. Environment
// settings are NCCL's own (read when a communicator is made): one the user set is kept
// and logged, so an explicit choice wins. Pure: the shell applies what this returns.
#include <functional>
#include <string>
#include <vector>

namespace rf::comm::nccl {

inline constexpr int kDeterministicChannels = 4;

struct EnvChoice {
  std::string name, value;  // what deterministic mode wants
  bool kept = false;        // the user set `name` already (to `existing`): left as it is
  std::string existing;
};

// What to set for `deterministic` (nothing when off); `getenv` reads the environment.
std::vector<EnvChoice> determinism_env(bool deterministic, const std::function<const char*(const char*)>& getenv);

// One log line: "deterministic (NCCL_ALGO=Ring, ...)" naming what the user kept, or
// "not deterministic (...)" when off.
std::string describe_determinism(bool deterministic, const std::vector<EnvChoice>& choices);

// A setting outside the four above that changes the all-reduce's summation order (NCCL
// 2.28.9): the channel count (NCCL_MIN_CTAS/NCCL_MAX_CTAS override the config's 4 without a
// word; NCCL_MIN_NCHANNELS may exceed them), channels per call, the chunk size, a tuner
// plugin that picks channels per call, the ring's order (topology and graph files), and
// NCCL's configuration files, whose values count as the environment.
struct OrderRisk {
  std::string name;   // the variable, or the configuration file's path
  std::string value;  // its value ("" for a file)
  std::string what;   // what it changes, for the warning
};

// What is set that may change the order: `getenv` reads the environment, `exists` whether a
// file exists (NCCL_CONF_FILE, $HOME/.nccl.conf, /etc/nccl.conf). Empty when not deterministic.
std::vector<OrderRisk> order_risks(bool deterministic, const std::function<const char*(const char*)>& getenv,
                                   const std::function<bool(const std::string&)>& exists);

// The warning for one risk: it names the setting, what it changes, and when the bitwise
// claim still holds (every rank, replacements included, with the same value).
std::string describe_order_risk(const OrderRisk& risk);

}  // namespace rf::comm::nccl
