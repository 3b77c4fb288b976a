#pragma once
// Peers' SharedBuffers mapped read-only, cached process-wide by (the peer process's token,
// buffer id) — not per communicator. Mapping a buffer costs its page-table set-up, ~4-30 us
// per 4 KiB page on a 2-core VM (70-550 ms for 64 MiB measured), which a recovery must not pay
// again for the survivors' buckets: their processes and buffers outlive generations, so the
// communicator of g+1 finds the mappings g made. Only a new process (a replacement) is
// mapped afresh.
//
// A token, not the pid, names a process: pids are reused, tokens (random, per process) are
// not; buffer ids are unique within their process. A mapping lives while a communicator
// holds it or the cache does; forget_other_processes() drops the ones no communicator holds
// of processes that are not among a new communicator's peers (dead or departed ranks), so
// their memory is freed. Thread-safe.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace rf::comm {

struct PeerMapping {
  const unsigned char* base = nullptr;
  size_t bytes = 0;
  PeerMapping(const unsigned char* b, size_t n) : base(b), bytes(n) {}
  ~PeerMapping();
  PeerMapping(const PeerMapping&) = delete;
  PeerMapping& operator=(const PeerMapping&) = delete;
};

// This process's token (random, never 0), fixed for its lifetime.
uint64_t process_token();

// Maps `bytes` of fd `fd` of process `pid` (token `process`) read-only, or returns the
// cached mapping of (process, id). `still_held` (the owner's hold word) is asked after the
// fd is opened: only then is the fd known to name buffer `id` and the mapping cached. Null
// and `why` set if it cannot.
std::shared_ptr<const PeerMapping> map_peer_buffer(uint64_t process, pid_t pid, int fd, uint64_t id, size_t bytes,
                                                   const std::function<bool()>& still_held, std::string* why);

// How many peer buffers this process has mapped so far (tests: survivors map nothing anew).
uint64_t peer_buffer_maps_made();

// Drops cached mappings that no communicator holds, of processes not in `live`.
void forget_other_processes(const std::vector<uint64_t>& live);

// Maps `bytes` of `pid`'s fd `fd` read-only, populated (also used for control segments);
// fails if the file is smaller (reading past its end would raise SIGBUS).
const void* map_remote_fd(pid_t pid, int fd, size_t bytes, std::string* why);

}  // namespace rf::comm
