#pragma once
// Where a tensor's memory lives. Only CPU has kernels today; CUDA is a tag so the one
// dispatch point (core/dispatch.h) has a place to send GPU tensors in a later issue.
namespace rf {

enum class Device { CPU, CUDA };

inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

}  // namespace rf
