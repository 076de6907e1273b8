#include "sharemgr/ganesha_config.h"

#include <fmt/format.h>

#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
  for (const auto& client : input.clients) {
    if (auto status = base::ValidateNfsClient("--nfs-clients", client); !status.ok()) {
      return status;
    }
  }
  if (!input.clients.empty()) {
    if (auto status = base::ValidateIpAddress("probe address", input.probe_client); !status.ok()) {
      return status;
    }
  }
  for (const auto& [flag, id] :
       {std::pair{"--anon-uid", input.anon_uid}, std::pair{"--anon-gid", input.anon_gid}}) {
    if (id < 0 || id > 4'294'967'294) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", id, " is not an id (0-4294967294)"));
    }
  }
  const GaneshaLimits& l = input.limits;
  for (const auto& [flag, value, max] : {
           std::tuple{"--ganesha-cache-entries", l.cache_entries, int64_t{4'294'967'295}},
           std::tuple{"--ganesha-dir-chunks", l.dir_chunks, int64_t{4'294'967'295}},
           std::tuple{"--ganesha-dir-chunk-entries", l.dir_chunk_entries, int64_t{4'294'967'295}},
           std::tuple{"--ganesha-max-clients", l.max_clients, int64_t{4'294'967'295}},
           std::tuple{"--ganesha-max-connections", l.max_connections, int64_t{10'000}},
       }) {
    if (value < 0 || value > max) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " ", value, " is out of range (0 for ganesha's default, up to ", max, ")"));
    }
  }
  return GaneshaConfig(std::move(input));
}

namespace {

const char* SquashName(Squash squash) {
  switch (squash) {
    case Squash::kRoot:
      return "Root_Squash";
    case Squash::kAll:
      return "All_Squash";
    case Squash::kNone:
      break;
  }
  return "No_Root_Squash";
}

// `  Name = value;` for each limit that is set (0: ganesha's default, no line).
std::string LimitLines(std::initializer_list<std::pair<const char*, int64_t>> settings) {
  std::string lines;
  for (const auto& [name, value] : settings) {
    if (value > 0) absl::StrAppend(&lines, "  ", name, " = ", value, ";\n");
  }
  return lines;
}

}  // namespace

std::string GaneshaConfig::Render(bool with_export) const {
  const GaneshaLimits& limits = input_.limits;
  const std::string cache = LimitLines({{"Entries_HWMark", limits.cache_entries},
                                        {"Chunks_HWMark", limits.dir_chunks},
                                        {"Dir_Chunk", limits.dir_chunk_entries}});
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
{core_limits}}}
NFSv4 {{
  Grace_Period = {grace};
  Lease_Lifetime = {lease};
  RecoveryBackend = fs;
  RecoveryRoot = "{recovery}";
  Minor_Versions = 0, 1, 2;
  Only_Numeric_Owners = true;
{v4_limits}}}
{cache}NFS_KRB5 {{
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
      fmt::arg("recovery", input_.recovery_root),
      fmt::arg("core_limits", LimitLines({{"RPC_Max_Connections", limits.max_connections}})),
      fmt::arg("v4_limits", LimitLines({{"Max_Client_Ids", limits.max_clients}})),
      fmt::arg("cache", cache.empty() ? "" : absl::StrCat("MDCACHE {\n", cache, "}\n")));
  if (!with_export) return out;
  // With a client list, the export itself grants nothing: only the CLIENT
  // blocks do (the first that matches a caller wins).
  std::string clients;
  if (!input_.clients.empty()) {
    clients = fmt::format(R"(  CLIENT {{
    Clients = {list};
    Access_Type = RW;
  }}
  CLIENT {{
    Clients = {probe};
    Access_Type = MDONLY_RO;
    Squash = All_Squash;
  }}
)",
                          fmt::arg("list", absl::StrJoin(input_.clients, ", ")),
                          fmt::arg("probe", input_.probe_client));
  }
  out += fmt::format(R"(EXPORT {{
  Export_Id = 1;
  Path = "{path}";
  Pseudo = "{pseudo}";
  Access_Type = {access};
  Squash = {squash};
  Anonymous_Uid = {anon_uid};
  Anonymous_Gid = {anon_gid};
  SecType = sys;
  Protocols = 4;
  Transports = TCP;
  FSAL {{
    Name = VFS;
  }}
{clients}}}
)",
                     fmt::arg("path", input_.export_dir), fmt::arg("pseudo", pseudo_path()),
                     fmt::arg("access", input_.clients.empty() ? "RW" : "None"),
                     fmt::arg("squash", SquashName(input_.squash)),
                     fmt::arg("anon_uid", input_.anon_uid), fmt::arg("anon_gid", input_.anon_gid),
                     fmt::arg("clients", clients));
  return out;
}

}  // namespace sharemgr
