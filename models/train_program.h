#pragma once
// main() of train_mlp / train_cnn: flags, training, exit codes (0 ok, 1 failure such as
// missing data or a bad --init file, 2 bad flags). SIGTERM or SIGINT is a graceful stop:
// training ends after the step in flight, checkpoints it (with --ckpt-dir) and exits 0; a
// second signal ends the process at once.
#include "models/reference.h"

namespace rf::models {

int train_program_main(int argc, char** argv, ModelKind kind);

}  // namespace rf::models
