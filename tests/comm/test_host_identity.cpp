// The host identity the data plane keys shared memory on (comm/host_identity.h): stable in
// a process, made of the boot id, the network namespace and the host name, and replaced
// by RINGFENCE_HOST_ID when that is set.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <string>

#include "comm/host_identity.h"

using namespace rf::comm;

TEST_CASE("host identity: boot id, network namespace and host name; RINGFENCE_HOST_ID replaces it") {
  unsetenv("RINGFENCE_HOST_ID");
  const std::string id = host_identity();
  CHECK_MESSAGE(id.find("/net:[") != std::string::npos, id);  // the namespace: /proc/self/ns/net
  CHECK(host_identity_hash() == host_identity_hash());
  const uint64_t plain = host_identity_hash();

  setenv("RINGFENCE_HOST_ID", "rack7-node3", 1);
  CHECK(host_identity() == "RINGFENCE_HOST_ID=rack7-node3");
  CHECK(host_identity_hash() != plain);
  setenv("RINGFENCE_HOST_ID", "", 1);  // empty: as if unset
  CHECK(host_identity() == id);
  unsetenv("RINGFENCE_HOST_ID");
}
