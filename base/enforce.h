#pragma once
// RF_ENFORCE(cond, message parts...) — checks an invariant and throws rf::EnforceError with
// the condition text, file:line and the message. Use it for invariants; data that came
// from a file, a flag or a peer is validated with a typed error instead.
#include "base/error.h"
#include "base/str.h"

#define RF_ENFORCE(cond, ...)                                                        \
  do {                                                                               \
    if (!(cond)) [[unlikely]] {                                                      \
      throw ::rf::EnforceError(::rf::str(__FILE__, ":", __LINE__, ": enforce(" #cond \
                                         ") failed: ", ##__VA_ARGS__));              \
    }                                                                                \
  } while (0)
