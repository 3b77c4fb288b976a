#pragma once
// The benchmarks' command-line flags: one table per program instead of a loop per program.
// `--name VALUE` or `--name=VALUE`; --help / -h prints every flag with its default and
// exits 0; an unknown flag, a flag missing its value (also when the next argument is
// another flag) or a value that is not a number in range is a usage error naming the flag
// and the value ("PROG: --rounds: 'abc' is not an integer (see --help)", exit 2).
// The flag table and matching are CLI11's (through base/cli.h, which every bench reaches
// through rf_base); the numbers are parsed here, to keep these exact rules and messages.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "base/cli.h"

namespace rf::bench {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A decimal integer in [lo, hi], nothing else (no sign tricks, no trailing text). Ours:
// CLI11's integers also take hex, octal and leading blanks.
inline int64_t parse_int_flag(const std::string& flag, const std::string& v, int64_t lo = 0,
                              int64_t hi = std::numeric_limits<int64_t>::max()) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  const bool digits = !v.empty() && (std::isdigit(static_cast<unsigned char>(v[0])) || v[0] == '-');
  if (!digits || *end != '\0' || errno == ERANGE) throw UsageError(flag + ": '" + v + "' is not an integer");
  if (n < lo || n > hi)
    throw UsageError(flag + ": " + v + (n < lo && hi >= std::numeric_limits<int32_t>::max()  // no real upper bound
                                            ? " must be >= " + std::to_string(lo)
                                            : " must be in " + std::to_string(lo) + " .. " + std::to_string(hi)));
  return n;
}

// A finite decimal number > lo_exclusive.
inline double parse_float_flag(const std::string& flag, const std::string& v, double lo_exclusive) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  const bool starts = !v.empty() && (std::isdigit(static_cast<unsigned char>(v[0])) || v[0] == '-' || v[0] == '.');
  const bool hex = v.find_first_of("xXnN") != std::string::npos;  // no hex floats, inf or nan
  if (!starts || hex || *end != '\0' || errno == ERANGE) throw UsageError(flag + ": '" + v + "' is not a number");
  if (!(x > lo_exclusive)) throw UsageError(flag + ": " + v + " must be > " + std::to_string(lo_exclusive));
  return x;
}

class Flags {
 public:
  using Setter = std::function<void(const std::string& flag, const std::string& value)>;

  // prog: the program's name in messages; synopsis: the first line(s) of --help.
  Flags(std::string prog, std::string synopsis) : prog_(std::move(prog)) {
    app_.set_help_flag();  // ours, listed last (see finish())
    app_.formatter(std::make_shared<rf::cli::Help>(std::move(synopsis)));
  }

  // A flag with a value; `meta` names the value in --help ("N", "FILE"), `help` says what
  // it does and its default.
  Flags& value(std::string name, std::string meta, std::string help, Setter set) {
    setters_[rf::cli::value_flag(app_, name, meta, help)] = std::move(set);
    return *this;
  }
  // A flag without a value.
  Flags& toggle(std::string name, std::string help, std::function<void()> set) {
    setters_[rf::cli::toggle(app_, name, help)] = [s = std::move(set)](auto&, auto&) { s(); };
    return *this;
  }
  // Integer flags: the value must lie in [lo, hi].
  template <class T>
  Flags& integer(std::string name, std::string help, T& out, int64_t lo,
                 int64_t hi = std::numeric_limits<int64_t>::max()) {
    static_assert(std::is_integral_v<T> && sizeof(T) <= sizeof(int64_t));
    // Compared as unsigned: a size_t's max cast to int64_t is -1, which made every value
    // of a size_t flag out of range ("--mb: 400 must be in 1 .. -1").
    if (hi >= 0 && static_cast<uint64_t>(hi) > static_cast<uint64_t>(std::numeric_limits<T>::max()))
      hi = static_cast<int64_t>(std::numeric_limits<T>::max());
    if (lo < static_cast<int64_t>(std::numeric_limits<T>::min())) lo = static_cast<int64_t>(std::numeric_limits<T>::min());
    return value(std::move(name), "N", std::move(help),
                 [&out, lo, hi](const std::string& f, const std::string& v) { out = static_cast<T>(parse_int_flag(f, v, lo, hi)); });
  }
  Flags& text(std::string name, std::string meta, std::string help, std::string& out) {
    return value(std::move(name), std::move(meta), std::move(help), [&out](const std::string& f, const std::string& v) {
      if (v.empty()) throw UsageError(f + ": empty value");
      out = v;
    });
  }

  // "usage: SYNOPSIS" and every flag with its help, aligned (rf::cli::Help).
  std::string usage() {
    finish();
    return app_.help();
  }

  // Applies every argument; false when --help was given (the usage went to stdout).
  // Throws UsageError.
  bool parse(int argc, char** argv) {
    finish();
    const std::vector<std::string> args(argv + 1, argv + argc);
    // --help anywhere shows the flags: no flag here takes "--help" or "-h" as its value.
    if (std::find_if(args.begin(), args.end(), [](auto& a) { return a == "--help" || a == "-h"; }) != args.end()) {
      std::fputs(usage().c_str(), stdout);
      return false;
    }
    // A flag missing its value must not take the next flag as one.
    const auto next_is_flag = [this](const std::string& next) {
      return next.size() > 1 && next[0] == '-' && rf::cli::find(app_, next) != nullptr;
    };
    const auto refuse = [](const rf::cli::Problem& p) {
      switch (p.kind) {
        case rf::cli::Problem::Unknown: throw UsageError("unknown flag '" + p.arg + "'");
        case rf::cli::Problem::MissingValue: throw UsageError(p.arg + ": missing value");
        case rf::cli::Problem::NextIsFlag:
          throw UsageError(p.arg + ": missing value (the next argument is the flag '" + p.next + "')");
        default: throw UsageError(p.arg + " takes no value");
      }
    };
    try {
      rf::cli::parse_checked(
          app_, args, next_is_flag,
          [this](const CLI::Option& o, const std::string& v) { setters_.at(&o)(rf::cli::flag_name(o), v); }, refuse);
    } catch (const CLI::ParseError& e) {  // check() leaves CLI11 nothing to refuse
      throw UsageError(e.what());
    }
    return true;
  }

  // The usual main(): parse, print a usage error as "PROG: why (see --help)". Returns -1
  // to go on, else the exit code (0 after --help, 2 after a usage error).
  int parse_or_exit_code(int argc, char** argv) {
    try {
      return parse(argc, argv) ? -1 : 0;
    } catch (const UsageError& e) {
      return fail(e.what());
    }
  }
  // For checks after parsing (a combination of flags): prints like a usage error, returns 2.
  int fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s (see --help)\n", prog_.c_str(), why.c_str());
    return 2;
  }

 private:
  // --help, -h closes the list; parse() handles it before CLI11 sees the arguments.
  void finish() {
    if (!app_.get_option_no_throw("--help")) setters_[rf::cli::toggle(app_, "--help,-h", "this text")] = [](auto&, auto&) {};
  }
  std::string prog_;
  CLI::App app_;
  std::map<const CLI::Option*, Setter> setters_;
};

}  // namespace rf::bench
