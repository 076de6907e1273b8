#include "sharemgr/ganesha_config.h"

#include <doctest/doctest.h>

namespace sharemgr {
namespace {

GaneshaConfigInput GoodInput() {
  return {.volume = "pvc-1",
          .export_dir = "/export/pvc-1",
          .bind_address = "127.0.0.1",
          .nfs_port = 20490,
          .grace_seconds = 90,
          .lease_seconds = 60,
          .recovery_root = "/var/lib/share-manager/pvc-1/recovery",
          .plugins_dir = "/usr/lib/x86_64-linux-gnu/ganesha"};
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("the rendered config is NFSv4 only, bound as asked, with recovery under the state dir") {
  const auto config = GaneshaConfig::Create(GoodInput());
  REQUIRE(config.ok());
  const std::string text = config->Render(true);
  CHECK(Contains(text, "NFS_Port = 20490;"));
  CHECK(Contains(text, "Bind_addr = 127.0.0.1;"));
  CHECK(Contains(text, "Protocols = 4;"));
  CHECK(Contains(text, "Enable_NLM = false;"));
  CHECK(Contains(text, "Enable_RQUOTA = false;"));
  CHECK(Contains(text, "Enable_UDP = false;"));
  CHECK(Contains(text, "Grace_Period = 90;"));
  CHECK(Contains(text, "Lease_Lifetime = 60;"));
  CHECK(Contains(text, "RecoveryBackend = fs;"));
  CHECK(Contains(text, "RecoveryRoot = \"/var/lib/share-manager/pvc-1/recovery\";"));
  CHECK(Contains(text, "Path = \"/export/pvc-1\";"));
  CHECK(Contains(text, "Pseudo = \"/pvc-1\";"));
  CHECK(Contains(text, "Transports = TCP;"));
  CHECK(config->pseudo_path() == "/pvc-1");
}

TEST_CASE("without the export the config has no EXPORT block but everything else") {
  const auto config = GaneshaConfig::Create(GoodInput());
  REQUIRE(config.ok());
  const std::string text = config->Render(false);
  CHECK_FALSE(Contains(text, "EXPORT"));
  CHECK(Contains(text, "NFS_Port = 20490;"));
  CHECK(Contains(text, "RecoveryRoot"));
}

TEST_CASE("Create refuses every unsafe input, so nothing unchecked reaches the file") {
  struct Case {
    const char* name;
    void (*mutate)(GaneshaConfigInput&);
    const char* flag;
  };
  const Case cases[] = {
      {"volume with a brace", [](GaneshaConfigInput& i) { i.volume = "pvc}"; }, "--volume"},
      {"volume too long", [](GaneshaConfigInput& i) { i.volume = std::string(64, 'a'); },
       "--volume"},
      {"export escapes the quotes",
       [](GaneshaConfigInput& i) { i.export_dir = "/x\"; Access_Type = RW; #"; }, "--export-dir"},
      {"export relative", [](GaneshaConfigInput& i) { i.export_dir = "export"; }, "--export-dir"},
      {"export with ..", [](GaneshaConfigInput& i) { i.export_dir = "/export/../etc"; },
       "--export-dir"},
      {"bind is a name", [](GaneshaConfigInput& i) { i.bind_address = "nfs.local"; },
       "--nfs-address"},
      {"bind injects", [](GaneshaConfigInput& i) { i.bind_address = "1.2.3.4; }"; },
       "--nfs-address"},
      {"port 0", [](GaneshaConfigInput& i) { i.nfs_port = 0; }, "--nfs-port"},
      {"grace < lease", [](GaneshaConfigInput& i) { i.grace_seconds = 10; }, "--grace-period"},
      {"lease 0", [](GaneshaConfigInput& i) { i.lease_seconds = 0; }, "--lease-lifetime"},
      {"recovery with newline", [](GaneshaConfigInput& i) { i.recovery_root = "/s\n}"; },
       "--state-dir"},
      {"plugins relative", [](GaneshaConfigInput& i) { i.plugins_dir = "lib"; },
       "--ganesha-plugins-dir"},
      {"client list smuggled in one value",
       [](GaneshaConfigInput& i) { i.clients = {"10.0.0.1, *"}; }, "--nfs-clients"},
      {"client closes the block",
       [](GaneshaConfigInput& i) { i.clients = {"10.0.0.1; Access_Type = RW; }"}; },
       "--nfs-clients"},
      {"anon uid negative", [](GaneshaConfigInput& i) { i.anon_uid = -1; }, "--anon-uid"},
      {"anon gid beyond 32 bits", [](GaneshaConfigInput& i) { i.anon_gid = 1LL << 32; },
       "--anon-gid"},
      {"cache entries negative", [](GaneshaConfigInput& i) { i.limits.cache_entries = -1; },
       "--ganesha-cache-entries"},
      {"cache entries beyond 32 bits",
       [](GaneshaConfigInput& i) { i.limits.cache_entries = 1LL << 32; },
       "--ganesha-cache-entries"},
      {"dir chunks negative", [](GaneshaConfigInput& i) { i.limits.dir_chunks = -5; },
       "--ganesha-dir-chunks"},
      {"dir chunk entries beyond 32 bits",
       [](GaneshaConfigInput& i) { i.limits.dir_chunk_entries = 1LL << 32; },
       "--ganesha-dir-chunk-entries"},
      {"clients beyond 32 bits", [](GaneshaConfigInput& i) { i.limits.max_clients = 1LL << 33; },
       "--ganesha-max-clients"},
      {"connections beyond ganesha's range",
       [](GaneshaConfigInput& i) { i.limits.max_connections = 10'001; },
       "--ganesha-max-connections"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto input = GoodInput();
    c.mutate(input);
    const auto config = GaneshaConfig::Create(input);
    REQUIRE_FALSE(config.ok());
    CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(config.status().message()).find(c.flag) != std::string::npos);
  }
}

TEST_CASE("the export is open to every client, root not squashed, unless told otherwise") {
  const std::string text = GaneshaConfig::Create(GoodInput())->Render(true);
  CHECK(Contains(text, "Access_Type = RW;"));
  CHECK(Contains(text, "Squash = No_Root_Squash;"));
  CHECK_FALSE(Contains(text, "CLIENT"));
}

TEST_CASE("a client list grants access only through CLIENT blocks, the probe metadata only") {
  auto input = GoodInput();
  input.clients = {"10.42.0.0/16", "node-1"};
  input.probe_client = "127.0.0.1";
  input.squash = Squash::kRoot;
  input.anon_uid = 1000;
  input.anon_gid = 1001;
  const auto config = GaneshaConfig::Create(input);
  REQUIRE(config.ok());
  const std::string text = config->Render(true);
  CHECK(Contains(text, "  Access_Type = None;\n"));
  CHECK(Contains(text, "    Clients = 10.42.0.0/16, node-1;\n    Access_Type = RW;"));
  CHECK(Contains(
      text, "    Clients = 127.0.0.1;\n    Access_Type = MDONLY_RO;\n    Squash = All_Squash;"));
  CHECK(Contains(text, "Squash = Root_Squash;"));
  CHECK(Contains(text, "Anonymous_Uid = 1000;"));
  CHECK(Contains(text, "Anonymous_Gid = 1001;"));
  // The blocks sit inside the EXPORT block: ganesha ignores a CLIENT anywhere else.
  CHECK(text.find("CLIENT") > text.find("EXPORT {"));
  CHECK(text.rfind("}\n") > text.rfind("Access_Type = MDONLY_RO;"));
  input.squash = Squash::kAll;
  CHECK(Contains(GaneshaConfig::Create(input)->Render(true), "Squash = All_Squash;"));
}

TEST_CASE("memory limits land in the blocks ganesha reads them from, each only when set") {
  auto input = GoodInput();
  input.limits = {.cache_entries = 10000,
                  .dir_chunks = 1000,
                  .dir_chunk_entries = 32,
                  .max_clients = 1024,
                  .max_connections = 512};
  const std::string text = GaneshaConfig::Create(input)->Render(false);
  CHECK(Contains(
      text,
      "MDCACHE {\n  Entries_HWMark = 10000;\n  Chunks_HWMark = 1000;\n  Dir_Chunk = 32;\n}\n"));
  // Inside NFS_CORE_PARAM and NFSv4: a block written twice is not merged by ganesha.
  const auto core = text.find("NFS_CORE_PARAM {");
  const auto v4 = text.find("NFSv4 {");
  const auto connections = text.find("  RPC_Max_Connections = 512;\n");
  const auto clients = text.find("  Max_Client_Ids = 1024;\n");
  REQUIRE(connections != std::string::npos);
  REQUIRE(clients != std::string::npos);
  CHECK(core < connections);
  CHECK(connections < text.find('}', core));
  CHECK(v4 < clients);
  CHECK(clients < text.find('}', v4));
  CHECK(text.find("NFS_CORE_PARAM {") == text.rfind("NFS_CORE_PARAM {"));
  CHECK(text.find("NFSv4 {") == text.rfind("NFSv4 {"));

  // 0 is ganesha's own default: no line, and no MDCACHE block at all.
  input.limits = {.dir_chunks = 7};
  const std::string partial = GaneshaConfig::Create(input)->Render(true);
  CHECK(Contains(partial, "MDCACHE {\n  Chunks_HWMark = 7;\n}\n"));
  CHECK_FALSE(Contains(partial, "Entries_HWMark"));
  input.limits = {};
  const std::string stock = GaneshaConfig::Create(input)->Render(true);
  for (const char* name : {"MDCACHE", "Entries_HWMark", "Chunks_HWMark", "Dir_Chunk",
                           "Max_Client_Ids", "RPC_Max_Connections"}) {
    CAPTURE(name);
    CHECK_FALSE(Contains(stock, name));
  }
}

}  // namespace sharemgr
