#include "elastic/leadership.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "base/str.h"

namespace rf::elastic {

using nlohmann::json;

namespace {

constexpr const char* kLeaderKey = "leader";

// How often a standby looks whether the leader key is gone (a poll interval, not a wait
// for something that a notification could tell).
constexpr auto kCampaignPoll = std::chrono::milliseconds(50);

// leading() ends this long before etcd could expire the lease, counted from when the last
// renewal was sent (etcd counts from when it arrived, later): room for one turn of the
// coordinator's loop between its check and its replies.
constexpr auto kMargin = std::chrono::milliseconds(250);

int64_t whole_seconds(Duration d) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::chrono::duration<double>(d).count())));
}

// One etcd call per endpoint may take a sixth of the lease (in Duration's resolution: whole
// seconds divided by 6 would be 0, which curl takes as "no timeout" and etcd answers after
// its own 7 s request timeout).
Duration call_timeout(Duration lease) {
  return std::chrono::duration_cast<Duration>(std::chrono::seconds(whole_seconds(lease))) / 6;
}

}  // namespace

std::string control_prefix(const std::string& job) {
  const bool ok = !job.empty() && job.size() <= 64 &&
                  job.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                      std::string::npos;
  if (!ok) throw rf::InvalidInput(rf::str("job name '", job, "' must be 1 to 64 of A-Z a-z 0-9 . _ -"));
  return "/ringfence/" + job + "/";
}

std::optional<LeaderInfo> find_leader(EtcdClient& etcd, const std::string& job) {
  const auto kv = etcd.get(control_prefix(job) + kLeaderKey);
  if (!kv) return std::nullopt;
  const json j = json::parse(kv->value, nullptr, false);
  if (!j.is_object() || !j.contains("addr") || !j["addr"].is_string())
    throw rf::Error(rf::str("etcd: the leader key of job '", job, "' holds no address: ", kv->value.substr(0, 200)));
  return LeaderInfo{j.value("id", ""), j["addr"].get<std::string>(), kv->create_revision, kv->lease};
}

Leadership::Leadership(LeadershipOptions options, std::string id)
    : opt_(std::move(options)),
      id_(std::move(id)),
      prefix_(control_prefix(opt_.job)),
      // Calls are bounded well inside one lease, so a member that does not answer costs a
      // renewal, not the lease.
      etcd_(EtcdOptions{opt_.endpoints, call_timeout(opt_.lease)}),
      ka_(EtcdOptions{opt_.endpoints, call_timeout(opt_.lease)}),
      granted_(std::chrono::seconds(whole_seconds(opt_.lease))) {
  if (id_.empty()) throw rf::InvalidInput("a coordinator replica needs an id");
}

Leadership::~Leadership() { resign(); }

bool Leadership::campaign(const std::string& addr, const std::function<bool()>& stop,
                          const std::function<void(const std::string&)>& unavailable) {
  const std::string key = prefix_ + kLeaderKey;
  const std::string value = json{{"id", id_}, {"addr", addr}}.dump();
  std::optional<TimePoint> last_said;
  while (!stop()) {
    try {
      if (etcd_.get(key)) {
        std::this_thread::sleep_for(kCampaignPoll);
        continue;
      }
      int64_t ttl = 0;
      const TimePoint asked = Clock::now();
      const int64_t lease = etcd_.lease_grant(whole_seconds(opt_.lease), &ttl);
      int64_t revision = 0;
      if (!etcd_.txn({{EtcdCompare::Create, key, 0}}, {EtcdOp::put(key, value, lease)}, &revision)) {
        etcd_.lease_revoke(lease);  // another replica was faster
        continue;
      }
      granted_ = std::chrono::seconds(std::max<int64_t>(1, ttl));
      lease_id_ = lease;
      create_revision_ = revision;  // the transaction created the key: its create revision
      valid_until_ = (asked + granted_ - kMargin).time_since_epoch().count();
      lost_ = false;
      {
        std::lock_guard<std::mutex> l(mu_);
        lost_reason_.clear();
        ka_stop_ = false;
      }
      ka_thread_ = std::thread([this] { keepalive_loop(); });
      return true;
    } catch (const EtcdUnavailable& e) {
      if (unavailable && (!last_said || Clock::now() - *last_said >= std::chrono::seconds(10))) {
        last_said = Clock::now();
        unavailable(e.what());
      }
      std::this_thread::sleep_for(kCampaignPoll);  // etcd has no quorum now: try again
    }
  }
  return false;
}

bool Leadership::leading(TimePoint now) const {
  return lease_id_ != 0 && !lost_.load() && now.time_since_epoch().count() < valid_until_.load();
}

std::optional<LeaderInfo> Leadership::leader_now() { return find_leader(etcd_, opt_.job); }

void Leadership::depose(const LeaderInfo& leader) {
  if (leader.lease != 0) etcd_.lease_revoke(leader.lease);
}

std::string Leadership::lost_reason() const {
  std::lock_guard<std::mutex> l(mu_);
  if (!lost_reason_.empty()) return lost_reason_;
  if (lease_id_ == 0) return "not elected";
  return "the leader lease was not renewed in time" +
         (last_renew_error_.empty() ? std::string() : " (last renewal: " + last_renew_error_ + ")");
}

void Leadership::lose(const std::string& why) {
  std::lock_guard<std::mutex> l(mu_);
  if (lost_reason_.empty()) lost_reason_ = why;
  lost_ = true;
}

void Leadership::keepalive_loop() {
  // Several renewals per lease: one that fails (a member killed, etcd electing a new raft
  // leader) leaves time for the next ones.
  const Duration period = granted_ / 6;
  while (true) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (ka_cv_.wait_for(l, period, [&] { return ka_stop_; })) return;
    }
    const TimePoint sent = Clock::now();
    try {
      if (ka_.lease_keepalive(lease_id_) <= 0) {
        lose("etcd says the leader lease has expired");
        return;
      }
      valid_until_ = (sent + granted_ - kMargin).time_since_epoch().count();
    } catch (const rf::Error& e) {
      if (!leading(Clock::now())) {
        lose(rf::str("could not renew the leader lease in time: ", e.what()));
        return;
      }
      std::lock_guard<std::mutex> l(mu_);
      last_renew_error_ = e.what();
    }
  }
}

void Leadership::commit(std::vector<EtcdOp> ops) {
  if (!leading(Clock::now())) throw NotLeader(lost_reason());
  for (auto& op : ops) {
    op.key = prefix_ + op.key;
    if (!op.range_end.empty()) op.range_end = prefix_ + op.range_end;
  }
  const std::vector<EtcdCompare> guard{{EtcdCompare::Create, prefix_ + kLeaderKey, create_revision_}};
  while (true) {
    try {
      if (etcd_.txn(guard, ops)) return;
      lose("another replica holds the leader key");
      throw NotLeader(lost_reason());
    } catch (const EtcdUnavailable& e) {
      // Unanswered: it may or may not have been applied; applying it again writes the same.
      if (!leading(Clock::now())) {
        lose(rf::str("etcd did not answer while the lease lasted: ", e.what()));
        throw NotLeader(lost_reason());
      }
    }
  }
}

std::vector<EtcdKv> Leadership::load(const std::string& rel_prefix) {
  std::vector<EtcdKv> out = etcd_.get_prefix(prefix_ + rel_prefix);
  for (auto& kv : out) kv.key.erase(0, prefix_.size());
  return out;
}

void Leadership::resign() {
  {
    std::lock_guard<std::mutex> l(mu_);
    ka_stop_ = true;
  }
  ka_cv_.notify_all();
  if (ka_thread_.joinable()) ka_thread_.join();
  if (lease_id_ != 0) {
    lose("resigned");
    try {
      etcd_.lease_revoke(lease_id_);
    } catch (const rf::Error&) {
      // It expires on its own within one lease.
    }
    lease_id_ = 0;
  }
}

}  // namespace rf::elastic
