#include "harness/io/junit.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/status.h"

namespace pb {
namespace {

TEST(Junit, EscapesMarkupAndReplacesWhatXmlCannotHold) {
  EXPECT_EQ(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
  EXPECT_EQ(xml_escape("tab\tnl\ncr\r"), "tab\tnl\ncr\r");
  EXPECT_EQ(xml_escape(std::string("x\0y", 3)), "x\xEF\xBF\xBDy");  // NUL
  EXPECT_EQ(xml_escape("\x1b[31m"), "\xEF\xBF\xBD[31m");             // ESC
  EXPECT_EQ(xml_escape("caf\xC3\xA9 \xE2\x82\xAC"), "caf\xC3\xA9 \xE2\x82\xAC");  // valid UTF-8 kept
  EXPECT_EQ(xml_escape("\xFF"), "\xEF\xBF\xBD");                                   // not UTF-8
  EXPECT_EQ(xml_escape("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                   // overlong
  EXPECT_EQ(xml_escape("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");   // a surrogate
  EXPECT_EQ(xml_escape("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");                   // cut short
}

TEST(Junit, CountsAndShapes) {
  JunitSuite s{"parabench check", 1.5, {}};
  s.cases.push_back({"zero3 dp2 fp32", "loss", 0.5, false, false, "", ""});
  s.cases.push_back({"zero3 dp2 fp32", "grads", 0.5, true, false, "ratio 12 > 8 at step 2", "detail <here>"});
  s.cases.push_back({"tp2 fp32", "(point)", 0, false, true, "new point", ""});
  EXPECT_EQ(s.failures(), 1);
  EXPECT_EQ(s.skipped(), 1);
  const std::string x = junit_xml({s});
  EXPECT_EQ(x.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites tests=\"3\" failures=\"1\" skipped=\"1\"", 0),
            0u)
      << x;
  EXPECT_NE(x.find("<testsuite name=\"parabench check\" tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\" "
                   "time=\"1.500\">"),
            std::string::npos)
      << x;
  EXPECT_NE(x.find("<testcase classname=\"zero3 dp2 fp32\" name=\"loss\" time=\"0.500\"/>"), std::string::npos) << x;
  EXPECT_NE(x.find("<failure message=\"ratio 12 &gt; 8 at step 2\" type=\"parabench check\">detail &lt;here&gt;"
                   "</failure>"),
            std::string::npos)
      << x;
  EXPECT_NE(x.find("<skipped message=\"new point\"/>"), std::string::npos) << x;
  EXPECT_EQ(x.substr(x.size() - 14), "</testsuites>\n");
}

TEST(Junit, WritesWholeFilesAndNamesUnwritablePaths) {
  const auto dir = std::filesystem::temp_directory_path() / "pb_junit_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "r.xml").string();
  require_junit_writable(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  write_junit(path, {JunitSuite{"s", 0, {{"c", "n", 0, false, false, "", ""}}}});
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), junit_xml({JunitSuite{"s", 0, {{"c", "n", 0, false, false, "", ""}}}}));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  try {
    require_junit_writable((dir / "no" / "such" / "r.xml").string());
    FAIL() << "a missing directory was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("its directory " + (dir / "no" / "such").string() + " does not exist"), std::string::npos) << e.what();
  }
  EXPECT_THROW(require_junit_writable(dir.string()), InputError);
  EXPECT_THROW(require_junit_writable(""), InputError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pb
