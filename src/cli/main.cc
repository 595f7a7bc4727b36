#include "cli/commands.h"

int main(int argc, char** argv) { return rowlm::cli::run_main(argc, argv); }
