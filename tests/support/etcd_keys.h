// Looking at etcd's keys from a test, with the client the code under test uses.
#pragma once

#include <optional>
#include <string>

#include "etcd/client.h"
#include "tests/support/require_ok.h"

namespace testing_support {

// The key's value, lease and revisions, or nullopt when it is absent.
inline std::optional<mvccpb::KeyValue> EtcdGet(etcd::EtcdClient& client, const std::string& key) {
  etcdserverpb::RangeRequest get;
  get.set_key(key);
  auto got = RequireOk(client.Range(get));
  if (got.kvs().empty()) return std::nullopt;
  return got.kvs(0);
}

// etcd's revision now: every write anywhere moves it.
inline int64_t EtcdRevision(etcd::EtcdClient& client) {
  etcdserverpb::RangeRequest request;
  request.set_key("any");
  return RequireOk(client.Range(request)).header().revision();
}

}  // namespace testing_support
