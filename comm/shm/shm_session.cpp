#include "comm/shm/shm_session.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "base/error.h"
#include "base/populate.h"
#include "base/str.h"
#include "comm/ucx/single_copy.h"

namespace rf::comm {

namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

ShmSession::ShmSession(int rank, int world, uint64_t generation, size_t slot_bytes)
    : rank_(rank), world_(world), slot_bytes_(round_up(slot_bytes, 64)), peers_(world) {
  slots_offset_ = round_up(sizeof(ShmControl), 64);
  segment_bytes_ = round_up(slots_offset_ + 2 * slot_bytes_, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  fd_ = memfd_create("ringfence-comm", MFD_CLOEXEC);
  if (fd_ < 0) throw rf::Error(rf::str("memfd_create: ", std::strerror(errno)));
  void* p = MAP_FAILED;
  if (ftruncate(fd_, static_cast<off_t>(segment_bytes_)) == 0) {
    p = mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  }
  if (p != MAP_FAILED) populate_pages(p, segment_bytes_);  // bounded calls, not MAP_POPULATE (base/populate.h)
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd_);
    throw rf::Error(rf::str("shared-memory segment of ", segment_bytes_, " bytes: ", std::strerror(err)));
  }
  mine_ = new (p) ShmControl;
  mine_->token = make_hold_token();
  mine_->process = process_token();
  mine_->generation = generation;
  mine_->slot_bytes = slot_bytes_;
  mine_->hold.store(mine_->token, std::memory_order_relaxed);
  mine_->magic = ShmControl::kMagic;
  std::atomic_thread_fence(std::memory_order_release);
}

ShmSession::~ShmSession() {
  for (int p = 0; p < world_; ++p) {
    Peer& peer = peers_[p];
    peer.buffers.clear();  // the process-wide cache may keep them (shm_mappings.h)
    if (peer.ctrl) munmap(peer.ctrl, segment_bytes_);
  }
  release();
  munmap(mine_, segment_bytes_);
  close(fd_);
}

std::string ShmSession::attach(int peer, pid_t pid, int fd, uint64_t token) {
  // The header first (every segment holds one): its slot size says how large the segment
  // is, and a peer with other slots has a smaller or larger file than ours.
  std::string why;
  const void* h = map_remote_fd(pid, fd, slots_offset_, &why);
  if (!h) return why;
  const auto* hc = static_cast<const ShmControl*>(h);
  if (hc->magic != ShmControl::kMagic || hc->token != token) {
    why = "its shared segment does not hold the announced token (another host?)";
  } else if (hc->slot_bytes != slot_bytes_) {
    why = rf::str("it uses slots of ", hc->slot_bytes, " bytes, this rank ", slot_bytes_);
  }
  munmap(const_cast<void*>(h), slots_offset_);
  if (!why.empty()) return why;
  const void* p = map_remote_fd(pid, fd, segment_bytes_, &why);
  if (!p) return why;
  const auto* c = static_cast<const ShmControl*>(p);
  if (c->token != token) {  // the same file still (its fd was not reused meanwhile)
    munmap(const_cast<void*>(p), segment_bytes_);
    return "its shared segment changed while it was being mapped";
  }
  peers_[peer].ctrl = const_cast<ShmControl*>(c);
  peers_[peer].pid = pid;
  peers_[peer].token = token;
  peers_[peer].process = c->process;
  return "";
}

const unsigned char* ShmSession::peer_buffer(int p) {
  Peer& peer = peers_[p];
  const ShmControl& c = *peer.ctrl;
  // Written by the peer before its `entered` word, which the caller loaded (acquire).
  const uint64_t id = c.buf_id, fd = c.buf_fd, offset = c.buf_offset, bytes = c.buf_bytes, file = c.buf_file_bytes;
  if (offset > file || bytes > file - offset) {
    throw rf::InvalidInput(rf::str("rank ", p, " announced a buffer range [", offset, ", +", bytes,
                                   ") outside its ", file, "-byte shared buffer"));
  }
  for (const Mapping& m : peer.buffers) {
    if (m.id == id && m.map->bytes == file) return m.map->base + offset;
  }
  std::string why;
  auto map = fd <= static_cast<uint64_t>(INT32_MAX)
                 ? map_peer_buffer(peer.process, peer.pid, static_cast<int>(fd), id, file, [&] { return held(p); }, &why)
                 : nullptr;
  if (!map) throw rf::Error(rf::str("cannot map rank ", p, "'s registered buffer: ", why));
  peer.buffers.push_back(Mapping{id, map});
  return map->base + offset;
}

void ShmSession::forget_other_processes() const {
  std::vector<uint64_t> live;
  for (const Peer& p : peers_) {
    if (p.ctrl) live.push_back(p.process);
  }
  rf::comm::forget_other_processes(live);
}

}  // namespace rf::comm
