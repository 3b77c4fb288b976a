#pragma once
// The collective algorithms, as factories of Collective state machines (collective.h).
// Each lives in its own file; the communicator picks one per call.
#include <memory>

#include "comm/collective.h"

namespace rf::comm {

// Ring reduce-scatter + all-gather (ring_layout.h), pipelined over `flows` flows of pieces
// of at most `piece_bytes`; staging holds flows x piece_bytes bytes (pre-touched).
std::unique_ptr<Collective> make_allreduce_ring(Buffer buf, OpId id, int rank, int world, void* staging,
                                                int flows, size_t piece_bytes);
// Recursive doubling for small buffers (latency: log2 W rounds); non-powers of two fold
// the extra ranks in first and out last. staging holds buf.bytes().
std::unique_ptr<Collective> make_allreduce_recursive_doubling(Buffer buf, OpId id, int rank, int world,
                                                              void* staging);
// Pipelined chain root -> root+1 -> ... in pieces of piece_bytes, received in place.
std::unique_ptr<Collective> make_broadcast_chain(Buffer buf, int root, OpId id, int rank, int world,
                                                 size_t piece_bytes);
std::unique_ptr<Collective> make_allgather_ring(Buffer in, Buffer out, OpId id, int rank, int world);
// Dissemination barrier: ceil(log2 W) rounds of one-byte tokens.
std::unique_ptr<Collective> make_barrier(OpId id, int rank, int world);
std::unique_ptr<Collective> make_send(int peer, const void* data, size_t bytes, OpId id, int rank);
std::unique_ptr<Collective> make_recv(int peer, void* data, size_t bytes, OpId id);

}  // namespace rf::comm
