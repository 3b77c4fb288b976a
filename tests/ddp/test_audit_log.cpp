// AuditLog: one whole JSON line per record; lines written during a recovery name its phase,
// after the fields every reader keys on (tests/ddp/auditlog.py, bench/recovery).
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ddp/audit_log.h"
#include "ddp/recovery_phase.h"
#include "../data/temp_dir.h"

using namespace rf::ddp;

TEST_CASE("audit log: recovery lines name their phase, training lines none") {
  TempDir dir;
  const std::string path = dir.file("audit.jsonl");
  {
    AuditLog log(path, 2, 1);
    log.set_phase(RecoveryPhase::Transfer);
    log.record("transfer", 3, 40, "abc", 1, 3, {{"source", 0}});
    log.set_phase(std::nullopt);
    log.record("apply", 3, 41, "def", 1, 3, {{"loss", 0.5}});
  }
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string ln; std::getline(in, ln);) lines.push_back(nlohmann::json::parse(ln));
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["event"] == "transfer");
  CHECK(lines[0]["phase"] == "transfer");
  CHECK(lines[0]["g"] == 3);
  CHECK(lines[0]["s"] == 40);
  CHECK(lines[0]["digest"] == "abc");
  CHECK(lines[0]["slot"] == 2);
  CHECK(lines[0]["inc"] == 1);
  CHECK(lines[0]["source"] == 0);
  CHECK(lines[1]["event"] == "apply");
  CHECK_FALSE(lines[1].contains("phase"));
  CHECK(lines[1]["loss"] == 0.5);
}

TEST_CASE("audit log: lines are JSON built by a library: fields in order, any text escaped") {
  TempDir dir;
  const std::string path = dir.file("audit.jsonl");
  const std::string spec = "kill:rank=1:step=20 \"quoted\" \\ and a\nnewline";
  {
    AuditLog log(path, 0, 0);
    log.set_phase(RecoveryPhase::Plan);
    log.record("inject", 2, 20, "", 1, 3, {{"spec", spec}, {"a_last", 1}});
    log.record("start", 2, -1, "d", 1, 3);
  }
  std::ifstream in(path);
  std::vector<nlohmann::ordered_json> lines;
  for (std::string ln; std::getline(in, ln);) lines.push_back(nlohmann::ordered_json::parse(ln));
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["spec"] == spec);
  std::vector<std::string> keys;
  for (const auto& [k, v] : lines[0].items()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"event", "ts_us", "g", "s", "digest", "rank", "world", "slot", "inc", "phase",
                                         "spec", "a_last"});
  CHECK(lines[1].size() == 10);
}

TEST_CASE("recovery phases have distinct lower-case names") {
  const RecoveryPhase all[] = {RecoveryPhase::Abort,   RecoveryPhase::Report,   RecoveryPhase::Plan,
                               RecoveryPhase::Connect, RecoveryPhase::Transfer, RecoveryPhase::Verify,
                               RecoveryPhase::Resume};
  const char* names[] = {"abort", "report", "plan", "connect", "transfer", "verify", "resume"};
  for (size_t i = 0; i < 7; ++i) CHECK(std::string(recovery_phase_name(all[i])) == names[i]);
}
