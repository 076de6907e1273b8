#include "tests/fuzz/ganesha_conf_reader.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fuzz {
namespace {

using sharemgr::GaneshaConfigInput;
using sharemgr::Squash;

struct Value {
  std::string text;
  bool quoted = false;
};

struct Block {
  std::string name;
  std::vector<std::pair<std::string, std::vector<Value>>> params;
  std::vector<Block> blocks;
};

enum class Kind { kWord, kString, kOpen, kClose, kEquals, kSemicolon, kComma, kEnd };

struct Token {
  Kind kind = Kind::kEnd;
  std::string text;
};

absl::Status Bad(size_t pos, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("byte ", pos, ": ", why));
}

bool IsControl(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  return (c < 0x20 && ch != '\n' && ch != '\t') || c == 0x7f;
}

class Lexer {
 public:
  explicit Lexer(const std::string& text) : text_(text) {}

  absl::StatusOr<Token> Next() {
    for (;;) {
      if (pos_ == text_.size()) return Token{};
      const char c = text_[pos_];
      if (IsControl(c)) return Bad(pos_, "a control byte");
      if (c == ' ' || c == '\t' || c == '\n') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') {
          if (IsControl(text_[pos_])) return Bad(pos_, "a control byte in a comment");
          ++pos_;
        }
      } else {
        break;
      }
    }
    const size_t start = pos_;
    const char c = text_[pos_++];
    switch (c) {
      case '{':
        return Token{Kind::kOpen, "{"};
      case '}':
        return Token{Kind::kClose, "}"};
      case '=':
        return Token{Kind::kEquals, "="};
      case ';':
        return Token{Kind::kSemicolon, ";"};
      case ',':
        return Token{Kind::kComma, ","};
      case '\'':
        return Bad(start, "a single quote (share-manager writes none)");
      case '"': {
        std::string s;
        for (;;) {
          if (pos_ == text_.size()) return Bad(start, "an unterminated string");
          const char d = text_[pos_++];
          if (d == '"') return Token{Kind::kString, s};
          // ganesha would take a backslash as an escape: share-manager writes none.
          if (d == '\n' || d == '\\' || IsControl(d)) {
            return Bad(pos_ - 1, "a line break, backslash or control byte in a string");
          }
          s += d;
        }
      }
      default:
        break;
    }
    std::string word(1, c);
    while (pos_ < text_.size()) {
      const char d = text_[pos_];
      if (d == ' ' || d == '\t' || d == '\n' || d == '#' || d == '"' || d == '\'' || d == '{' ||
          d == '}' || d == '=' || d == ';' || d == ',') {
        break;
      }
      if (IsControl(d)) return Bad(pos_, "a control byte");
      word += d;
      ++pos_;
    }
    return Token{Kind::kWord, word};
  }

  size_t pos() const { return pos_; }

 private:
  const std::string& text_;
  size_t pos_ = 0;
};

// A block's body up to its '}' (or, at the top, the end: only blocks there).
absl::Status ParseBody(Lexer& lex, Block& block, bool top) {
  for (;;) {
    auto name = lex.Next();
    if (!name.ok()) return name.status();
    if (name->kind == Kind::kEnd) {
      return top ? absl::OkStatus() : Bad(lex.pos(), absl::StrCat(block.name, " is not closed"));
    }
    if (name->kind == Kind::kClose) {
      return top ? Bad(lex.pos(), "a '}' closes nothing") : absl::OkStatus();
    }
    if (name->kind != Kind::kWord) return Bad(lex.pos(), absl::StrCat("'", name->text, "'"));
    auto after = lex.Next();
    if (!after.ok()) return after.status();
    if (after->kind == Kind::kOpen) {
      Block child{.name = name->text};
      if (auto s = ParseBody(lex, child, false); !s.ok()) return s;
      block.blocks.push_back(std::move(child));
      continue;
    }
    if (top || after->kind != Kind::kEquals) {
      return Bad(lex.pos(), absl::StrCat("'", name->text, "' is neither a block nor a parameter"));
    }
    for (const auto& [key, values] : block.params) {
      if (key == name->text) return Bad(lex.pos(), absl::StrCat(key, " given twice"));
    }
    std::vector<Value> values;
    for (;;) {
      auto v = lex.Next();
      if (!v.ok()) return v.status();
      if (v->kind != Kind::kWord && v->kind != Kind::kString) {
        return Bad(lex.pos(), absl::StrCat(name->text, ": a value expected"));
      }
      values.push_back({v->text, v->kind == Kind::kString});
      auto sep = lex.Next();
      if (!sep.ok()) return sep.status();
      if (sep->kind == Kind::kSemicolon) break;
      if (sep->kind != Kind::kComma) {
        return Bad(lex.pos(), absl::StrCat(name->text, ": ',' or ';' expected"));
      }
    }
    block.params.emplace_back(name->text, std::move(values));
  }
}

absl::StatusOr<const Block*> Child(const Block& block, absl::string_view name) {
  const Block* found = nullptr;
  for (const Block& b : block.blocks) {
    if (b.name != name) continue;
    if (found != nullptr) return absl::InvalidArgumentError(absl::StrCat(name, " twice"));
    found = &b;
  }
  if (found == nullptr) return absl::InvalidArgumentError(absl::StrCat("no ", name, " block"));
  return found;
}

absl::StatusOr<std::vector<Value>> Values(const Block& block, absl::string_view key) {
  for (const auto& [k, values] : block.params) {
    if (k == key) return values;
  }
  return absl::InvalidArgumentError(absl::StrCat(block.name, " has no ", key));
}

absl::StatusOr<std::string> One(const Block& block, absl::string_view key, bool quoted) {
  auto values = Values(block, key);
  if (!values.ok()) return values.status();
  if (values->size() != 1 || (*values)[0].quoted != quoted) {
    return absl::InvalidArgumentError(
        absl::StrCat(block.name, ".", key, ": not one ", quoted ? "quoted string" : "word"));
  }
  return (*values)[0].text;
}

absl::StatusOr<int64_t> Number(const Block& block, absl::string_view key) {
  auto text = One(block, key, false);
  if (!text.ok()) return text.status();
  int64_t n = 0;
  if (!absl::SimpleAtoi(*text, &n) || absl::StrCat(n) != *text) {
    return absl::InvalidArgumentError(absl::StrCat(block.name, ".", key, ": not a number"));
  }
  return n;
}

// A limit's line: absent is 0 (ganesha's own default: the renderer writes
// only the limits that are set).
absl::StatusOr<int64_t> Limit(const Block& block, absl::string_view key) {
  for (const auto& [k, values] : block.params) {
    if (k == key) return Number(block, key);
  }
  return 0;
}

#define ASSIGN_OR_RETURN(lhs, expr)           \
  do {                                        \
    auto value_ = (expr);                     \
    if (!value_.ok()) return value_.status(); \
    lhs = *std::move(value_);                 \
  } while (false)

}  // namespace

absl::StatusOr<GaneshaConfigInput> ReadGaneshaConf(const std::string& text, bool with_export) {
  Lexer lex(text);
  Block top;
  if (auto s = ParseBody(lex, top, true); !s.ok()) return s;
  std::vector<std::string> names;
  for (const Block& b : top.blocks) names.push_back(b.name);
  // MDCACHE only when a cache limit is set.
  const bool cache = names.size() > 2 && names[2] == "MDCACHE";
  const std::string want = absl::StrCat("NFS_CORE_PARAM NFSv4 ", cache ? "MDCACHE " : "",
                                        "NFS_KRB5 LOG", with_export ? " EXPORT" : "");
  if (absl::StrJoin(names, " ") != want) {
    return absl::InvalidArgumentError(absl::StrCat("blocks ", absl::StrJoin(names, " ")));
  }
  GaneshaConfigInput in;
  const Block* core = nullptr;
  const Block* v4 = nullptr;
  ASSIGN_OR_RETURN(core, Child(top, "NFS_CORE_PARAM"));
  ASSIGN_OR_RETURN(v4, Child(top, "NFSv4"));
  ASSIGN_OR_RETURN(in.nfs_port, Number(*core, "NFS_Port"));
  ASSIGN_OR_RETURN(in.bind_address, One(*core, "Bind_addr", false));
  ASSIGN_OR_RETURN(in.plugins_dir, One(*core, "Plugins_Dir", true));
  ASSIGN_OR_RETURN(in.grace_seconds, Number(*v4, "Grace_Period"));
  ASSIGN_OR_RETURN(in.lease_seconds, Number(*v4, "Lease_Lifetime"));
  ASSIGN_OR_RETURN(in.recovery_root, One(*v4, "RecoveryRoot", true));
  ASSIGN_OR_RETURN(in.limits.max_connections, Limit(*core, "RPC_Max_Connections"));
  ASSIGN_OR_RETURN(in.limits.max_clients, Limit(*v4, "Max_Client_Ids"));
  if (cache) {
    const Block& mdcache = top.blocks[2];
    if (mdcache.params.empty()) return absl::InvalidArgumentError("an empty MDCACHE block");
    ASSIGN_OR_RETURN(in.limits.cache_entries, Limit(mdcache, "Entries_HWMark"));
    ASSIGN_OR_RETURN(in.limits.dir_chunks, Limit(mdcache, "Chunks_HWMark"));
    ASSIGN_OR_RETURN(in.limits.dir_chunk_entries, Limit(mdcache, "Dir_Chunk"));
  }
  if (!with_export) return in;

  const Block* exp = nullptr;
  ASSIGN_OR_RETURN(exp, Child(top, "EXPORT"));
  ASSIGN_OR_RETURN(in.export_dir, One(*exp, "Path", true));
  std::string pseudo;
  ASSIGN_OR_RETURN(pseudo, One(*exp, "Pseudo", true));
  if (pseudo.empty() || pseudo.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat("Pseudo '", pseudo, "' is not absolute"));
  }
  in.volume = pseudo.substr(1);
  std::string squash;
  ASSIGN_OR_RETURN(squash, One(*exp, "Squash", false));
  if (squash == "Root_Squash") {
    in.squash = Squash::kRoot;
  } else if (squash == "All_Squash") {
    in.squash = Squash::kAll;
  } else if (squash == "No_Root_Squash") {
    in.squash = Squash::kNone;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("Squash = ", squash));
  }
  ASSIGN_OR_RETURN(in.anon_uid, Number(*exp, "Anonymous_Uid"));
  ASSIGN_OR_RETURN(in.anon_gid, Number(*exp, "Anonymous_Gid"));
  std::string access;
  ASSIGN_OR_RETURN(access, One(*exp, "Access_Type", false));
  std::vector<const Block*> clients;
  for (const Block& b : exp->blocks) {
    if (b.name == "CLIENT") {
      clients.push_back(&b);
    } else if (b.name != "FSAL") {
      return absl::InvalidArgumentError(absl::StrCat("EXPORT holds ", b.name));
    }
  }
  // No list: the export grants RW to all. A list: only the CLIENT blocks
  // grant, the listed clients RW, then the probe's address metadata only, squashed.
  if (clients.empty()) {
    if (access != "RW") return absl::InvalidArgumentError("open export not RW");
    return in;
  }
  if (access != "None" || clients.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("client-scoped export: Access_Type ", access,
                                                   ", ", clients.size(), " CLIENT"));
  }
  std::vector<Value> listed;
  ASSIGN_OR_RETURN(listed, Values(*clients[0], "Clients"));
  for (const Value& v : listed) {
    if (v.quoted) return absl::InvalidArgumentError("a quoted client");
    in.clients.push_back(v.text);
  }
  std::string rw, ro;
  ASSIGN_OR_RETURN(rw, One(*clients[0], "Access_Type", false));
  ASSIGN_OR_RETURN(in.probe_client, One(*clients[1], "Clients", false));
  ASSIGN_OR_RETURN(ro, One(*clients[1], "Access_Type", false));
  if (rw != "RW" || ro != "MDONLY_RO") {
    return absl::InvalidArgumentError(absl::StrCat("CLIENT access ", rw, " and ", ro));
  }
  std::string probe_squash;
  ASSIGN_OR_RETURN(probe_squash, One(*clients[1], "Squash", false));
  if (probe_squash != "All_Squash") {
    return absl::InvalidArgumentError(absl::StrCat("the probe's CLIENT squash ", probe_squash));
  }
  return in;
}

std::string Diff(const GaneshaConfigInput& want, const GaneshaConfigInput& got, bool with_export) {
  std::string diff;
  auto field = [&](absl::string_view name, const auto& w, const auto& g) {
    if (w != g) absl::StrAppend(&diff, name, ": '", w, "' read back as '", g, "'; ");
  };
  field("nfs_port", want.nfs_port, got.nfs_port);
  field("bind_address", want.bind_address, got.bind_address);
  field("plugins_dir", want.plugins_dir, got.plugins_dir);
  field("grace_seconds", want.grace_seconds, got.grace_seconds);
  field("lease_seconds", want.lease_seconds, got.lease_seconds);
  field("recovery_root", want.recovery_root, got.recovery_root);
  field("cache_entries", want.limits.cache_entries, got.limits.cache_entries);
  field("dir_chunks", want.limits.dir_chunks, got.limits.dir_chunks);
  field("dir_chunk_entries", want.limits.dir_chunk_entries, got.limits.dir_chunk_entries);
  field("max_clients", want.limits.max_clients, got.limits.max_clients);
  field("max_connections", want.limits.max_connections, got.limits.max_connections);
  if (!with_export) return diff;
  field("volume", want.volume, got.volume);
  field("export_dir", want.export_dir, got.export_dir);
  field("squash", static_cast<int>(want.squash), static_cast<int>(got.squash));
  field("anon_uid", want.anon_uid, got.anon_uid);
  field("anon_gid", want.anon_gid, got.anon_gid);
  field("clients", absl::StrJoin(want.clients, "|"), absl::StrJoin(got.clients, "|"));
  // The probe's address is written only with a client list.
  if (!want.clients.empty()) field("probe_client", want.probe_client, got.probe_client);
  return diff;
}

}  // namespace fuzz
