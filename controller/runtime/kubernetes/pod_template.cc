#include "controller/runtime/kubernetes/pod_template.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "controller/runtime/pod_runtime.h"
#include "controller/store/kubernetes/share_object.h"

namespace controller::kubernetes {
namespace {

using nlohmann::json;

// The claim and device of the share's block volume, by this name in the
// template's volumes and the container's volumeDevices.
constexpr char kDataVolume[] = "data";
constexpr char kVolumeArg[] = "--volume=";
constexpr char kEpochArg[] = "--epoch=";

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("pod template ", field, ": ", why));
}

// The index of the element of `list` whose "name" is `name`; -1 when none.
int Named(const json& list, const std::string& name) {
  if (!list.is_array()) return -1;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].is_object() && list[i].value("name", "") == name) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<uint16_t> PortNamed(const json& container, const std::string& name,
                                   const std::string& field) {
  const json ports = container.value("ports", json::array());
  const int i = Named(ports, name);
  if (i < 0) return Bad(field + ".ports", absl::StrCat("no port named '", name, "'"));
  const json port = ports[static_cast<size_t>(i)].value("containerPort", json());
  if (!port.is_number_integer() || port.get<int64_t>() < 1 || port.get<int64_t>() > 65535) {
    return Bad(absl::StrCat(field, ".ports[", name, "].containerPort"), "not a port (1-65535)");
  }
  return static_cast<uint16_t>(port.get<int64_t>());
}

json& Container(json& pod) {
  json& containers = pod["spec"]["containers"];
  return containers[static_cast<size_t>(Named(containers, kContainerName))];
}

json OwnerReferences(const Owner& owner) {
  // No blockOwnerDeletion: the share's finalizer already holds it until its
  // pods are gone, and asking for it would need a right over the share's
  // finalizers wherever OwnerReferencesPermissionEnforcement is on.
  return json::array({{{"apiVersion", absl::StrCat(kGroup, "/", kVersion)},
                       {"kind", kKind},
                       {"name", owner.name},
                       {"uid", owner.uid},
                       {"controller", true}}});
}

std::string Fnv1a64Hex(const std::string& text) {
  uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return absl::StrCat(absl::Hex(hash, absl::kZeroPad16));
}

}  // namespace

absl::StatusOr<PodTemplate> PodTemplate::Parse(json manifest) {
  if (!manifest.is_object()) return Bad("(document)", "not an object");
  // value() throws on a field of another type than the one asked.
  try {
    return ParseOrThrow(std::move(manifest));
  } catch (const json::exception& e) {
    return Bad("(document)", e.what());
  }
}

absl::StatusOr<PodTemplate> PodTemplate::ParseOrThrow(json manifest) {
  // What the apiserver set on a pod the template was copied from (kubectl get
  // -o yaml) would make every Create fail: it goes, as does the status.
  manifest.erase("status");
  json& metadata = manifest["metadata"];
  if (metadata.is_null()) metadata = json::object();
  if (!metadata.is_object()) return Bad("metadata", "not an object");
  for (const char* server_set : {"resourceVersion", "uid", "creationTimestamp", "generation",
                                 "managedFields", "selfLink", "ownerReferences", "namespace"}) {
    metadata.erase(server_set);
  }
  if (metadata.contains("labels") && !metadata["labels"].is_object()) {
    return Bad("metadata.labels", "not an object");
  }
  // Set per pod: a template copied from a pod hashes as the one it was made from.
  if (metadata.contains("labels")) {
    for (const char* own : {kVolumeLabel, kEpochLabel, kTemplateHashLabel}) {
      metadata["labels"].erase(own);
    }
  }
  if (manifest.value("apiVersion", "") != "v1" || manifest.value("kind", "") != "Pod") {
    return Bad("kind", "not a v1 Pod");
  }
  const json spec = manifest.value("spec", json::object());
  // A restart in place would bring a replaced epoch back behind the
  // controller's back: a pod that ends stays ended, and the controller decides.
  if (spec.value("restartPolicy", "") != "Never") {
    return Bad("spec.restartPolicy", "must be Never: the controller replaces a pod that ends");
  }
  const json containers = spec.value("containers", json::array());
  const int index = Named(containers, kContainerName);
  const std::string field = absl::StrCat("spec.containers[", kContainerName, "]");
  if (index < 0) return Bad("spec.containers", absl::StrCat("no container named ", kContainerName));
  const json& container = containers[static_cast<size_t>(index)];
  const json args = container.value("args", json::array());
  int volume_args = 0;
  int epoch_args = 0;
  for (const auto& arg : args) {
    if (!arg.is_string()) return Bad(field + ".args", "not a list of strings");
    volume_args += absl::StartsWith(arg.get<std::string>(), kVolumeArg);
    epoch_args += absl::StartsWith(arg.get<std::string>(), kEpochArg);
  }
  if (volume_args != 1 || epoch_args != 1) {
    return Bad(field + ".args", absl::StrCat("needs exactly one ", kVolumeArg, "... and one ",
                                             kEpochArg, "... (the share's, set per pod)"));
  }
  if (Named(container.value("volumeDevices", json::array()), kDataVolume) < 0) {
    return Bad(field + ".volumeDevices", absl::StrCat("no device of volume '", kDataVolume, "'"));
  }
  const json volumes = spec.value("volumes", json::array());
  const int data = Named(volumes, kDataVolume);
  if (data < 0 ||
      !volumes[static_cast<size_t>(data)].value("persistentVolumeClaim", json()).is_object()) {
    return Bad("spec.volumes",
               absl::StrCat("no volume '", kDataVolume, "' from a persistentVolumeClaim"));
  }
  auto grpc = PortNamed(container, "grpc", field);
  if (!grpc.ok()) return grpc.status();
  auto nfs = PortNamed(container, "nfs", field);
  if (!nfs.ok()) return nfs.status();
  if (const auto it = spec.find("terminationGracePeriodSeconds");
      it != spec.end() && (!it->is_number_integer() || it->get<int64_t>() < 0)) {
    return Bad("spec.terminationGracePeriodSeconds", "not a number of seconds");
  }
  PodTemplate parsed(std::move(manifest));
  // Of a render with every per-pod field fixed (name, labels, owner, the
  // --volume and --epoch values, device, claim): an edit of those
  // placeholders changes no pod, so it rolls none out.
  sharemanager::controller::v1::ShareSpec canonical;
  canonical.set_volume("volume");
  parsed.hash_ = Fnv1a64Hex(parsed.RenderPod(canonical, 0, {}).dump());
  parsed.grpc_port_ = *grpc;
  parsed.nfs_port_ = *nfs;
  return parsed;
}

absl::Status CheckShareFlags(const sharemanager::controller::v1::ShareSpec& spec) {
  for (int i = 0; i < spec.daemon_flags_size(); ++i) {
    const std::string& flag = spec.daemon_flags(i);
    const std::string name = flag.substr(0, flag.find('='));
    bool reserved = absl::StartsWith(name, "--tls-");
    for (const char* own : kReservedFlags) reserved = reserved || name == own;
    if (reserved) {
      return absl::InvalidArgumentError(
          absl::StrCat(kKind, " ", spec.volume(), " spec.daemonFlags[", i, "]: ", name,
                       " is the controller's or the pod template's to set, not a share's"));
    }
  }
  return absl::OkStatus();
}

json PodTemplate::RenderPod(const sharemanager::controller::v1::ShareSpec& spec, uint64_t epoch,
                            const Owner& owner) const {
  json pod = manifest_;
  json& metadata = pod["metadata"];
  metadata.erase("namespace");  // the runtime's: the pod is created in its namespace
  metadata["name"] = PodName(spec.volume(), epoch);
  json& labels = metadata["labels"];
  if (!labels.is_object()) labels = json::object();
  labels[kAppLabel] = kAppName;
  labels[kVolumeLabel] = spec.volume();
  labels[kEpochLabel] = std::to_string(epoch);
  labels[kTemplateHashLabel] = hash_;
  metadata["ownerReferences"] = OwnerReferences(owner);

  json& container = Container(pod);
  json& args = container["args"];
  for (auto& arg : args) {
    const std::string text = arg.get<std::string>();
    if (absl::StartsWith(text, kVolumeArg)) arg = absl::StrCat(kVolumeArg, spec.volume());
    if (absl::StartsWith(text, kEpochArg)) arg = absl::StrCat(kEpochArg, epoch);
  }
  for (const auto& flag : spec.daemon_flags()) args.push_back(flag);
  json& devices = container["volumeDevices"];
  devices[static_cast<size_t>(Named(devices, kDataVolume))]["devicePath"] =
      absl::StrCat("/dev/longhorn/", spec.volume());  // the daemon's default --device
  json& volumes = pod["spec"]["volumes"];
  volumes[static_cast<size_t>(Named(volumes, kDataVolume))]["persistentVolumeClaim"]["claimName"] =
      spec.volume();
  return pod;
}

json PodTemplate::RenderService(const std::string& volume, const Owner& owner) const {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata",
           {{"name", volume},
            {"labels", {{kAppLabel, kAppName}, {kVolumeLabel, volume}}},
            {"ownerReferences", OwnerReferences(owner)}}},
          {"spec",
           {{"type", "ClusterIP"},
            {"selector", {{kAppLabel, kAppName}, {kVolumeLabel, volume}}},
            {"ports", json::array({{{"name", "nfs"},
                                    {"port", nfs_port_},
                                    {"targetPort", "nfs"},
                                    {"protocol", "TCP"}}})}}}};
}

}  // namespace controller::kubernetes
