#include "comm/errors.h"

#include "base/str.h"

namespace rf::comm {

namespace {
std::string where(const CommErrorInfo& i) {
  std::string s = rf::str("rank ", i.rank, ": ", i.collective.empty() ? "comm" : i.collective);
  if (i.generation >= 0) s += rf::str(" g=", i.generation);
  if (i.step >= 0) s += rf::str(" s=", i.step);
  if (i.op >= 0) s += rf::str(" op=", i.op);
  if (i.chunk >= 0) s += rf::str(" chunk ", i.chunk);
  return s;
}
}  // namespace

CommError::CommError(const CommErrorInfo& info, const std::string& summary)
    : rf::Error(where(info) + ": " + summary), info_(info) {}

// A transport that cannot say which peer failed (NCCL's async errors) leaves peer at -1;
// a rank whose own GPU is stuck names itself (device_stuck).
PeerFailed::PeerFailed(const CommErrorInfo& i)
    : CommError(i, i.device_stuck  ? rf::str("this rank's GPU is stuck (", i.cause, ")")
                   : i.peer >= 0 ? rf::str("peer ", i.peer, " failed (", i.cause, ")")
                                 : rf::str("a peer failed (", i.cause, ")")) {}

TimedOut::TimedOut(const CommErrorInfo& i)
    : CommError(i, i.peer >= 0 ? rf::str("timed out waiting on peer ", i.peer, " (", i.cause, ")")
                               : rf::str("timed out (", i.cause, ")")) {}

Aborted::Aborted(const CommErrorInfo& i) : CommError(i, rf::str("aborted (", i.cause, ")")) {}

}  // namespace rf::comm
