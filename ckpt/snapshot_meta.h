#pragma once
// The __metadata__ conventions of a ringfence snapshot. safetensors metadata values are
// strings only, so numbers are written in decimal and the optimizer's hyper-parameters as
// a JSON object in a string:
//
//   format          "ringfence-snapshot"
//   format_version  "1"
//   model           e.g. "mlp"
//   step            last applied step (docs/protocol.md: -1 before the first)
//   generation      membership epoch the state was taken in
//   world_size      W at that generation
//   optimizer       e.g. "sgd"
//   optimizer_hparams  e.g. {"lr":0.05,"momentum":0.9}
//   data_order      optional: what decides which samples step s sees, as a JSON object,
//                   e.g. {"batch":128,"samples":60000,"seed":0} (train_mlp / train_cnn)
//   gradient_sum    optional: "exact/M" for a run in exact mode with M micro-shards
//                   (docs/exact.md); absent for the float sum. Resuming across the two, or
//                   with another M, is refused (RestoreExpect::gradient_sum)
//   job_id          optional: the coordinator's id of the job that wrote it (under
//                   `ringfence run`), so a whole-job restart restores only its own files
//   crc32c, state_digest, metadata_crc32c   filled in by the writer, verified by the reader
//
// state_digest and rf_state_digest (ckpt/state.h) record their digest version as their
// prefix, "x3:" + 32 hex digits (base/digest.h). A file whose digests are of another
// version, or have none, is refused with DigestVersionMismatch (format_error.h): never
// compared.
#include <cstdint>
#include <string>

#include "ckpt/safetensors_reader.h"
#include "ckpt/safetensors_writer.h"

namespace rf::ckpt {

inline constexpr const char* kSnapshotFormat = "ringfence-snapshot";
inline constexpr int64_t kSnapshotFormatVersion = 1;

struct SnapshotMeta {
  int64_t format_version = kSnapshotFormatVersion;
  std::string model;
  int64_t step = -1;
  int64_t generation = 0;
  int64_t world_size = 1;
  std::string optimizer;
  std::string optimizer_hparams = "{}";  // a JSON object
  // A JSON object, or "" (not recorded: the key is absent). Resuming with another one is
  // resuming on other batches: the programs warn, as for other hyper-parameters.
  std::string data_order = "";
  std::string job_id = "";  // "" = not recorded (the key is absent)
  std::string gradient_sum = "";  // "" = the float sum (the key is absent); else "exact/M"
};

// "exact/M" for exact mode with M micro-shards, "" for the float sum (micro_shards 0).
std::string gradient_sum_name(int micro_shards);

// Throws rf::InvalidInput when optimizer_hparams (or a non-empty data_order) is not a JSON
// object.
void write_snapshot_meta(SafetensorsWriter& w, const SnapshotMeta& m);
// Throws FormatError naming the key when one is missing, not a number, out of range, or
// of an unknown format version.
SnapshotMeta read_snapshot_meta(const SafetensorsReader& r);

}  // namespace rf::ckpt
