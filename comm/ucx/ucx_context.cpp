#include "comm/ucx/ucx_context.h"

#include <cstdlib>

#include "base/error.h"
#include "base/str.h"

namespace rf::comm {

std::shared_ptr<UcxContext> UcxContext::create(const UcxContextOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) throw rf::Error(rf::str("ucp_config_read: ", ucs_status_string(st)));
  auto settings = options.config;
  if (options.ringfence_defaults) {
    for (auto [name, value] : {std::pair<const char*, const char*>{"MM_ERROR_HANDLING", "y"},
                               {"KEEPALIVE_INTERVAL", "100ms"}}) {
      bool named = std::getenv((std::string("UCX_") + name).c_str()) != nullptr;
      for (const auto& s : options.config) named = named || s.first == name;
      if (!named) settings.emplace_back(name, value);
    }
  }
  for (const auto& [name, value] : settings) {
    st = ucp_config_modify(config, name.c_str(), value.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      throw rf::InvalidInput(rf::str("UCX setting ", name, "=", value, ": ", ucs_status_string(st)));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG;
  // Workers are used by one thread at a time (the communicator's driver), never shared.
  params.mt_workers_shared = 0;
  std::shared_ptr<UcxContext> ctx(new UcxContext());
  st = ucp_init(&params, config, &ctx->context_);
  ucp_config_release(config);
  if (st != UCS_OK) throw rf::Error(rf::str("ucp_init: ", ucs_status_string(st)));
  return ctx;
}

UcxContext::~UcxContext() {
  if (context_) ucp_cleanup(context_);
}

}  // namespace rf::comm
