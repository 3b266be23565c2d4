// Writing a whole output file (a JUnit report, a machine profile, a
// timeline, a safetensors image) without ever replacing what the user did
// not mean to replace:
//  - a new name, or an existing regular file: written to a fresh temporary
//    beside it (O_EXCL, never an existing name) and renamed over it, so a
//    reader sees the old file or the new one, never a torn one;
//  - a symbolic link: the same, at the file it points to (the link stays);
//  - a pipe, a FIFO or a character device (/dev/stdout, /dev/null): written
//    in place, since renaming would replace the device with a regular file;
//  - a directory, a socket, a block device, or a link to one: refused;
//  - one of the command's inputs (the same file by device and inode, however
//    it is spelled): refused, so `verify --junit T --trace T` cannot destroy
//    the trace it judges.
// Every refusal and failure is an InputError naming `what` (the flag) and
// the path; a failure leaves the target as it was and no temporary behind.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace pb {

void write_output_file(const std::string& path, std::string_view bytes, const std::string& what,
                       const std::vector<std::string>& inputs = {});

// The checks alone (nothing written): for a command that wants to refuse a
// bad output path before it spends minutes computing what goes there.
void check_output_path(const std::string& path, const std::string& what, const std::vector<std::string>& inputs = {});

}  // namespace pb
