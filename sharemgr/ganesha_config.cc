#include "sharemgr/ganesha_config.h"

#include <fmt/format.h>

#include "base/validate.h"

namespace sharemgr {

absl::StatusOr<GaneshaConfig> GaneshaConfig::Create(GaneshaConfigInput input) {
  for (const absl::Status& status : {
           base::ValidateVolumeName(input.volume),
           base::ValidateConfigPath("--export-dir", input.export_dir),
           base::ValidateIpAddress("--nfs-address", input.bind_address),
           base::ValidatePort("--nfs-port", input.nfs_port),
           base::ValidateGraceAndLease(input.grace_seconds, input.lease_seconds),
           base::ValidateConfigPath("--state-dir", input.recovery_root),
           base::ValidateConfigPath("--ganesha-plugins-dir", input.plugins_dir),
       }) {
    if (!status.ok()) return status;
  }
  return GaneshaConfig(std::move(input));
}

std::string GaneshaConfig::Render(bool with_export) const {
  std::string out = fmt::format(
      R"(# Written by share-manager for volume {volume}; changes are overwritten.
NFS_CORE_PARAM {{
  NFS_Port = {port};
  Bind_addr = {bind};
  Protocols = 4;
  Enable_NLM = false;
  Enable_RQUOTA = false;
  Enable_UDP = false;
  Plugins_Dir = "{plugins}";
}}
NFSv4 {{
  Grace_Period = {grace};
  Lease_Lifetime = {lease};
  RecoveryBackend = fs;
  RecoveryRoot = "{recovery}";
  Minor_Versions = 0, 1, 2;
  Only_Numeric_Owners = true;
}}
NFS_KRB5 {{
  Active_krb5 = false;
}}
LOG {{
  Default_Log_Level = EVENT;
  Components {{
    TIRPC = CRIT;
  }}
}}
)",
      fmt::arg("volume", input_.volume), fmt::arg("port", input_.nfs_port),
      fmt::arg("bind", input_.bind_address), fmt::arg("plugins", input_.plugins_dir),
      fmt::arg("grace", input_.grace_seconds), fmt::arg("lease", input_.lease_seconds),
      fmt::arg("recovery", input_.recovery_root));
  if (with_export) {
    out += fmt::format(R"(EXPORT {{
  Export_Id = 1;
  Path = "{path}";
  Pseudo = "{pseudo}";
  Access_Type = RW;
  Squash = No_Root_Squash;
  SecType = sys;
  Protocols = 4;
  Transports = TCP;
  FSAL {{
    Name = VFS;
  }}
}}
)",
                       fmt::arg("path", input_.export_dir), fmt::arg("pseudo", pseudo_path()));
  }
  return out;
}

}  // namespace sharemgr
