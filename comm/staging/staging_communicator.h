#pragma once
// The communicator of UCX on device memory through pinned host staging, with no CUDA in it
// (comm/cuda/device_staging.h says what the path does): the FIFO, the staging thread and
// the Works, over a DeviceCopies that does the device's part. comm/cuda/device_staging.cpp
// gives it the CUDA one; the unit tests a fake one over host memory, so the order, abort
// and stall logic runs on every machine.
#include <cstddef>
#include <memory>

#include "comm/communicator.h"
#include "comm/staging/staging_slots.h"

namespace rf::comm::cuda {

// A staging slot held by one collective: pinned host memory, and the registered memory
// it lies in (null: plain memory).
struct StagingLease {
  int index = -1;
  void* host = nullptr;
  const RegisteredMemory* registered = nullptr;
  void* slot = nullptr;  // the DeviceCopies' own handle
};

// What the staging communicator asks of the device. Errors are rf::Error naming the device.
class DeviceCopies {
 public:
  virtual ~DeviceCopies() = default;
  virtual int device() const = 0;
  // The calling thread's current device becomes this one.
  virtual void make_current() = 0;
  // A slot for `key`, capacity at least key.bytes (the same key finds the same slot again).
  virtual StagingLease take(const StagingKey& key) = 0;
  // The slot is free again (its copy out was enqueued after its last use).
  virtual void give(const StagingLease& lease) = 0;
  // Enqueued on `stream`, none of it waited for: after the slot's previous copy out, copy
  // `bytes` from `device_src` into the slot (when `copy`), then mark the slot copied in.
  virtual void copy_in(const StagingLease& lease, const void* device_src, size_t bytes, bool copy, Stream stream) = 0;
  // Whether the stream reached the mark of the last copy_in on the slot (a poll).
  virtual bool copied_in(const StagingLease& lease) = 0;
  // Enqueued on `stream`: copy `bytes` out of the slot to `device_dst` (when `copy`), then
  // mark the slot released (the next copy_in waits for it).
  virtual void copy_out(const StagingLease& lease, void* device_dst, size_t bytes, bool copy, Stream stream) = 0;
};

// Wraps `inner` (the generation's host communicator) so device buffers of copies->device()
// go through staging. Starts the staging thread.
std::shared_ptr<Communicator> make_staging_communicator(std::shared_ptr<Communicator> inner,
                                                        std::shared_ptr<DeviceCopies> copies);

}  // namespace rf::comm::cuda
