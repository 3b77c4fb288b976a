#pragma once
// `ringfence run` inside a Slurm job step: the shell around elastic/slurm.h. It reads the
// step's environment, asks `scontrol` where the step's first node is, prints what this
// launcher does and the plan's warnings, and returns the options to run with.
#include "elastic/launch_options.h"

namespace rf::apps {

// Unchanged outside a job step or with --no-slurm (then checked against the world size by
// check_run_layout, and --spare-nodes and --coord-port are refused: they mean nothing there). Throws rf::InvalidInput when the step does not fit
// (elastic::plan_slurm), rf::Error when scontrol cannot be asked.
elastic::RunOptions place_under_slurm(const elastic::RunOptions& o);

}  // namespace rf::apps
