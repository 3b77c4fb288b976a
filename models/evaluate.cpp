#include "models/evaluate.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "models/train_setup.h"

namespace rf::models {

EvalResult evaluate(nn::Module& model, const data::Dataset& ds, int64_t batch) {
  NoGradGuard no_grad;
  const Device device = model_device(model);  // each batch goes there
  EvalResult r;
  double loss_sum = 0.0;
  std::vector<int64_t> idx;
  std::vector<int32_t> labels;
  for (int64_t start = 0; start < ds.n; start += batch) {
    const int64_t b = std::min(batch, ds.n - start);
    idx.resize(b);
    std::iota(idx.begin(), idx.end(), start);
    labels.resize(b);
    Tensor x = Tensor::empty({b, ds.c, ds.h, ds.w});
    data::gather_batch(ds, idx, x.data(), labels.data());
    Tensor logits = model(x.to(device));
    loss_sum += cross_entropy(logits, labels, Reduction::Sum).item();
    logits = logits.to(Device::CPU);  // the arg-max reads it on the host (a blocking read)
    const int64_t classes = logits.size(1);
    for (int64_t i = 0; i < b; ++i) {
      const float* row = logits.data() + i * classes;
      const int64_t pred = std::max_element(row, row + classes) - row;
      r.correct += pred == labels[i];
    }
    r.total += b;
  }
  r.mean_loss = r.total ? loss_sum / r.total : 0.0;
  return r;
}

}  // namespace rf::models
