// Process exit codes. The daemon's tell an operator (and the pod phase) why it
// ended; the client commands keep grpc_health_probe's meanings so `probe`
// drops into existing exec probes.
#pragma once

namespace sharemgr {

// share-manager daemon
inline constexpr int kExitStopped = 0;        // stopped by SIGTERM/SIGINT
inline constexpr int kExitInternal = 1;       // unexpected internal error
inline constexpr int kExitBadInput = 2;       // invalid flags; nothing was started
inline constexpr int kExitGaneshaFailed = 3;  // ganesha's death budget spent (state FAILED)
inline constexpr int kExitStartup = 4;        // cannot listen, or state/export dir unusable
inline constexpr int kExitVolume = 5;         // the block device cannot be used or repaired
// The serving lease (--lease-etcd) was lost, or could not be taken (an epoch
// superseded, an older holder that would not go): ganesha was killed.
inline constexpr int kExitLeaseLost = 6;

// client commands: status, watch, mount, unmount, probe
inline constexpr int kClientOk = 0;           // success (probe: SERVING)
inline constexpr int kClientBadArgs = 1;      // invalid arguments
inline constexpr int kClientUnreachable = 2;  // no connection within --timeout
inline constexpr int kClientRpcFailed = 3;    // connected, but the call failed or timed out
inline constexpr int kClientNotServing = 4;   // probe: the service is not SERVING

}  // namespace sharemgr
