#pragma once
// The collective algorithms, as factories of Collective state machines (collective.h).
// Each lives in its own file; the communicator picks one per call.
#include <memory>

#include "comm/collective.h"

namespace rf::comm {

class ShmSession;
struct SharedRange;

// Ring reduce-scatter + all-gather (ring_layout.h), pipelined over `flows` flows of pieces
// of at most `piece_bytes`; staging holds flows x piece_bytes bytes (pre-touched).
std::unique_ptr<Collective> make_allreduce_ring(Buffer buf, OpId id, int rank, int world, void* staging,
                                                int flows, size_t piece_bytes);
// Recursive doubling for small buffers (latency: log2 W rounds); non-powers of two fold
// the extra ranks in first and out last. staging holds buf.bytes().
std::unique_ptr<Collective> make_allreduce_recursive_doubling(Buffer buf, OpId id, int rank, int world,
                                                              void* staging);
// Shared-memory all-reduces (comm/shm/shm_session.h), every pair of ranks mapped. Zero-copy on
// registered buffers: range is where buf lies in its SharedBuffer, or null when it is not
// registered; if any rank's is not, `fallback` runs instead (every rank decides alike).
// scratch: scratch_bytes (cache-sized) for the partial sums of W > 2.
std::unique_ptr<Collective> make_allreduce_zero_copy(Buffer buf, OpId id, int rank, int world, ShmSession& shm,
                                                     const SharedRange* range, std::unique_ptr<Collective> fallback,
                                                     void* scratch, size_t scratch_bytes);
// Small all-reduce through the slots: buf.bytes() <= shm.slot_bytes().
std::unique_ptr<Collective> make_allreduce_shm_slots(Buffer buf, OpId id, int rank, int world, ShmSession& shm);
// Pipelined chain root -> root+1 -> ... in pieces of piece_bytes, received in place.
std::unique_ptr<Collective> make_broadcast_chain(Buffer buf, int root, OpId id, int rank, int world,
                                                 size_t piece_bytes);
std::unique_ptr<Collective> make_allgather_ring(Buffer in, Buffer out, OpId id, int rank, int world);
// Dissemination barrier: ceil(log2 W) rounds of one-byte tokens.
std::unique_ptr<Collective> make_barrier(OpId id, int rank, int world);
std::unique_ptr<Collective> make_send(int peer, const void* data, size_t bytes, OpId id, int rank);
std::unique_ptr<Collective> make_recv(int peer, void* data, size_t bytes, OpId id);

}  // namespace rf::comm
