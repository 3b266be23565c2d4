#include "harness/io/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "harness/status.h"

namespace pb {
namespace {

namespace fs = std::filesystem;

enum class Mode { replace, in_place };

struct Target {
  std::string path;  // where the bytes go (a link's target)
  Mode mode = Mode::replace;
  bool exists = false;
  mode_t perms = 0644;
};

std::string errno_text(int e) { return std::strerror(e); }

[[noreturn]] void refuse(const std::string& what, const std::string& path, const std::string& why) {
  throw InputError(what + " " + path + ": " + why);
}

Target resolve(const std::string& path, const std::string& what, const std::vector<std::string>& inputs) {
  if (path.empty()) throw InputError(what + ": empty path");
  Target t;
  t.path = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {  // it exists, through every link the kernel follows
    t.exists = true;
    t.perms = st.st_mode & 07777;
    for (const std::string& in : inputs) {
      struct stat is {};
      if (!in.empty() && ::stat(in.c_str(), &is) == 0 && is.st_dev == st.st_dev && is.st_ino == st.st_ino)
        refuse(what, path, "is also an input of this command (" + in + "); write the output elsewhere");
    }
    if (S_ISDIR(st.st_mode)) refuse(what, path, "is a directory (give a file name)");
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
      // Written in place at the path given: the kernel follows its links
      // (/dev/stdout -> /proc/self/fd/1 -> "pipe:[N]" names no path).
      t.mode = Mode::in_place;
    } else if (S_ISREG(st.st_mode)) {
      std::error_code ec;
      t.path = fs::canonical(path, ec).string();  // a link's target is what the rename replaces
      if (ec) refuse(what, path, "cannot follow the link: " + ec.message());
    } else {
      refuse(what, path, "is not a regular file, a pipe or a character device (a socket or a block device); "
                         "give a file name");
    }
    return t;
  }
  if (errno != ENOENT) refuse(what, path, "cannot inspect it: " + errno_text(errno));
  // A new name, or a dangling link naming the file to create: follow the
  // links one at a time.
  for (int hops = 0;; ++hops) {
    struct stat ls {};
    if (::lstat(t.path.c_str(), &ls) != 0 || !S_ISLNK(ls.st_mode)) break;
    if (hops == 40) refuse(what, path, "too many levels of symbolic links");
    std::error_code ec;
    const fs::path to = fs::read_symlink(t.path, ec);
    if (ec) refuse(what, path, "cannot follow the link: " + ec.message());
    t.path = (to.is_absolute() ? to : fs::path(t.path).parent_path() / to).string();
  }
  const fs::path dir = fs::path(t.path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::is_directory(dir, ec)) refuse(what, path, "its directory " + dir.string() + " does not exist");
  return t;
}

// Writes all of `bytes` to `fd`; false with errno set on failure.
bool write_all(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += size_t(n);
  }
  return true;
}

void write_in_place(const Target& t, std::string_view bytes, const std::string& what, const std::string& path) {
  const int fd = ::open(t.path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) refuse(what, path, "cannot open for writing: " + errno_text(errno));
  const bool ok = write_all(fd, bytes);
  const int e = errno;
  ::close(fd);
  if (!ok) refuse(what, path, "write failed: " + errno_text(e));
}

void write_by_rename(const Target& t, std::string_view bytes, const std::string& what, const std::string& path) {
  std::string tmpl = t.path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmpl.data());  // O_EXCL: a fresh name, never an existing file
  if (fd < 0) refuse(what, path, "cannot create a temporary beside it: " + errno_text(errno));
  auto fail = [&](const std::string& why) {
    ::unlink(tmpl.c_str());
    refuse(what, path, why);
  };
  const bool ok = write_all(fd, bytes) && ::fchmod(fd, t.exists ? t.perms : 0644) == 0;
  const int e = errno;
  if (::close(fd) != 0 && ok) fail("write failed: " + errno_text(errno));
  if (!ok) fail("write failed: " + errno_text(e));
  if (::rename(tmpl.c_str(), t.path.c_str()) != 0) fail("cannot rename the temporary over it: " + errno_text(errno));
}

}  // namespace

void check_output_path(const std::string& path, const std::string& what, const std::vector<std::string>& inputs) {
  (void)resolve(path, what, inputs);
}

void write_output_file(const std::string& path, std::string_view bytes, const std::string& what,
                       const std::vector<std::string>& inputs) {
  const Target t = resolve(path, what, inputs);
  if (t.mode == Mode::in_place) {
    write_in_place(t, bytes, what, path);
  } else {
    write_by_rename(t, bytes, what, path);
  }
}

}  // namespace pb
