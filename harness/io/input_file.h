// Reading a whole input file (a TOML config, a CSV) after checking what it
// is: only a regular file is read — a directory would read as empty and a
// FIFO or a device would block or never end — and its size is checked
// against a limit before anything is allocated.
#pragma once
#include <cstdint>
#include <string>

namespace pb {

// The file's bytes. InputError "<prefix>cannot open" when it does not exist
// or cannot be opened, "<prefix>is a directory", "<prefix>is not a regular
// file ...", "<prefix>is N bytes, more than the M a <kind> may have".
std::string read_input_file(const std::string& path, const std::string& prefix, const std::string& kind,
                            uint64_t max_bytes);

}  // namespace pb
