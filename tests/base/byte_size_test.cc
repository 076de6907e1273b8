#include "base/byte_size.h"

#include <doctest/doctest.h>

namespace base {

TEST_CASE("sizes parse as Kubernetes writes memory quantities") {
  CHECK(ParseByteSize("0").value() == 0);
  CHECK(ParseByteSize("1048576").value() == 1048576);
  CHECK(ParseByteSize("64Ki").value() == 64 * 1024);
  CHECK(ParseByteSize("512Mi").value() == 512ull << 20);
  CHECK(ParseByteSize("1.5Gi").value() == 3ull << 29);
  CHECK(ParseByteSize("2Ti").value() == 2ull << 40);
  CHECK(ParseByteSize("300M").value() == 300'000'000);
  CHECK(ParseByteSize("1G").value() == 1'000'000'000);
  CHECK(ParseByteSize("5k").value() == 5000);
  CHECK(ParseByteSize("1T").value() == 1'000'000'000'000);
}

TEST_CASE("a size that is not one is refused, saying what was given") {
  for (const char* bad : {"", "Mi", "-1", "-1Mi", "12MB", "1 Gi", "0x10", "1e400", "nan", "inf",
                          "10K", "12mi", "9Ei", "99999999999T"}) {
    CAPTURE(bad);
    const auto parsed = ParseByteSize(bad);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().message().find(std::string("'") + bad + "'") != std::string::npos);
  }
}

TEST_CASE("byte counts print in binary units with one decimal") {
  CHECK(FormatBytes(0) == "0 B");
  CHECK(FormatBytes(1023) == "1023 B");
  CHECK(FormatBytes(1024) == "1.0 KiB");
  CHECK(FormatBytes(1536) == "1.5 KiB");
  CHECK(FormatBytes(47'400'000) == "45.2 MiB");
  CHECK(FormatBytes(1ull << 30) == "1.0 GiB");
  CHECK(FormatBytes((1ull << 20) - 1) == "1.0 MiB");  // not "1024.0 KiB"
  CHECK(FormatBytes(~0ull) == "16.0 EiB");
}

}  // namespace base
