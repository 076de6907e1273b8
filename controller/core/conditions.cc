#include "controller/core/conditions.h"

namespace controller {

const Condition* FindCondition(const ShareStatusRecord& status, const std::string& type) {
  for (const auto& c : status.conditions()) {
    if (c.type() == type) return &c;
  }
  return nullptr;
}

bool SetCondition(ShareStatusRecord& status, const std::string& type, bool value,
                  const std::string& reason, const std::string& message, int64_t now_ms) {
  Condition* found = nullptr;
  for (auto& c : *status.mutable_conditions()) {
    if (c.type() == type) found = &c;
  }
  if (found == nullptr) {
    found = status.add_conditions();
    found->set_type(type);
    found->set_status(!value);  // forces the flip below
  }
  const bool flipped = found->status() != value;
  if (flipped) {
    found->set_status(value);
    found->set_last_transition_unix_ms(now_ms);
  }
  found->set_reason(reason);
  found->set_message(message);
  return flipped;
}

bool SameIgnoringMessages(const ShareStatusRecord& a, const ShareStatusRecord& b) {
  // A field added to the record must be added here too (the test
  // "statuses differing in any field but a condition message are not the same" catches it).
  if (a.phase() != b.phase() || a.reason() != b.reason() || a.pod() != b.pod() ||
      a.endpoint() != b.endpoint() || a.epoch() != b.epoch() ||
      a.remount_requested_generation() != b.remount_requested_generation() ||
      a.remount_requested_unix_ms() != b.remount_requested_unix_ms() ||
      a.remount_acknowledged_generation() != b.remount_acknowledged_generation() ||
      a.observed_spec_generation() != b.observed_spec_generation() ||
      a.replacements() != b.replacements() ||
      a.last_replacement_unix_ms() != b.last_replacement_unix_ms() ||
      a.pod_created_unix_ms() != b.pod_created_unix_ms() || a.hold_record() != b.hold_record() ||
      a.conditions_size() != b.conditions_size()) {
    return false;
  }
  for (int i = 0; i < a.conditions_size(); ++i) {
    const Condition& x = a.conditions(i);
    const Condition& y = b.conditions(i);
    if (x.type() != y.type() || x.status() != y.status() || x.reason() != y.reason() ||
        x.last_transition_unix_ms() != y.last_transition_unix_ms()) {
      return false;
    }
  }
  return true;
}

bool ConditionTrue(const ShareStatusRecord& status, const std::string& type) {
  const Condition* c = FindCondition(status, type);
  return c != nullptr && c->status();
}

}  // namespace controller
