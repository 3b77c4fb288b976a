#include "elastic/admin_client.h"

namespace rf::elastic {

using nlohmann::json;

AdminClient::AdminClient(std::string host, int port, std::string token, Duration timeout) : timeout_(timeout) {
  const TimePoint deadline = Clock::now() + timeout;
  conn_.connect(host, port, deadline);
  conn_.call({{"type", "hello"}, {"token", token}, {"role", "launcher"}}, deadline);
}

json AdminClient::call(json req) { return conn_.call(req, Clock::now() + timeout_); }
json AdminClient::status() { return call({{"type", "status"}}); }
void AdminClient::exited(int slot, int64_t inc, int status, int64_t wall) {
  call({{"type", "exited"}, {"slot", slot}, {"incarnation", inc}, {"status", status}, {"exited_wall_us", wall}});
}
void AdminClient::stop() { call({{"type", "stop"}}); }
json AdminClient::summary() { return call({{"type", "summary"}}); }

}  // namespace rf::elastic
