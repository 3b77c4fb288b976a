#pragma once
// The identity of the host a process runs on, as the data plane needs it: ranks with the
// same identity may reach each other through shared memory (the same-host shm path, the
// single-copy path); ranks with different ones talk only through the network. "The same
// kernel" is the wrong test: network namespaces (test hosts, containers) share /dev/shm and
// can read each other's memory, yet stand for different machines, and a partition between
// them must cut every byte. So the identity is the kernel's boot id, the network namespace
// and the host name together, or RINGFENCE_HOST_ID when the environment sets it (a launcher
// or a user that knows better, e.g. to keep two namespaces on one host path).
#include <cstdint>
#include <string>

namespace rf::comm {

// "RINGFENCE_HOST_ID=<value>" when set and not empty, else "<boot id>/<net namespace>/<host name>".
std::string host_identity();
// A 64-bit digest of host_identity() (FNV-1a), for the connect handshake.
uint64_t host_identity_hash();

}  // namespace rf::comm
