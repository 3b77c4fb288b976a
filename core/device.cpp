#include "core/device.h"

#include <charconv>

#include "base/error.h"
#include "base/str.h"

namespace rf {

std::string device_name(Device d) {
  if (d.kind == DeviceKind::CPU) return "cpu";
  return str("cuda:", d.index);
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::CPU;
  if (text == "cuda") return Device::CUDA;
  const std::string prefix = "cuda:";
  if (text.size() > prefix.size() && text.compare(0, prefix.size(), prefix) == 0) {
    const char* b = text.data() + prefix.size();
    const char* e = text.data() + text.size();
    int index = -1;
    const auto [end, ec] = std::from_chars(b, e, index);
    if (ec == std::errc() && end == e && index >= 0) return Device::cuda(index);
  }
  throw InvalidInput(str("device '", text, "' is not one of cpu, cuda, cuda:N (N >= 0)"));
}

}  // namespace rf
