#include "ckpt/snapshot_meta.h"

#include <charconv>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/str.h"
#include "ckpt/format_error.h"

namespace rf::ckpt {
namespace {

const std::string& need(const SafetensorsReader& r, const std::string& key) {
  auto it = r.metadata().find(key);
  if (it == r.metadata().end()) throw FormatError(r.source(), "", rf::str("metadata '", key, "' is missing"));
  return it->second;
}

int64_t need_int(const SafetensorsReader& r, const std::string& key, int64_t min) {
  const std::string& s = need(r, key);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    throw FormatError(r.source(), "", rf::str("metadata '", key, "' is \"", s, "\", expected an integer"));
  }
  if (v < min) throw FormatError(r.source(), "", rf::str("metadata '", key, "' is ", v, ", expected >= ", min));
  return v;
}

}  // namespace

void write_snapshot_meta(SafetensorsWriter& w, const SnapshotMeta& m) {
  if (!nlohmann::json::accept(m.optimizer_hparams) || !nlohmann::json::parse(m.optimizer_hparams).is_object()) {
    throw rf::InvalidInput(rf::str("snapshot optimizer_hparams is not a JSON object: ", m.optimizer_hparams));
  }
  w.set_metadata("format", kSnapshotFormat);
  w.set_metadata("format_version", std::to_string(m.format_version));
  w.set_metadata("model", m.model);
  w.set_metadata("step", std::to_string(m.step));
  w.set_metadata("generation", std::to_string(m.generation));
  w.set_metadata("world_size", std::to_string(m.world_size));
  w.set_metadata("optimizer", m.optimizer);
  w.set_metadata("optimizer_hparams", m.optimizer_hparams);
  if (!m.data_order.empty()) {
    if (!nlohmann::json::accept(m.data_order) || !nlohmann::json::parse(m.data_order).is_object())
      throw rf::InvalidInput(rf::str("snapshot data_order is not a JSON object: ", m.data_order));
    w.set_metadata("data_order", m.data_order);
  }
  if (!m.job_id.empty()) w.set_metadata("job_id", m.job_id);
  if (!m.gradient_sum.empty()) w.set_metadata("gradient_sum", m.gradient_sum);
}

std::string gradient_sum_name(int micro_shards) { return micro_shards > 0 ? rf::str("exact/", micro_shards) : ""; }

SnapshotMeta read_snapshot_meta(const SafetensorsReader& r) {
  if (need(r, "format") != kSnapshotFormat) {
    throw FormatError(r.source(), "", rf::str("metadata 'format' is \"", need(r, "format"), "\", expected \"",
                                              kSnapshotFormat, "\""));
  }
  SnapshotMeta m;
  m.format_version = need_int(r, "format_version", 1);
  if (m.format_version != kSnapshotFormatVersion) {
    throw FormatError(r.source(), "", rf::str("snapshot format version ", m.format_version,
                                              " is not supported (this build reads ", kSnapshotFormatVersion, ")"));
  }
  m.model = need(r, "model");
  m.step = need_int(r, "step", -1);
  m.generation = need_int(r, "generation", 0);
  m.world_size = need_int(r, "world_size", 1);
  m.optimizer = need(r, "optimizer");
  m.optimizer_hparams = need(r, "optimizer_hparams");
  auto hp = nlohmann::json::parse(m.optimizer_hparams, nullptr, /*allow_exceptions=*/false);
  if (!hp.is_object()) {
    throw FormatError(r.source(), "", rf::str("metadata 'optimizer_hparams' is not a JSON object: ", m.optimizer_hparams));
  }
  if (auto it = r.metadata().find("data_order"); it != r.metadata().end()) {
    m.data_order = it->second;
    if (!nlohmann::json::parse(m.data_order, nullptr, /*allow_exceptions=*/false).is_object())
      throw FormatError(r.source(), "", rf::str("metadata 'data_order' is not a JSON object: ", m.data_order));
  }
  if (auto it = r.metadata().find("job_id"); it != r.metadata().end()) m.job_id = it->second;
  if (auto it = r.metadata().find("gradient_sum"); it != r.metadata().end()) m.gradient_sum = it->second;
  return m;
}

}  // namespace rf::ckpt
