// Conditions on a share's status. lastTransitionTime changes only when a
// condition's status flips, so "since when" is always answerable.
#pragma once

#include <cstdint>
#include <string>

#include "sharemanager/controller/v1/share_record.pb.h"

namespace controller {

namespace condition {
inline constexpr char kPodReady[] = "PodReady";
inline constexpr char kHealthy[] = "Healthy";
inline constexpr char kReadOnly[] = "ReadOnly";
// True while the current pod reports a repair the controller honours; the
// message is what is repaired. Its flip to false marks when the repair ended.
inline constexpr char kRepairing[] = "Repairing";
inline constexpr char kPodCreateFailed[] = "PodCreateFailed";
inline constexpr char kPodDeleteFailed[] = "PodDeleteFailed";
inline constexpr char kMountFailed[] = "MountFailed";
inline constexpr char kRuntimeUnavailable[] = "RuntimeUnavailable";
// True while the next pod waits for the runtime's go (PodRuntime::CheckStart:
// the previous pod's serving lease still held, or the drift margin after it);
// the message is what it waits for.
inline constexpr char kWaitingToStart[] = "WaitingToStart";
// True while the share's epoch is one the controller moved above an epoch
// found taken in etcd (PodRuntime::CheckStart: recorded or held by a
// restored older record, a lost write, another deployment), not reached by a
// replacement of its own; the message names both epochs.
inline constexpr char kEpochAdvanced[] = "EpochAdvanced";
// True from when a share's serving pod, made from an older pod template, is
// condemned (its epoch moved on) until a pod of the current template serves
// it. While one share has it, no other share starts rolling out.
inline constexpr char kRollingOut[] = "RollingOut";
}  // namespace condition

using Condition = sharemanager::controller::v1::Condition;
using ShareStatusRecord = sharemanager::controller::v1::ShareStatusRecord;

// Nullptr when absent.
const Condition* FindCondition(const ShareStatusRecord& status, const std::string& type);

// Sets the condition; returns true when its status flipped (or it is new).
bool SetCondition(ShareStatusRecord& status, const std::string& type, bool value,
                  const std::string& reason, const std::string& message, int64_t now_ms);

// Whether two statuses are the same but for condition messages (details
// that may change on every pass and alone are not worth a store write).
// Field by field, without reflection: it runs on every pass.
bool SameIgnoringMessages(const ShareStatusRecord& a, const ShareStatusRecord& b);

// True when the condition is present and true.
bool ConditionTrue(const ShareStatusRecord& status, const std::string& type);

}  // namespace controller
