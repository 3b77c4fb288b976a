#include <doctest/doctest.h>

#include "base/error.h"
#include "ddp/bucket_layout.h"

using namespace rf::ddp;

TEST_CASE("buckets take parameters in reverse registration order, up to the cap") {
  // 4 parameters of 10, 20, 30, 40 floats; cap 50 floats (200 bytes).
  const BucketLayout l = make_bucket_layout({10, 20, 30, 40}, 200);
  REQUIRE(l.num_buckets() == 3);
  CHECK(l.bucket_params[0] == std::vector<int>{3});      // 40: alone (40 + 30 > 50)
  CHECK(l.bucket_params[1] == std::vector<int>{2, 1});   // 30 + 20 = 50
  CHECK(l.bucket_params[2] == std::vector<int>{0});      // 10
  CHECK(l.bucket_floats == std::vector<int64_t>{40, 50, 10});
  CHECK(l.params[2].bucket == 1);
  CHECK(l.params[2].offset == 0);
  CHECK(l.params[1].offset == 30);
  CHECK(l.params[0].bucket == 2);
}

TEST_CASE("a parameter larger than the cap gets a bucket of its own, never split") {
  const BucketLayout l = make_bucket_layout({5, 1000, 5}, 16);
  REQUIRE(l.num_buckets() == 3);
  CHECK(l.bucket_floats == std::vector<int64_t>{5, 1000, 5});
}

TEST_CASE("the default cap keeps a small model in one bucket") {
  const BucketLayout l = make_bucket_layout({784 * 512, 512, 512 * 512, 512, 5120, 10}, size_t{25} << 20);
  CHECK(l.num_buckets() == 1);
  CHECK(l.bucket_floats[0] == 784 * 512 + 512 + 512 * 512 + 512 + 5120 + 10);
}

TEST_CASE("a small last bucket holds what backward finalises last; the rest overlaps") {
  // The reference CNN: conv1 (400, 16), conv2 (12800, 32), fc1 (200704, 128), fc2 (1280, 10).
  const std::vector<int64_t> cnn{400, 16, 12800, 32, 200704, 128, 1280, 10};
  const BucketLayout l = make_bucket_layout(cnn, size_t{25} << 20, size_t{256} << 10);
  REQUIRE(l.num_buckets() == 2);
  CHECK(l.bucket_params[0] == std::vector<int>{7, 6, 5, 4});  // fc2, fc1: overlap the convs
  CHECK(l.bucket_params[1] == std::vector<int>{3, 2, 1, 0});  // the convs: exposed
  CHECK(l.bucket_floats == std::vector<int64_t>{200704 + 128 + 1280 + 10, 400 + 16 + 12800 + 32});
  CHECK(l.params[0].bucket == 1);
  CHECK(l.params[0].offset == 12800 + 32 + 16);
  CHECK(l.params[3].offset == 0);
  CHECK(l.params[4].bucket == 0);
  CHECK(l.params[4].offset == 10 + 1280 + 128);
  // The same with the plain rule: one bucket.
  CHECK(make_bucket_layout(cnn, size_t{25} << 20, 0).num_buckets() == 1);
  // The first parameter alone does not fit the last cap: the plain layout.
  CHECK(make_bucket_layout({784 * 512, 512, 512 * 512}, size_t{25} << 20, size_t{256} << 10).num_buckets() == 1);
  // Everything fits the last cap: one bucket, as before.
  CHECK(make_bucket_layout({10, 20, 30}, size_t{25} << 20, size_t{256} << 10).num_buckets() == 1);
  // The last cap never exceeds the cap: {10, 20} would fit 1000 bytes, but not 100.
  const BucketLayout c = make_bucket_layout({10, 20, 30}, 100, 1000);
  CHECK(c.bucket_floats == std::vector<int64_t>{30, 20, 10});
}

TEST_CASE("bad layouts are refused with a reason") {
  CHECK_THROWS_AS(make_bucket_layout({}, 100), rf::InvalidInput);
  CHECK_THROWS_AS(make_bucket_layout({4, 0}, 100), rf::InvalidInput);
  CHECK_THROWS_AS(make_bucket_layout({4}, 0), rf::InvalidInput);
}

// The layout is sizes only: how many buckets fit the tag's op field is OpPlan's to say
// (ddp/op_plan.h; the reducer refuses too many, test_reducer.cpp).
TEST_CASE("a layout of many buckets is made; the op field's limit is not the layout's") {
  CHECK(make_bucket_layout(std::vector<int64_t>(300, 1), 4).num_buckets() == 300);
}
