#include "harness/io/junit.h"

#include "harness/io/output_file.h"

#include <cstdio>

#include "harness/status.h"

namespace pb {

int JunitSuite::failures() const {
  int n = 0;
  for (const auto& c : cases) n += c.failed;
  return n;
}

int JunitSuite::skipped() const {
  int n = 0;
  for (const auto& c : cases) n += c.skipped && !c.failed;
  return n;
}

namespace {

// Length of the valid UTF-8 sequence at s[i] (1-4), 0 if invalid; rejects
// overlong forms, surrogates and code points past U+10FFFF.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned cp = 0;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  if (cp == 0xFFFE || cp == 0xFFFF) return 0;  // not XML characters
  return n;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s >= 0 && s < 1e12 ? s : 0.0);
  return buf;
}

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '&': out += "&amp;"; ++i; continue;
      case '<': out += "&lt;"; ++i; continue;
      case '>': out += "&gt;"; ++i; continue;
      case '"': out += "&quot;"; ++i; continue;
      case '\'': out += "&apos;"; ++i; continue;
      default: break;
    }
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    const size_t n = utf8_length(text, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

std::string junit_xml(const std::vector<JunitSuite>& suites) {
  int tests = 0, failures = 0, skipped = 0;
  double seconds = 0;
  for (const auto& s : suites) {
    tests += int(s.cases.size());
    failures += s.failures();
    skipped += s.skipped();
    seconds += s.seconds;
  }
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += "<testsuites tests=\"" + std::to_string(tests) + "\" failures=\"" + std::to_string(failures) +
       "\" skipped=\"" + std::to_string(skipped) + "\" time=\"" + seconds_text(seconds) + "\">\n";
  for (const auto& s : suites) {
    x += "  <testsuite name=\"" + xml_escape(s.name) + "\" tests=\"" + std::to_string(s.cases.size()) +
         "\" failures=\"" + std::to_string(s.failures()) + "\" errors=\"0\" skipped=\"" +
         std::to_string(s.skipped()) + "\" time=\"" + seconds_text(s.seconds) + "\">\n";
    for (const auto& c : s.cases) {
      x += "    <testcase classname=\"" + xml_escape(c.classname) + "\" name=\"" + xml_escape(c.name) +
           "\" time=\"" + seconds_text(c.seconds) + "\"";
      if (c.failed) {
        x += ">\n      <failure message=\"" + xml_escape(c.message) + "\" type=\"" + xml_escape(s.name) + "\">" +
             xml_escape(c.detail.empty() ? c.message : c.detail) + "</failure>\n    </testcase>\n";
      } else if (c.skipped) {
        x += ">\n      <skipped message=\"" + xml_escape(c.message) + "\"/>\n    </testcase>\n";
      } else {
        x += "/>\n";
      }
    }
    x += "  </testsuite>\n";
  }
  return x + "</testsuites>\n";
}

void require_junit_writable(const std::string& path, const std::vector<std::string>& inputs) {
  check_output_path(path, "--junit", inputs);
}

void write_junit(const std::string& path, const std::vector<JunitSuite>& suites,
                 const std::vector<std::string>& inputs) {
  write_output_file(path, junit_xml(suites), "--junit", inputs);
}

}  // namespace pb
