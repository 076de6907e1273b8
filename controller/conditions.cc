#include "controller/conditions.h"

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

bool ConditionTrue(const ShareStatusRecord& status, const std::string& type) {
  const Condition* c = FindCondition(status, type);
  return c != nullptr && c->status();
}

}  // namespace controller
