#pragma once
// safetensors — the snapshot format (https://github.com/huggingface/safetensors):
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header][data section: raw little-endian]
//
// The header maps each tensor name to {"dtype": "F32", "shape": [..], "data_offsets":
// [begin, end]} (offsets relative to the data section), plus an optional "__metadata__"
// object of string -> string. Our writer adds a CRC32C per tensor and a digest of the
// whole state to the metadata (see snapshot_meta.h for the other conventions), and the
// reader validates everything before anyone touches a byte of data.
//
//   SafetensorsWriter w;                  // entries point at caller memory
//   w.add("0.weight", DType::F32, {512, 784}, weights.data());
//   w.set_metadata("model", "mlp");
//   w.write_file("init.safetensors");
//
//   auto r = SafetensorsReader::open("init.safetensors");   // throws FormatError
//   r.copy_to("0.weight", DType::F32, {512, 784}, dst);     // checks dtype and shape
#include "ckpt/dtype.h"
#include "ckpt/format_error.h"
#include "ckpt/safetensors_header.h"
#include "ckpt/safetensors_reader.h"
#include "ckpt/safetensors_writer.h"
