#pragma once
// What loading a model file says, for the model tests that check errors.

#include <string>

#include "backend/factory/make_backend.h"
#include "core/error.h"
#include "model/model.h"

namespace rowlm::model_testing {

// The message of the rowlm::Error that loading `path` on the CPU throws, or
// "no error".
inline std::string load_error_at(const std::string& path) {
  auto backend = make_backend({"cpu", 1, MatmulPrecision::F32});
  try {
    load_model(path, *backend);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace rowlm::model_testing
