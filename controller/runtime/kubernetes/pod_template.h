// The share-manager pod template (the shipped deploy/base/share-manager-pod.yaml
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
// What the pod was made from (PodTemplate::hash): a pod whose label differs
// from the running controller's template is outdated and rolled out.
inline constexpr char kTemplateHashLabel[] = "share-manager/pod-template-hash";
inline constexpr char kAppLabel[] = "app.kubernetes.io/name";
inline constexpr char kAppName[] = "share-manager";

// Flags of share-manager a share's spec.daemonFlags may not set: who the pod
// is (its volume, epoch, UID, device), who may call it (--tls-*, the API's
// listeners) and who may mount (--nfs-clients). Whoever may edit a
// ShareManager gets no more than that: a pod the template vouches for.
inline constexpr const char* kReservedFlags[] = {"--volume", "--epoch",         "--pod-uid",
                                                 "--device", "--export-dir",    "--nfs-clients",
                                                 "--listen", "--health-listen", "--socket"};

// InvalidArgument naming the first of the share's flags that is reserved.
absl::Status CheckShareFlags(const sharemanager::controller::v1::ShareSpec& spec);

// The ShareManager a pod belongs to.
struct Owner {
  std::string name;
  std::string uid;
};

class PodTemplate {
 public:
  // Checks everything rendering relies on; InvalidArgument naming the field
  // ("pod template spec.containers[share-manager].args: no --epoch=...").
  // What the apiserver sets on a pod (status, metadata.uid, ...) is dropped,
  // so a pod copied with `kubectl get -o yaml` serves as a template.
  static absl::StatusOr<PodTemplate> Parse(nlohmann::json manifest);

  nlohmann::json RenderPod(const sharemanager::controller::v1::ShareSpec& spec, uint64_t epoch,
                           const Owner& owner) const;
  // The share's stable Service: NFS clients mount its address, which follows
  // the serving pod from epoch to epoch.
  nlohmann::json RenderService(const std::string& volume, const Owner& owner) const;

  // 16 hex digits naming what the template makes of a pod (FNV-1a 64 of a
  // render's JSON with the per-pod fields fixed, keys sorted): equal
  // templates give equal hashes on every controller.
  const std::string& hash() const { return hash_; }
  uint16_t grpc_port() const { return grpc_port_; }
  uint16_t nfs_port() const { return nfs_port_; }

 private:
  explicit PodTemplate(nlohmann::json manifest) : manifest_(std::move(manifest)) {}
  static absl::StatusOr<PodTemplate> ParseOrThrow(nlohmann::json manifest);

  nlohmann::json manifest_;
  uint16_t grpc_port_ = 0;
  uint16_t nfs_port_ = 0;
  std::string hash_;
};

}  // namespace controller::kubernetes
