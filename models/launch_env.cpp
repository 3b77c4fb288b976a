#include "models/launch_env.h"

#include <cstdlib>
#include <ostream>
#include <utility>

#include "base/str.h"
#include "elastic/client.h"
#include "elastic/errors.h"
#include "models/train_flags.h"

namespace rf::models {
namespace {

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  return *end ? fallback : x;  // the Trainer's own parsing names a malformed value
}

}  // namespace

LocalPlacement local_placement_from_env() {
  LocalPlacement l;
  for (auto [name, out] : {std::pair{"RINGFENCE_LOCAL_RANK", &l.local_rank}, std::pair{"RINGFENCE_LOCAL_WORLD", &l.local_world}}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end || x < 0 || x > 1'000'000) throw FlagError(str(name, "='", v, "' is not a count"));
    *out = static_cast<int>(x);
  }
  return l;
}

std::pair<int, int64_t> worker_id_from_env() {
  return {static_cast<int>(env_int("RINGFENCE_SLOT", 0)), env_int("RINGFENCE_INCARNATION", 0)};
}

bool job_ran_from_env() { return env_int("RINGFENCE_JOB_RAN", 0) == 1; }

void stop_job_before_start(const std::string& error, std::ostream& err) {
  try {
    elastic::Client client(elastic::ClientOptions::from_env());
    client.join();
    client.fatal(error);
    client.close();
  } catch (const elastic::Refused&) {
    // The join refused: the job is STOPPED already, by another worker's same report (the
    // launcher prints it), or this worker may not join at all (the start-up rule ends it).
  } catch (const std::exception& e) {
    err << "ringfence worker: could not tell the coordinator: " << e.what() << "\n" << std::flush;
  }
}

}  // namespace rf::models
