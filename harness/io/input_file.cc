#include "harness/io/input_file.h"

#include <sys/stat.h>

#include <fstream>
#include <new>
#include <sstream>

#include "harness/status.h"

namespace pb {

std::string read_input_file(const std::string& path, const std::string& prefix, const std::string& kind,
                            uint64_t max_bytes) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) throw InputError(prefix + "cannot open");
  if (S_ISDIR(st.st_mode)) throw InputError(prefix + "is a directory (give a " + kind + " file)");
  if (!S_ISREG(st.st_mode))
    throw InputError(prefix + "is not a regular file (a pipe or a device is not read: it could block or never end)");
  if (uint64_t(st.st_size) > max_bytes)
    throw InputError(prefix + "is " + std::to_string(st.st_size) + " bytes, more than the " +
                     std::to_string(max_bytes) + " a " + kind + " may have");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(prefix + "cannot open");
  std::string text;
  try {
    text.resize(size_t(st.st_size));
  } catch (const std::bad_alloc&) {
    throw InputError(prefix + "its " + std::to_string(st.st_size) + " bytes do not fit in this machine's memory");
  }
  in.read(text.data(), std::streamsize(text.size()));
  if (in.bad() || size_t(in.gcount()) != text.size()) throw InputError(prefix + "read error");
  return text;
}

}  // namespace pb
