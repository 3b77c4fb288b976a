#include "elastic/admin_client.h"

#include "elastic/auth.h"

#include "base/str.h"
#include "elastic/errors.h"

namespace rf::elastic {

using nlohmann::json;

AdminClient::AdminClient(std::string host, int port, std::string token, Duration timeout) : timeout_(timeout) {
  const TimePoint deadline = Clock::now() + timeout;
  conn_.connect(host, port, deadline);
  authenticate(conn_, token, {{"type", "hello"}, {"role", "launcher"}}, deadline);
}

json AdminClient::call(json req) { return conn_.call(req, Clock::now() + timeout_); }
json AdminClient::status() { return call({{"type", "status"}}); }
AdminClient::ExitedReply AdminClient::exited(int slot, int64_t inc, int status, int64_t wall) {
  const json r = call({{"type", "exited"}, {"slot", slot}, {"incarnation", inc}, {"status", status}, {"exited_wall_us", wall}});
  auto flag = [&](const char* key) {
    auto it = r.find(key);
    if (it == r.end() || !it->is_boolean())
      throw ProtocolError(rf::str("exited_reply: field '", key, "' must be a boolean"));
    return it->get<bool>();
  };
  ExitedReply e;
  e.registered = flag("registered");
  e.left = flag("left");
  e.phase = r.value("phase", "");
  return e;
}
void AdminClient::stop() { call({{"type", "stop"}}); }
json AdminClient::summary() { return call({{"type", "summary"}}); }

}  // namespace rf::elastic
