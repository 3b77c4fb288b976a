#pragma once
// Command lines through CLI11: a program declares its flags on a CLI::App (names, value
// meta, help); CLI11 matches the arguments, splits --name=VALUE and collects the values;
// the program converts each value itself, in argv order, and words its own errors.
//   - check() runs first and holds the rules CLI11 lacks. CLI11 takes whatever follows a
//     value flag as its value (`--ckpt-dir --resume` would make a directory named
//     "--resume"), reads `--toggle=false` as a value for a toggle and `-n4` as `-n 4`. We
//     refuse the first two, leave `-n4` an unknown flag, and report the first mistake in
//     argv order. parse() passes `--x=` on as `--x ""`: CLI11 would take
//     the next argument as its value.
//   - Values are converted by the caller: CLI11's integers accept hex, octal and leading
//     blanks, and its messages are not the ones our users and tests read.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace rf::cli {

// A value flag: the next argument (or =VALUE) is its value; every occurrence is kept.
inline CLI::Option* value_flag(CLI::App& app, const std::string& name, const std::string& meta, const std::string& help) {
  return app.add_option(name, help)->type_name(meta)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}
// A flag without a value.
inline CLI::Option* toggle(CLI::App& app, const std::string& name, const std::string& help) {
  return app.add_flag(name, help)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

inline bool takes_value(const CLI::Option& o) { return o.get_items_expected_max() > 0; }

// The flag `arg` names: "--name" or "--name=VALUE" (long names), "-x" (short, exact), else
// nullptr. `name` receives the flag's name without any =VALUE.
inline const CLI::Option* find(const CLI::App& app, const std::string& arg, std::string* name = nullptr) {
  std::string n;
  if (arg.rfind("--", 0) == 0 && arg.size() > 2) n = arg.substr(0, arg.find('='));
  else if (arg.size() == 2 && arg[0] == '-' && arg[1] != '-') n = arg;
  else return nullptr;
  if (name) *name = n;
  return app.get_option_no_throw(n);
}

struct Problem {
  enum Kind { None, Unknown, MissingValue, NextIsFlag, ToggleWithValue } kind = None;
  std::string arg;   // Unknown: the argument as given; otherwise the flag's name
  std::string next;  // NextIsFlag: the argument that would have been taken as the value
  size_t index = 0;  // of the argument at fault in args
  explicit operator bool() const { return kind != None; }
};

// The first argument CLI11 would misread, in argv order. `next_is_flag(next)` says when the
// argument after a value flag is a flag rather than its value (nullptr: never).
inline Problem check(const CLI::App& app, const std::vector<std::string>& args,
                     const std::function<bool(const std::string&)>& next_is_flag) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name;
    const CLI::Option* o = find(app, args[i], &name);
    if (!o) return {Problem::Unknown, args[i], {}, i};
    const bool inline_value = name.size() < args[i].size();
    if (!takes_value(*o)) {
      if (inline_value) return {Problem::ToggleWithValue, name, {}, i};
      continue;
    }
    if (inline_value) continue;
    if (i + 1 >= args.size()) return {Problem::MissingValue, name, {}, i};
    if (next_is_flag && next_is_flag(args[i + 1])) return {Problem::NextIsFlag, name, args[i + 1], i};
    ++i;
  }
  return {};
}

// Parses args that check() passed and calls set(flag, value) for every value, in argv
// order (a repeated flag: each value in turn). `flag` is the option's first name; a
// toggle's value is "". CLI11's own errors (none expected after check()) pass through
// as CLI::ParseError.
inline void parse(CLI::App& app, const std::vector<std::string>& args,
                  const std::function<void(const CLI::Option& flag, const std::string& value)>& set) {
  std::vector<std::string> reversed;  // what CLI11's parse() takes
  for (auto a = args.rbegin(); a != args.rend(); ++a) {
    std::string name;
    const CLI::Option* o = find(app, *a, &name);
    if (o && takes_value(*o) && a->size() == name.size() + 1) {  // "--x=": the value is ""
      reversed.push_back("");
      reversed.push_back(name);
    } else {
      reversed.push_back(*a);
    }
  }
  app.parse(reversed);
  std::map<const CLI::Option*, size_t> taken;
  for (const CLI::Option* o : app.parse_order()) {
    const std::string& v = o->results().at(taken[o]++);
    set(*o, takes_value(*o) ? v : std::string());
  }
}

// check(), then parse(): the first mistake in argv order is the one reported, be it one of
// check()'s (`refuse` throws it in the caller's words) or a bad value before it (`set` throws).
inline void parse_checked(CLI::App& app, const std::vector<std::string>& args,
                          const std::function<bool(const std::string&)>& next_is_flag,
                          const std::function<void(const CLI::Option& flag, const std::string& value)>& set,
                          const std::function<void(const Problem&)>& refuse) {
  if (const Problem p = check(app, args, next_is_flag)) {
    parse(app, std::vector<std::string>(args.begin(), args.begin() + static_cast<long>(p.index)), set);
    refuse(p);
  }
  parse(app, args, set);
}

// An option's name as the user writes it: "--name" or "-x".
inline std::string flag_name(const CLI::Option& o) { return o.get_name(false, false); }

// --help in our layout, generated from the flags the parser knows, so the two cannot drift:
//   [the app's description]
//   usage: SYNOPSIS
//     --flag META  what it does (a '\n' in it continues under the column)
//   Title of another group:
//     ...
//   [the app's footer]
// Long names first ("--help, -h"); options in the group "" are not shown. `column` is
// where the descriptions start; 0: two spaces after the longest flag.
class Help : public CLI::Formatter {
 public:
  Help(std::string synopsis, size_t column = 0) : synopsis_(std::move(synopsis)), column_(column) {}

  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const override {
    std::vector<std::pair<std::string, std::vector<const CLI::Option*>>> groups;
    size_t column = column_;
    for (const std::string& g : app->get_groups()) {
      if (g.empty()) continue;
      groups.push_back({g, app->get_options([&g](const CLI::Option* o) { return o->get_group() == g; })});
      if (column_ == 0)
        for (const CLI::Option* o : groups.back().second) column = std::max(column, left(*o).size() + 2);
    }
    std::string out = app->get_description() + "usage: " + synopsis_ + "\n";
    for (size_t i = 0; i < groups.size(); ++i) {
      if (i > 0) out += groups[i].first + ":\n";  // the first group is the program's own flags
      for (const CLI::Option* o : groups[i].second) {
        std::string line = left(*o);
        line += line.size() < column ? std::string(column - line.size(), ' ') : "  ";
        for (const char c : o->get_description()) {
          line += c;
          if (c == '\n') line.append(column, ' ');
        }
        out += line + "\n";
      }
    }
    return out + app->get_footer();
  }

 private:
  static std::string left(const CLI::Option& o) {
    std::string names = "  ";
    for (const auto& l : o.get_lnames()) names.append(names.size() > 2 ? ", --" : "--").append(l);
    for (const auto& s : o.get_snames()) names.append(names.size() > 2 ? ", -" : "-").append(s);
    if (takes_value(o)) names.append(" ").append(o.get_type_name());
    return names;
  }
  std::string synopsis_;
  size_t column_;
};

}  // namespace rf::cli
