#pragma once
// The benchmarks' command-line flags: one small parser instead of a loop per program.
// `--name VALUE` or `--name=VALUE`; --help / -h prints every flag with its default and
// exits 0; an unknown flag, a flag missing its value (also when the next argument is
// another flag) or a value that is not a number in range is a usage error naming the flag
// and the value ("PROG: --rounds: 'abc' is not an integer (see --help)", exit 2).
// Header-only and std-only, so that every bench can use it whatever it links.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace rf::bench {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A decimal integer in [lo, hi], nothing else (no sign tricks, no trailing text).
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
  Flags(std::string prog, std::string synopsis) : prog_(std::move(prog)), synopsis_(std::move(synopsis)) {}

  // A flag with a value; `meta` names the value in --help ("N", "FILE"), `help` says what
  // it does and its default.
  Flags& value(std::string name, std::string meta, std::string help, Setter set) {
    specs_.push_back({std::move(name), std::move(meta), std::move(help), std::move(set), true});
    return *this;
  }
  // A flag without a value.
  Flags& toggle(std::string name, std::string help, std::function<void()> set) {
    specs_.push_back({std::move(name), "", std::move(help), [s = std::move(set)](auto&, auto&) { s(); }, false});
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

  std::string usage() const {
    std::string u = "usage: " + synopsis_ + "\n";
    size_t width = 0;
    for (const auto& s : specs_) width = std::max(width, s.name.size() + (s.takes_value ? s.meta.size() + 1 : 0));
    for (const auto& s : specs_) {
      std::string left = s.takes_value ? s.name + " " + s.meta : s.name;
      left.resize(width, ' ');
      u += "  " + left + "  " + s.help + "\n";
    }
    u += "  --help, -h" + std::string(width > 10 ? width - 10 : 0, ' ') + "  this text\n";
    return u;
  }

  // Applies every argument; false when --help was given (the usage went to stdout).
  // Throws UsageError.
  bool parse(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      std::string flag = argv[i], value;
      if (flag == "--help" || flag == "-h") {
        std::fputs(usage().c_str(), stdout);
        return false;
      }
      bool inline_value = false;
      const size_t eq = flag.find('=');
      if (flag.rfind("--", 0) == 0 && eq != std::string::npos) {
        value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
        inline_value = true;
      }
      const Spec* spec = find(flag);
      if (!spec) throw UsageError("unknown flag '" + std::string(argv[i]) + "'");
      if (!spec->takes_value) {
        if (inline_value) throw UsageError(flag + " takes no value");
        spec->set(flag, "");
        continue;
      }
      if (!inline_value) {
        if (i + 1 >= argc) throw UsageError(flag + ": missing value");
        const std::string next = argv[i + 1];
        if (next.size() > 1 && next[0] == '-' && find(next.substr(0, next.find('='))))
          throw UsageError(flag + ": missing value (the next argument is the flag '" + next + "')");
        value = argv[++i];
      }
      spec->set(flag, value);
    }
    return true;
  }

  // The usual main(): parse, print a usage error as "PROG: why (see --help)". Returns -1
  // to go on, else the exit code (0 after --help, 2 after a usage error).
  int parse_or_exit_code(int argc, char** argv) const {
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
  struct Spec {
    std::string name, meta, help;
    Setter set;
    bool takes_value;
  };
  const Spec* find(const std::string& name) const {
    for (const auto& s : specs_)
      if (s.name == name) return &s;
    return nullptr;
  }
  std::string prog_, synopsis_;
  std::vector<Spec> specs_;
};

}  // namespace rf::bench
