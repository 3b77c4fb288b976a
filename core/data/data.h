#pragma once
// The whole data layer in one include: datasets, the IDX reader and the sampler.
#include "core/data/data_error.h"
#include "core/data/dataset.h"
#include "core/data/idx.h"
#include "core/data/sampler.h"
