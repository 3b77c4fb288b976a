#pragma once
// The words of an enum's values, from one table per enum: a constexpr array of {value, "word"}
// pairs declared once beside the enum. Its to_string and parser read the table:
//
//   enum class Color { Red, Green };
//   inline constexpr rf::EnumName<Color> kColorNames[] = {{Color::Red, "red"}, {Color::Green, "green"}};
//   static_assert(rf::lists_each_once(kColorNames));
//   const char* to_string(Color c) { return rf::name_of(kColorNames, c); }
//   std::optional<Color> parse_color(std::string_view s) { return rf::parse_enum(kColorNames, s); }
//
// The words are a protocol (event log, wire, audit lines): a table's words never change.
// Parsing looks a word up in the table, so it depends on neither the enumerators' order nor
// their values. all_values gives the values in the table's order.
//
// Unlike a switch, a table is not checked for completeness by -Wswitch. lists_each_once, in a
// static_assert beside the table, checks what it can for enumerators numbered 0, 1, ...: that
// the table lists each of the first N once, each under a word of its own. An enumerator added
// last and left out of the table is not seen; tests/apps/test_enum_words.cpp round-trips every
// table through its enum's own to_string and parser.
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace rf {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The word of `value`; "?" for a value the table does not list (a cast from a bad integer).
// It does not throw: to_string is called while reporting errors.
template <class E, std::size_t N>
constexpr const char* name_of(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& e : table)
    if (e.value == value) return e.name;
  return "?";
}

// The value whose word is exactly `text` (case-sensitive); nullopt when no entry has it.
template <class E, std::size_t N>
constexpr std::optional<E> parse_enum(const EnumName<E> (&table)[N], std::string_view text) {
  for (const EnumName<E>& e : table)
    if (text == e.name) return e.value;
  return std::nullopt;
}

// Every value the table lists, in its order.
template <class E, std::size_t N>
constexpr std::array<E, N> all_values(const EnumName<E> (&table)[N]) {
  std::array<E, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = table[i].value;
  return out;
}

// Whether the table lists each of the values 0..N-1 once, under non-empty words, none "?"
// and no two alike.
template <class E, std::size_t N>
constexpr bool lists_each_once(const EnumName<E> (&table)[N]) {
  std::array<bool, N> seen{};
  for (std::size_t i = 0; i < N; ++i) {
    const auto v = static_cast<long long>(table[i].value);
    if (v < 0 || v >= static_cast<long long>(N) || seen[static_cast<std::size_t>(v)]) return false;
    seen[static_cast<std::size_t>(v)] = true;
    const std::string_view word = table[i].name == nullptr ? "" : table[i].name;
    if (word.empty() || word == "?") return false;
    for (std::size_t j = 0; j < i; ++j)
      if (word == table[j].name) return false;
  }
  return true;
}

}  // namespace rf
