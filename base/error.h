#pragma once
// Error types shared by every layer. Recoverable failures are typed exceptions, never
// exit() or assert on input; layers derive their own (comm's PeerFailed / TimedOut /
// Aborted, the IDX reader's DataError, ...) from rf::Error.
#include <stdexcept>
#include <string>

namespace rf {

// Base of every error ringfence throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An internal invariant did not hold (a bug in ringfence, not bad input).
class EnforceError : public Error {
 public:
  using Error::Error;
};

// Input from a user, a file or a peer was invalid; the message names what and where.
class InvalidInput : public Error {
 public:
  using Error::Error;
};

}  // namespace rf
