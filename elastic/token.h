#pragma once
// The job token: random per job, handed to workers by the launcher (RINGFENCE_TOKEN), and
// presented by every connection. Compared in constant time so a wrong guess learns
// nothing from how long the refusal took.
#include <string>

namespace rf::elastic {

// 32 hex characters from /dev/urandom. Throws rf::Error if it cannot be read.
std::string random_token();
bool token_equal(const std::string& a, const std::string& b);
// The first word of the file. Throws rf::InvalidInput naming the file when there is none.
std::string read_token_file(const std::string& path);

}  // namespace rf::elastic
