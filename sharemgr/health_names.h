// grpc.health.v1 service names share-manager publishes. Manifests and probes
// use exactly these strings.
#pragma once

namespace sharemgr {

// Readiness: ganesha answers NFS and the export is in place ("" is the same).
inline constexpr char kReadinessService[] = "readiness";
// Liveness: not FAILED and the supervisor loop is still ticking.
inline constexpr char kLivenessService[] = "liveness";

}  // namespace sharemgr
