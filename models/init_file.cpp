#include "models/init_file.h"

#include <set>
#include <vector>

#include "base/error.h"
#include "base/str.h"
#include "ckpt/safetensors.h"

namespace rf::models {

void load_parameters(nn::Module& model, const std::string& path) {
  ckpt::SafetensorsReader r = ckpt::SafetensorsReader::open(path);
  std::vector<std::string> problems;
  std::set<std::string> wanted;
  for (auto& [name, t] : model.named_parameters()) {
    wanted.insert(name);
    if (!r.find(name)) {
      problems.push_back(str("missing '", name, "' ", t.shape().str()));
      continue;
    }
    std::vector<int64_t> shape;
    for (int i = 0; i < t.dim(); ++i) shape.push_back(t.size(i));
    try {
      r.copy_to(name, ckpt::DType::F32, shape, t.data());
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  for (const auto& info : r.tensors())
    if (!wanted.count(info.name)) problems.push_back(str("unexpected tensor '", info.name, "'"));
  if (!problems.empty()) {
    std::string msg = str("--init ", path, ": parameters do not match the model:");
    for (auto& p : problems) msg += "\n  " + p;
    throw InvalidInput(msg);
  }
}

void save_parameters(const nn::Module& model, const std::string& path) {
  ckpt::SafetensorsWriter w;
  for (auto& [name, t] : model.named_parameters()) {
    std::vector<int64_t> shape;
    for (int i = 0; i < t.dim(); ++i) shape.push_back(t.size(i));
    w.add(name, ckpt::DType::F32, shape, t.data());
  }
  w.write_file(path);
}

}  // namespace rf::models
