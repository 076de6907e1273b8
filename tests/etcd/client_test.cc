#include "etcd/client.h"

#include <doctest/doctest.h>

#include "tests/support/require_ok.h"

namespace etcd {
namespace {

using testing_support::RequireOk;

}  // namespace

TEST_CASE("an etcd:// store URL names its endpoints, in order, and a key prefix") {
  auto url = RequireOk(ParseEtcdUrl("etcd://10.0.0.1:2379,etcd-1.etcd:32379/share-manager/prod/"));
  CHECK(url.endpoints == std::vector<std::string>{"10.0.0.1:2379", "etcd-1.etcd:32379"});
  CHECK(url.prefix == "/share-manager/prod");
  url = RequireOk(ParseEtcdUrl("etcd://[::1]:2379"));
  CHECK(url.endpoints == std::vector<std::string>{"[::1]:2379"});
  CHECK(url.prefix.empty());
  for (const char* bad : {"http://h:1/p", "etcd://", "etcd:///p", "etcd://h/p", "etcd://h:0/p",
                          "etcd://h:65536/p", "etcd://h:1,/p", "etcd://:1/p", "etcd://h:x/p"}) {
    CAPTURE(bad);
    const auto parsed = ParseEtcdUrl(bad);
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(parsed.status().message().find(bad) != absl::string_view::npos);
  }
}

TEST_CASE("a prefix's range end is the first key past every key with the prefix") {
  CHECK(PrefixRangeEnd("/a/shares/") == "/a/shares0");
  CHECK(PrefixRangeEnd("ab") == "ac");
  CHECK(PrefixRangeEnd("a\xff") == "b");
  CHECK(PrefixRangeEnd("\xff\xff") == std::string(1, '\0'));
  CHECK(PrefixRangeEnd("") == std::string(1, '\0'));
}

TEST_CASE("an etcd client needs an endpoint, each HOST:PORT") {
  CHECK(EtcdClient::Create({}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(EtcdClient::Create({.endpoints = {"127.0.0.1:1", "nope"}}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(EtcdClient::Create({.endpoints = {"127.0.0.1:1"}}).ok());
}

}  // namespace etcd
