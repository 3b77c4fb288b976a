// The comm seam without a connection: backend names, make_communicator's refusals and
// registered memory from allocate_registered. Communicators made by the factory, and the
// buffers they refuse, are comm_seam_test's (no UCX context in a unit test: it runs under
// the leak checker too).
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "base/error.h"
#include "comm/communicator.h"
#include "comm/bootstrap/file_store.h"
#include "comm/shm/shared_buffer.h"

using namespace rf::comm;

namespace {

std::string temp_dir() {
  std::string t = (std::filesystem::temp_directory_path() / "rf-factory-XXXXXX").string();
  REQUIRE(mkdtemp(t.data()) != nullptr);
  return t;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const rf::InvalidInput& e) {
    return e.what();
  }
  return "(no rf::InvalidInput)";
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("backend names round-trip; an unknown name is refused naming it and the choices") {
  for (Backend b : {Backend::Ucx, Backend::Nccl}) CHECK(parse_backend(backend_name(b)) == b);
  CHECK(std::string(backend_name(Backend::Ucx)) == "ucx");
  const std::string e = error_of([] { parse_backend("gloo"); });
  CHECK_MESSAGE(has(e, "'gloo'"), e);
  CHECK_MESSAGE(has(e, "ucx, nccl"), e);
  CHECK(has(error_of([] { parse_backend("UCX"); }), "'UCX'"));
}

// This test program does not call register_cuda_comm(): every CUDA half is missing, and the
// errors say which and why (no CUDA in the build, or not registered in the program).
const char* const kMissingHalf = RINGFENCE_HAVE_CUDA ? "is not registered in this program" : "this build has none";
// The NCCL backend also needs NCCL: a build with CUDA but without NCCL says so.
const char* const kMissingNccl =
    !RINGFENCE_HAVE_CUDA ? "this build has none" : RINGFENCE_HAVE_NCCL ? "is not registered in this program" : "needs NCCL";

TEST_CASE("make_communicator: the CUDA halves unregistered, NCCL on the host and no store are clear errors") {
  FileStore store(temp_dir());
  CommOptions o;
  o.store = &store;
  const std::string host = error_of([&] { make_communicator(Backend::Nccl, o); });
  CHECK_MESSAGE(has(host, "the NCCL backend needs a GPU"), host);
  o.device = Device::cuda;
  const std::string nccl = error_of([&] { make_communicator(Backend::Nccl, o); });
  CHECK_MESSAGE(has(nccl, "the NCCL backend"), nccl);
  CHECK_MESSAGE(has(nccl, kMissingNccl), nccl);
  const std::string staged = error_of([&] { make_communicator(Backend::Ucx, o); });
  CHECK_MESSAGE(has(staged, "staging of device buffers"), staged);
  CHECK_MESSAGE(has(staged, kMissingHalf), staged);
  const std::string prepare = error_of([] { prepare_backend(Backend::Nccl); });
  CHECK_MESSAGE(has(prepare, kMissingNccl), prepare);
  CommOptions none;
  const std::string e = error_of([&] { make_communicator(Backend::Ucx, none); });
  CHECK_MESSAGE(has(e, "no bootstrap store"), e);
}

TEST_CASE("allocate_registered: host memory is a zero-filled SharedBuffer; device memory is refused") {
  std::shared_ptr<RegisteredMemory> m = allocate_registered(12345);
  REQUIRE(m);
  CHECK(m->bytes() == 12345);
  CHECK(m->device() == Device::host);
  const auto* p = static_cast<const unsigned char*>(m->data());
  for (size_t i = 0; i < m->bytes(); ++i) REQUIRE(p[i] == 0);
  const auto* sb = dynamic_cast<const SharedBuffer*>(m.get());
  REQUIRE(sb != nullptr);
  CHECK(sb->shared());
  CHECK(m->contains(p + 100, 12245));
  CHECK_FALSE(m->contains(p + 100, 12246));
  const std::string e = error_of([] { allocate_registered(64, Device::cuda, 1); });
  CHECK_MESSAGE(has(e, "cuda:1"), e);
  CHECK_MESSAGE(has(e, kMissingHalf), e);
}
