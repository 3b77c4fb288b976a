#pragma once
// Typed errors of the control plane. A frame or field that fails validation is
// ProtocolError (bad input from a peer, never an assert); a refused request (wrong token,
// stale incarnation) comes back to the client as Refused; a call that ran past its
// deadline is CallTimeout; a job the coordinator stopped (digest mismatch, below minimum
// world size) is JobStopped, carrying the coordinator's error text.
#include "base/error.h"

namespace rf::elastic {

class ProtocolError : public rf::InvalidInput {
 public:
  using rf::InvalidInput::InvalidInput;
};

class Refused : public rf::Error {
 public:
  using rf::Error::Error;
};

class CallTimeout : public rf::Error {
 public:
  using rf::Error::Error;
};

class ConnectionLost : public rf::Error {
 public:
  using rf::Error::Error;
};

class JobStopped : public rf::Error {
 public:
  using rf::Error::Error;
};

// The job ended normally (every member left: DONE) before or while this worker waited,
// e.g. a spare, or a restart that came up as the last members left: nothing to do.
class JobFinished : public rf::Error {
 public:
  using rf::Error::Error;
};

}  // namespace rf::elastic
