#include "models/init_file.h"

#include <set>
#include <vector>

#include "base/error.h"
#include "base/str.h"
#include "ckpt/safetensors.h"
#include "ckpt/snapshot_meta.h"

namespace rf::models {
namespace {

std::vector<int64_t> shape_of(const Tensor& t) {
  std::vector<int64_t> shape;
  for (int i = 0; i < t.dim(); ++i) shape.push_back(t.size(i));
  return shape;
}

// Every way the file differs from the model's parameters, in parameter order, then the
// file's unexpected tensors in file order. Reads the header only.
std::vector<std::string> differences(const nn::Module& model, const ckpt::SafetensorsReader& r) {
  std::vector<std::string> problems;
  std::set<std::string> wanted;
  for (auto& [name, t] : model.named_parameters()) {
    wanted.insert(name);
    const ckpt::TensorInfo* info = r.find(name);
    if (!info) {
      problems.push_back(str("missing '", name, "' ", t.shape().str()));
      continue;
    }
    if (info->dtype != ckpt::DType::F32)
      problems.push_back(str("tensor '", name, "': dtype is ", ckpt::dtype_name(info->dtype), ", expected F32"));
    if (info->shape != shape_of(t))
      problems.push_back(str("tensor '", name, "': shape is ", ckpt::shape_str(info->shape), ", expected ",
                             ckpt::shape_str(shape_of(t))));
  }
  for (const auto& info : r.tensors())
    if (!wanted.count(info.name)) problems.push_back(str("unexpected tensor '", info.name, "'"));
  return problems;
}

}  // namespace

void load_parameters(nn::Module& model, const std::string& path) {
  const ckpt::SafetensorsReader r = ckpt::SafetensorsReader::open(path);
  // All of the file is checked before a single parameter changes: a file that does not
  // fit leaves the model as it was.
  const std::vector<std::string> problems = differences(model, r);
  if (!problems.empty()) {
    std::string msg = str("--init ", path, ": parameters do not match the model:");
    for (auto& p : problems) msg += "\n  " + p;
    const auto& meta = r.metadata();
    const auto format = meta.find("format");
    if (format != meta.end() && format->second == ckpt::kSnapshotFormat) {
      const auto model_name = meta.find("model"), step = meta.find("step");
      msg += str("\n", path, " is a ringfence checkpoint (model ",
                 model_name != meta.end() ? model_name->second : "?", ", step ",
                 step != meta.end() ? step->second : "?",
                 "): --resume-from continues it; --init takes parameters only");
    }
    throw InvalidInput(msg);
  }
  for (auto& [name, t] : model.named_parameters()) r.copy_to(name, ckpt::DType::F32, shape_of(t), t.data());
}

bool parameters_fit(const nn::Module& model, const std::string& path) {
  try {
    return differences(model, ckpt::SafetensorsReader::open(path)).empty();
  } catch (const Error&) {
    return false;
  }
}

void save_parameters(const nn::Module& model, const std::string& path) {
  ckpt::SafetensorsWriter w;
  for (auto& [name, t] : model.named_parameters()) w.add(name, ckpt::DType::F32, shape_of(t), t.data());
  w.write_file(path);
}

}  // namespace rf::models
