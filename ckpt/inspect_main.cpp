// ckpt_inspect FILE... — validates safetensors files the way resume and --init will, and
// prints each one's tensors and metadata. Exit 0 when every file is valid, 1 when one is
// not (its error names the file, the tensor and the problem), 2 on usage errors (no file,
// an unknown option; `--` ends the options).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"

namespace {

void print(const rf::ckpt::SafetensorsReader& r) {
  uint64_t bytes = 0;
  for (const auto& t : r.tensors()) bytes += t.nbytes();
  std::printf("%s: valid, %zu tensors, %llu data bytes, integrity %s\n", r.source().c_str(), r.tensors().size(),
              static_cast<unsigned long long>(bytes),
              r.has_integrity() ? "verified (crc32c per tensor, metadata crc, state digest)" : "not recorded");
  for (const auto& t : r.tensors()) {
    std::string shape = "[";
    for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
    shape += "]";
    std::printf("  %-40s %-5s %-20s bytes [%llu, %llu)\n", t.name.c_str(), std::string(rf::ckpt::dtype_name(t.dtype)).c_str(),
                shape.c_str(), static_cast<unsigned long long>(t.begin), static_cast<unsigned long long>(t.end));
  }
  for (const auto& [k, v] : r.metadata()) {
    if (k == rf::ckpt::kCrcKey) continue;  // one line per tensor would repeat the list above
    std::printf("  metadata %s = %s\n", k.c_str(), v.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "usage: ckpt_inspect [--] FILE.safetensors...\n"
                      "Validates each file (header, offsets; crc32c per tensor, metadata crc and state\n"
                      "digest when the file records them) and lists its tensors and metadata.\n"
                      "Exit 0: all valid; 1: one is not (INVALID FILE: reason); 2: usage.\n";
  std::vector<std::string> files;
  bool options = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (options && a == "--") {
      options = false;
    } else if (options && (a == "--help" || a == "-h")) {
      std::fputs(usage, stdout);
      return 0;
    } else if (options && a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "ckpt_inspect: unknown option '%s' (a file starting with '-': put -- before it)\n%s",
                   a.c_str(), usage);
      return 2;
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    std::fputs(usage, stderr);
    return 2;
  }
  int rc = 0;
  for (const auto& f : files) {
    try {
      print(rf::ckpt::SafetensorsReader::open(f));
    } catch (const std::exception& e) {
      std::printf("INVALID %s\n", e.what());
      rc = 1;
    }
  }
  return rc;
}
