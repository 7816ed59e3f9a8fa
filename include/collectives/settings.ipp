// The settings' parsing and reading (settings.hpp): inline in header-only use, compiled
// once into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "settings.hpp"

namespace collectives::settings {

std::string assignment(std::string_view name, std::string_view value) {
  for (const char c : value)
    if (c <= ' ' || c > '~') return std::string(name) + "='" + std::string(value) + "'";
  return std::string(name) + "=" + std::string(value);
}

std::string accepted(const variable& v) {
  switch (v.kind) {
    case kind::seconds:
      return "a number of seconds from " + detail::number_text(v.lowest) + " to " + detail::number_text(v.highest);
    case kind::whole_number:
      return "a whole number from " + detail::number_text(v.lowest) + " to " + detail::number_text(v.highest);
    case kind::byte_size:
      return "a number of bytes from " + detail::bytes_text(v.lowest) + " to " + detail::bytes_text(v.highest) +
             " (K, M, G: KiB, MiB, GiB)";
    case kind::flag: return "1, on, true or yes; 0, off, false or no";
    case kind::text: return "any text";
    case kind::choice: return detail::word_list(v.words);
  }
  return {};
}

long long parse_whole_number(std::string_view name, std::string_view text, long long lowest, long long highest,
                             std::string_view expected) {
  long long number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec == std::errc::invalid_argument || end != text.data() + text.size())
    refuse(name, text, "is not a whole number", expected);
  if (ec == std::errc::result_out_of_range || number < lowest || number > highest)
    refuse(name, text, "is out of range", expected);
  return number;
}

long long parse_whole_number(const variable& v, std::string_view text) {
  return parse_whole_number(v.name, text, static_cast<long long>(v.lowest), static_cast<long long>(v.highest),
                            accepted(v));
}

std::chrono::milliseconds parse_seconds(const variable& v, std::string_view text) {
  double seconds = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (ec == std::errc::invalid_argument || end != text.data() + text.size())
    refuse(v.name, text, "is not a number", accepted(v));
  if (ec == std::errc::result_out_of_range || !(seconds >= v.lowest && seconds <= v.highest))
    refuse(v.name, text, "is out of range", accepted(v));
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(seconds));
}

std::size_t parse_byte_size(const variable& v, std::string_view text) {
  long long number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  const std::string_view suffix = text.substr(static_cast<std::size_t>(end - text.data()));
  const double unit = suffix.empty() ? 1 : suffix == "K" ? kib : suffix == "M" ? mib : suffix == "G" ? gib : 0;
  if (ec == std::errc::invalid_argument || unit == 0) refuse(v.name, text, "is not a number of bytes", accepted(v));
  // In doubles, exact for every size the table allows, and a product that overflows is
  // merely large.
  const double bytes = static_cast<double>(number) * unit;
  if (ec == std::errc::result_out_of_range || !(bytes >= v.lowest && bytes <= v.highest))
    refuse(v.name, text, "is out of range", accepted(v));
  return static_cast<std::size_t>(bytes);
}

bool parse_flag(const variable& v, std::string_view text) {
  for (const std::string_view on : {"1", "on", "true", "yes"})
    if (text == on) return true;
  for (const std::string_view off : {"0", "off", "false", "no"})
    if (text == off) return false;
  refuse(v.name, text, "is not a flag", accepted(v));
}

std::string_view parse_choice(const variable& v, std::string_view text) {
  for (std::string_view words = v.words; !words.empty();) {
    const auto space = words.find(' ');
    const auto word = words.substr(0, space);
    if (word == text) return word;
    words = space == std::string_view::npos ? std::string_view{} : words.substr(space + 1);
  }
  refuse(v.name, text, "is not a choice", accepted(v));
}

std::optional<std::string> value_of(std::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<std::chrono::milliseconds> seconds(name_of<kind::seconds> n) {
  if (const auto text = value_of(n.v->name)) return parse_seconds(*n.v, *text);
  return std::nullopt;
}

std::optional<long long> whole_number(name_of<kind::whole_number> n) {
  if (const auto text = value_of(n.v->name)) return parse_whole_number(*n.v, *text);
  return std::nullopt;
}

std::optional<long long> whole_number(name_of<kind::whole_number> n, long long highest) {
  variable narrower = *n.v;
  narrower.highest = std::min(narrower.highest, static_cast<double>(highest));
  if (const auto text = value_of(n.v->name)) return parse_whole_number(narrower, *text);
  return std::nullopt;
}

std::optional<std::size_t> byte_size(name_of<kind::byte_size> n) {
  if (const auto text = value_of(n.v->name)) return parse_byte_size(*n.v, *text);
  return std::nullopt;
}

std::optional<bool> flag(name_of<kind::flag> n) {
  if (const auto text = value_of(n.v->name)) return parse_flag(*n.v, *text);
  return std::nullopt;
}

std::optional<std::string_view> choice(name_of<kind::choice> n) {
  if (const auto text = value_of(n.v->name)) return parse_choice(*n.v, *text);
  return std::nullopt;
}

}  // namespace collectives::settings
