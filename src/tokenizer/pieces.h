#pragma once
// The text between pipeline stages: a list of pieces, each either plain text
// for the model or an added token already decided.

#include <cstdint>
#include <string>
#include <vector>

namespace rowlm::tok {

struct Piece {
  std::string text;
  int32_t token = -1;     // id of a matched added token; -1: text the model tokenizes
  bool at_start = false;  // begins where the input text begins
};

using Pieces = std::vector<Piece>;

}  // namespace rowlm::tok
