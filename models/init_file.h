#pragma once
// Loading parameters by name from a safetensors file (e.g. weights exported from PyTorch
// for the parity check). Strict like torch's load_state_dict(strict=True): every
// parameter must be present with the same shape and dtype F32, and the file may hold no
// other tensors; otherwise rf::InvalidInput names the file and every offending name (and
// says so when the file is a ringfence checkpoint: --resume-from continues those). The
// whole file is checked before any parameter changes: on an error the model is as it was.
#include <string>

#include "core/nn/module.h"

namespace rf::models {

void load_parameters(nn::Module& model, const std::string& path);
void save_parameters(const nn::Module& model, const std::string& path);

// Whether load_parameters(model, path) would succeed (false for an unreadable file too).
bool parameters_fit(const nn::Module& model, const std::string& path);

}  // namespace rf::models
