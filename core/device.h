#pragma once
// Where a tensor's memory lives: a device kind and its index (the GPU's number). Only the
// CPU has a runtime in every build (core/device_runtime.h); CUDA's come from
// core/cuda_runtime.h once a program registers them.
#include <string>

namespace rf {

enum class DeviceKind { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  static const Device CPU;   // cpu:0
  static const Device CUDA;  // cuda:0
  static constexpr Device cuda(int i) { return {DeviceKind::CUDA, i}; }
  bool is_cpu() const { return kind == DeviceKind::CPU; }
  friend constexpr bool operator==(Device a, Device b) { return a.kind == b.kind && a.index == b.index; }
};
inline constexpr Device Device::CPU{DeviceKind::CPU, 0};
inline constexpr Device Device::CUDA{DeviceKind::CUDA, 0};

// "cpu", "cuda:0", ...
std::string device_name(Device d);
// Parses "cpu", "cuda", "cuda:N"; throws rf::InvalidInput naming the text otherwise.
Device parse_device(const std::string& text);

}  // namespace rf
