// A Store whose every call can fail, time out (before or after taking
// effect) or be delayed, as its FaultInjector decides.
#pragma once

#include "controller/store/store.h"
#include "controller/testing/fault_injector.h"

namespace controller {

class FaultyStore final : public Store {
 public:
  explicit FaultyStore(Store& inner) : inner_(inner) {}
  FaultInjector& faults() { return faults_; }

  absl::StatusOr<ShareRecord> Get(const std::string& name) override {
    return WithFault<absl::StatusOr<ShareRecord>>(faults_, "store get " + name,
                                                  [&] { return inner_.Get(name); });
  }
  absl::StatusOr<std::vector<ShareRecord>> List() override {
    return WithFault<absl::StatusOr<std::vector<ShareRecord>>>(faults_, "store list",
                                                               [&] { return inner_.List(); });
  }
  absl::StatusOr<ShareRecord> Create(ShareRecord record) override {
    return WithFault<absl::StatusOr<ShareRecord>>(faults_, "store create " + record.name(),
                                                  [&] { return inner_.Create(record); });
  }
  absl::StatusOr<ShareRecord> Update(const ShareRecord& record) override {
    return WithFault<absl::StatusOr<ShareRecord>>(faults_, "store update " + record.name(),
                                                  [&] { return inner_.Update(record); });
  }
  absl::Status Delete(const std::string& name) override {
    return WithFault<absl::Status>(faults_, "store delete " + name,
                                   [&] { return inner_.Delete(name); });
  }
  void Watch(Listener listener) override { inner_.Watch(std::move(listener)); }

 private:
  Store& inner_;
  FaultInjector faults_;
};

}  // namespace controller
