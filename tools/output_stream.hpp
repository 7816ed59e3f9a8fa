// collectives-run: the pipes that carry a rank's output to the launcher's, passed on
// whole line by whole line behind the rank's prefix.
#pragma once

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <string>
#include <string_view>

namespace collectives_run {

// Writes all of `data`, whatever write() takes at a time.
inline void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t written = write(fd, data.data(), data.size());
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) return;  // nobody reads it any more (EPIPE): drop it, keep supervising
    data.remove_prefix(static_cast<std::size_t>(written));
  }
}

// Bytes from one pipe, passed on whole line by whole line, so that lines of
// different ranks never mix.
struct output_stream {
  int fd = -1;  // read end of the pipe; -1 once closed
  int destination = STDOUT_FILENO;
  std::string prefix;
  std::string pending;  // bytes after the last newline

  // Reads what one read() returns; false when nothing more is there for now.
  bool read_chunk() {
    std::array<char, 65536> buffer;
    const ssize_t got = read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) return true;
    if (got < 0 && errno == EAGAIN) return false;
    if (got <= 0) {  // end of file, or a read error that ends it all the same
      finish();
      return false;
    }
    const std::size_t search_from = pending.size();  // the bytes before hold no newline
    pending.append(buffer.data(), static_cast<std::size_t>(got));
    write_complete_lines(search_from);
    return true;
  }

  // Reads what the pipe holds now. At most 1 MiB (as much as a pipe can hold), so
  // that a child of the rank that keeps writing cannot hold the launcher here.
  void drain() {
    for (int chunk = 0; chunk < 16 && fd >= 0 && read_chunk(); ++chunk) {
    }
  }

  // Writes a last line that lacks its newline, and closes the pipe.
  void finish() {
    if (!pending.empty()) write_all(destination, prefix + pending + "\n");
    pending.clear();
    if (fd >= 0) close(fd);
    fd = -1;
  }

  void write_complete_lines(std::size_t search_from) {
    std::string lines;
    std::size_t start = 0;
    for (auto newline = pending.find('\n', search_from); newline != std::string::npos;
         newline = pending.find('\n', start)) {
      lines.append(prefix).append(pending, start, newline + 1 - start);
      start = newline + 1;
    }
    write_all(destination, lines);
    pending.erase(0, start);
  }
};

}  // namespace collectives_run
