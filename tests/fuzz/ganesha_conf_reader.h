// A test-only reader for the ganesha.conf share-manager renders: ganesha's
// syntax (blocks, `Key = value, value;`, "quoted" strings, '#' comments) as
// strictly as ganesha's own lexer takes it, and nothing more. The fuzz
// targets read a rendered file back with it and compare the values with what
// went in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharemgr/ganesha_config.h"

namespace fuzz {

// Reads `text` back into the input it was rendered from. InvalidArgument
// when it does not parse (an unterminated string, an unbalanced brace, a
// control byte, a statement out of place) or lacks a value; the export's
// fields only when `with_export`.
absl::StatusOr<sharemgr::GaneshaConfigInput> ReadGaneshaConf(const std::string& text,
                                                             bool with_export);

// Where two inputs differ ("" when they do not).
std::string Diff(const sharemgr::GaneshaConfigInput& want, const sharemgr::GaneshaConfigInput& got,
                 bool with_export);

}  // namespace fuzz
