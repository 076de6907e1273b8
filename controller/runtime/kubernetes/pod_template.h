// The share-manager pod template (the shipped container/k8s/share-manager-pod.yaml
// or an operator's own) and what it becomes for one share and epoch.
//
// Rendering keeps everything the template says and sets only what belongs
// to the share: the pod's name (one per epoch), its volume and epoch labels,
// an ownerReference to the ShareManager (so deleting it can never orphan a
// pod), the --volume and --epoch arguments, the share's daemonFlags after
// the template's arguments, the block device's path, and the claim (the
// PersistentVolumeClaim named after the volume).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sharemanager/controller/v1/share_record.pb.h"

namespace controller::kubernetes {

inline constexpr char kContainerName[] = "share-manager";
inline constexpr char kVolumeLabel[] = "share-manager/volume";
inline constexpr char kEpochLabel[] = "share-manager/epoch";
inline constexpr char kAppLabel[] = "app.kubernetes.io/name";
inline constexpr char kAppName[] = "share-manager";

// The ShareManager a pod belongs to.
struct Owner {
  std::string name;
  std::string uid;
};

class PodTemplate {
 public:
  // Checks everything rendering relies on; InvalidArgument naming the field
  // ("pod template spec.containers[share-manager].args: no --epoch=...").
  static absl::StatusOr<PodTemplate> Parse(nlohmann::json manifest);

  nlohmann::json RenderPod(const sharemanager::controller::v1::ShareSpec& spec, uint64_t epoch,
                           const Owner& owner) const;
  // The share's stable Service: NFS clients mount its address, which follows
  // the serving pod from epoch to epoch.
  nlohmann::json RenderService(const std::string& volume, const Owner& owner) const;

  uint16_t grpc_port() const { return grpc_port_; }
  uint16_t nfs_port() const { return nfs_port_; }
  // How long a deleted pod may take to stop (its terminationGracePeriodSeconds).
  int64_t grace_period_seconds() const { return grace_period_seconds_; }

 private:
  explicit PodTemplate(nlohmann::json manifest) : manifest_(std::move(manifest)) {}
  static absl::StatusOr<PodTemplate> ParseOrThrow(nlohmann::json manifest);

  nlohmann::json manifest_;
  uint16_t grpc_port_ = 0;
  uint16_t nfs_port_ = 0;
  int64_t grace_period_seconds_ = 30;
};

}  // namespace controller::kubernetes
