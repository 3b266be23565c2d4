// JUnit XML for CI systems (GitHub Actions, GitLab, Jenkins): `check`,
// `gate` (and later `verify`) write one test case per configuration and
// quantity with `--junit FILE`, so a CI page names the strategy that broke.
// The format is the de-facto one those systems read (Jenkins' junit plugin,
// GitLab's unit-test reports): <testsuites> of <testsuite name tests
// failures skipped time>, each of <testcase classname name time> holding at
// most one <failure message type>text</failure> or <skipped message/>.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace pb {

struct JunitCase {
  std::string classname;  // the configuration: "zero3 dp2 fp32"
  std::string name;       // the quantity: "loss", "memory.params"
  double seconds = 0;
  bool failed = false;
  bool skipped = false;
  std::string message;  // one line: the ratio and the reason
  std::string detail;   // the failure's text (several lines allowed)
};

struct JunitSuite {
  std::string name;  // "parabench check"
  double seconds = 0;
  std::vector<JunitCase> cases;
  int failures() const;
  int skipped() const;
};

// Text fit for an XML attribute or element: &<>"' escaped; bytes XML 1.0
// cannot hold (control characters other than tab, LF, CR; invalid UTF-8) are
// replaced by U+FFFD, so a fuzzed strategy name cannot break the file.
std::string xml_escape(std::string_view text);

std::string junit_xml(const std::vector<JunitSuite>& suites);

// Before the work starts: PATH is a file parabench may write and none of the
// command's `inputs` (harness/io/output_file.h); InputError naming --junit
// and the path if not.
void require_junit_writable(const std::string& path, const std::vector<std::string>& inputs = {});

// The XML written by write_output_file: a reader never sees half a file, and
// a device, a pipe or a link at PATH stays what it is.
void write_junit(const std::string& path, const std::vector<JunitSuite>& suites,
                 const std::vector<std::string>& inputs = {});

}  // namespace pb
