// base/enum_names.h: one {value, word} table per enum, read by name_of, parse_enum,
// all_values and checked by lists_each_once.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <string_view>

#include "base/enum_names.h"

namespace {

enum class Color { Red, Green, Blue };
// Listed out of the enumerators' order: parsing and naming go by the table's pairs.
constexpr rf::EnumName<Color> kColorNames[] = {{Color::Blue, "blue"}, {Color::Red, "red"}, {Color::Green, "green"}};
static_assert(rf::lists_each_once(kColorNames));

// An unscoped enum nested in a struct, as Answer::Kind is.
struct Reply {
  enum Kind { Ok, Busy };
};
constexpr rf::EnumName<Reply::Kind> kReplyKindNames[] = {{Reply::Ok, "ok"}, {Reply::Busy, "busy"}};
static_assert(rf::lists_each_once(kReplyKindNames));

// Everything is usable at compile time.
static_assert(std::string_view(rf::name_of(kColorNames, Color::Green)) == "green");
static_assert(rf::parse_enum(kColorNames, "red") == Color::Red);
static_assert(!rf::parse_enum(kColorNames, "Red").has_value());
static_assert(rf::all_values(kColorNames)[0] == Color::Blue);

enum class Small { A, B, C };
constexpr rf::EnumName<Small> kMissingB[] = {{Small::A, "a"}, {Small::C, "c"}};
constexpr rf::EnumName<Small> kValueTwice[] = {{Small::A, "a"}, {Small::A, "b"}, {Small::C, "c"}};
constexpr rf::EnumName<Small> kWordTwice[] = {{Small::A, "a"}, {Small::B, "a"}, {Small::C, "c"}};
constexpr rf::EnumName<Small> kEmptyWord[] = {{Small::A, "a"}, {Small::B, ""}, {Small::C, "c"}};
constexpr rf::EnumName<Small> kQuestionWord[] = {{Small::A, "a"}, {Small::B, "?"}, {Small::C, "c"}};
constexpr rf::EnumName<Small> kNullWord[] = {{Small::A, "a"}, {Small::B, nullptr}, {Small::C, "c"}};

}  // namespace

TEST_CASE("name_of gives each value's word, and '?' for a value the table does not list") {
  CHECK(std::string(rf::name_of(kColorNames, Color::Red)) == "red");
  CHECK(std::string(rf::name_of(kColorNames, Color::Green)) == "green");
  CHECK(std::string(rf::name_of(kColorNames, Color::Blue)) == "blue");
  CHECK(std::string(rf::name_of(kColorNames, static_cast<Color>(7))) == "?");
  CHECK(std::string(rf::name_of(kReplyKindNames, Reply::Busy)) == "busy");
  CHECK(std::string(rf::name_of(kMissingB, Small::B)) == "?");
}

TEST_CASE("parse_enum takes exactly a table's word, from any string type") {
  CHECK(rf::parse_enum(kColorNames, "blue") == Color::Blue);
  CHECK(rf::parse_enum(kColorNames, std::string("green")) == Color::Green);
  CHECK(rf::parse_enum(kColorNames, std::string_view("red")) == Color::Red);
  CHECK(rf::parse_enum(kReplyKindNames, "ok") == Reply::Ok);
  for (const char* bad : {"", "?", "Blue", "blue ", " blue", "bluex", "blu"})
    CHECK_MESSAGE(!rf::parse_enum(kColorNames, bad).has_value(), bad);
  // A word with a NUL inside is not the word before it.
  CHECK(!rf::parse_enum(kColorNames, std::string_view("red\0x", 5)).has_value());
}

TEST_CASE("parse_enum(name_of(v)) == v for every value of a table, and all_values keeps its order") {
  const auto all = rf::all_values(kColorNames);
  REQUIRE(all.size() == 3);
  CHECK(all[0] == Color::Blue);
  CHECK(all[1] == Color::Red);
  CHECK(all[2] == Color::Green);
  for (Color c : all) CHECK(rf::parse_enum(kColorNames, rf::name_of(kColorNames, c)) == c);
}

TEST_CASE("lists_each_once: the values 0..N-1 once each, under words of their own") {
  CHECK(rf::lists_each_once(kColorNames));
  CHECK(rf::lists_each_once(kReplyKindNames));
  CHECK_FALSE(rf::lists_each_once(kMissingB));  // C is 2, beyond a table of two
  CHECK_FALSE(rf::lists_each_once(kValueTwice));
  CHECK_FALSE(rf::lists_each_once(kWordTwice));
  CHECK_FALSE(rf::lists_each_once(kEmptyWord));
  CHECK_FALSE(rf::lists_each_once(kQuestionWord));
  CHECK_FALSE(rf::lists_each_once(kNullWord));
}
