#include "sim/model/two_layer.hpp"

#include <cmath>
#include <stdexcept>

namespace wbaudit::sim {

Activation activation_from_name(std::string_view name) {
  if (name == "tanh") {
    return Activation::tanh;
  }
  if (name == "relu") {
    return Activation::relu;
  }
  if (name == "linear") {
    return Activation::linear;
  }
  throw std::invalid_argument("unknown activation \"" + std::string(name) + "\" (known: tanh, relu, linear)");
}

std::string activation_name(Activation activation) {
  switch (activation) {
    case Activation::tanh:
      return "tanh";
    case Activation::relu:
      return "relu";
    default:
      return "linear";
  }
}

template <class ExecSpace>
TwoLayerModel<ExecSpace>::TwoLayerModel(const TwoLayerShape& shape, int batch) : m_shape(shape), m_batch(batch) {
  if (shape.input_dim <= 0 || shape.hidden <= 0 || shape.output_dim <= 0 || batch <= 0) {
    throw std::invalid_argument("TwoLayerModel: dimensions and batch must be positive (input " +
                                std::to_string(shape.input_dim) + ", hidden " + std::to_string(shape.hidden) +
                                ", output " + std::to_string(shape.output_dim) + ", batch " + std::to_string(batch) +
                                ")");
  }
  for (int t = 0; t < kTwoLayerTensors; ++t) {
    const std::string name = kTwoLayerTensorNames[t];
    m_params[t] = Vector("wbaudit::sim::TwoLayerModel::" + name, tensor_size(t));
    m_grads[t] = Vector("wbaudit::sim::TwoLayerModel::grad::" + name, tensor_size(t));
  }
  const int b = batch, h = shape.hidden, o = shape.output_dim;
  m_hidden = Vector("wbaudit::sim::TwoLayerModel::hidden", std::size_t(b) * h);
  m_hidden_slope = Vector("wbaudit::sim::TwoLayerModel::hidden_slope", std::size_t(b) * h);
  m_residual = Vector("wbaudit::sim::TwoLayerModel::residual", std::size_t(b) * o);
  m_delta_out = Vector("wbaudit::sim::TwoLayerModel::delta_out", std::size_t(b) * o);
  m_delta_hidden = Vector("wbaudit::sim::TwoLayerModel::delta_hidden", std::size_t(b) * h);
}

template <class ExecSpace>
std::int64_t TwoLayerModel<ExecSpace>::tensor_size(int tensor) const {
  const std::int64_t d = m_shape.input_dim, h = m_shape.hidden, o = m_shape.output_dim;
  switch (tensor) {
    case 0:
      return h * d;
    case 1:
      return h;
    case 2:
      return o * h;
    case 3:
      return o;
    default:
      throw std::out_of_range("TwoLayerModel: no tensor id " + std::to_string(tensor));
  }
}

template <class ExecSpace>
void TwoLayerModel<ExecSpace>::initialize(const ExecSpace& space, const GaussianStream& stream, float scale) {
  for (int t = 0; t < kTwoLayerTensors; ++t) {
    const int fan_in = t < 2 ? m_shape.input_dim : m_shape.hidden;
    const float std_dev = static_cast<float>(static_cast<double>(scale) / std::sqrt(static_cast<double>(fan_in)));
    Vector p = m_params[t];
    const GaussianStream s = stream;
    const std::uint64_t id = static_cast<std::uint64_t>(t);
    Kokkos::parallel_for(
        "wbaudit::sim::TwoLayerModel::initialize", Kokkos::RangePolicy<ExecSpace>(space, 0, p.extent(0)),
        KOKKOS_LAMBDA(const std::size_t i) { p(i) = std_dev * s(id, 0, i); });
  }
  space.fence();
}

template <class ExecSpace>
void TwoLayerModel<ExecSpace>::forward_hidden(const ExecSpace& space,
                                              Kokkos::View<const float*, memory_space> x) const {
  const int d = m_shape.input_dim, h = m_shape.hidden;
  const Activation act = m_shape.activation;
  const auto w1 = m_params[0], b1 = m_params[1];
  const auto hidden = m_hidden, slope = m_hidden_slope;
  Kokkos::parallel_for(
      "wbaudit::sim::TwoLayerModel::forward_hidden", Kokkos::RangePolicy<ExecSpace>(space, 0, m_batch * h),
      KOKKOS_LAMBDA(const int idx) {
        const int b = idx / h, j = idx % h;
        const float z = b1(j) + fixed_order_sum(d, [&](int i) { return w1(j * d + i) * x(b * d + i); });
        const float a = activate(act, z);
        hidden(idx) = a;
        slope(idx) = activate_derivative(act, z, a);
      });
}

template <class ExecSpace>
void TwoLayerModel<ExecSpace>::predict(const ExecSpace& space, Kokkos::View<const float*, memory_space> x,
                                       Kokkos::View<float*, memory_space> yhat) const {
  const int h = m_shape.hidden, o = m_shape.output_dim;
  forward_hidden(space, x);
  const auto w2 = m_params[2], b2 = m_params[3];
  const auto hidden = m_hidden;
  Kokkos::parallel_for(
      "wbaudit::sim::TwoLayerModel::predict::output", Kokkos::RangePolicy<ExecSpace>(space, 0, m_batch * o),
      KOKKOS_LAMBDA(const int idx) {
        const int b = idx / o, k = idx % o;
        yhat(idx) = b2(k) + fixed_order_sum(h, [&](int j) { return w2(k * h + j) * hidden(b * h + j); });
      });
}

template <class ExecSpace>
double TwoLayerModel<ExecSpace>::loss_and_gradient(const ExecSpace& space, Kokkos::View<const float*, memory_space> x,
                                                   Kokkos::View<const float*, memory_space> y) {
  const int d = m_shape.input_dim, h = m_shape.hidden, o = m_shape.output_dim, nb = m_batch;
  forward_hidden(space, x);
  const auto residual = m_residual, delta_out = m_delta_out, delta_hidden = m_delta_hidden;
  const auto hidden = m_hidden, slope = m_hidden_slope;
  const auto w2 = m_params[2], b2 = m_params[3];
  const float scale = static_cast<float>(2.0 / (static_cast<double>(nb) * o));  // dL/dyhat = 2 r / (B O)
  Kokkos::parallel_for(
      "wbaudit::sim::TwoLayerModel::loss_and_gradient::residual", Kokkos::RangePolicy<ExecSpace>(space, 0, nb * o),
      KOKKOS_LAMBDA(const int idx) {
        const int b = idx / o, k = idx % o;
        const float yhat = b2(k) + fixed_order_sum(h, [&](int j) { return w2(k * h + j) * hidden(b * h + j); });
        const float r = yhat - y(idx);
        residual(idx) = r;
        delta_out(idx) = scale * r;
      });
  Kokkos::parallel_for(
      "wbaudit::sim::TwoLayerModel::loss_and_gradient::delta_hidden", Kokkos::RangePolicy<ExecSpace>(space, 0, nb * h),
      KOKKOS_LAMBDA(const int idx) {
        const int b = idx / h, j = idx % h;
        const float s = fixed_order_sum(o, [&](int k) { return w2(k * h + j) * delta_out(b * o + k); });
        delta_hidden(idx) = slope(idx) * s;
      });
  // One work item per parameter coordinate, in the order layer1.weight, layer1.bias, layer2.weight, layer2.bias;
  // each sums over the batch with fixed_order_sum.
  const auto g1w = m_grads[0], g1b = m_grads[1], g2w = m_grads[2], g2b = m_grads[3];
  const int n1w = h * d, n1b = h, n2w = o * h, n2b = o;
  Kokkos::parallel_for(
      "wbaudit::sim::TwoLayerModel::loss_and_gradient::parameters",
      Kokkos::RangePolicy<ExecSpace>(space, 0, n1w + n1b + n2w + n2b), KOKKOS_LAMBDA(int idx) {
        if (idx < n1w) {
          const int j = idx / d, i = idx % d;
          g1w(idx) = fixed_order_sum(nb, [&](int b) { return delta_hidden(b * h + j) * x(b * d + i); });
          return;
        }
        idx -= n1w;
        if (idx < n1b) {
          const int j = idx;
          g1b(idx) = fixed_order_sum(nb, [&](int b) { return delta_hidden(b * h + j); });
          return;
        }
        idx -= n1b;
        if (idx < n2w) {
          const int k = idx / h, j = idx % h;
          g2w(idx) = fixed_order_sum(nb, [&](int b) { return delta_out(b * o + k) * hidden(b * h + j); });
          return;
        }
        idx -= n2w;
        const int k = idx;
        g2b(idx) = fixed_order_sum(nb, [&](int b) { return delta_out(b * o + k); });
      });
  space.fence();
  const auto r_host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), residual);
  double sum = 0.0;
  for (std::size_t i = 0; i < r_host.extent(0); ++i) {
    sum += static_cast<double>(r_host(i)) * r_host(i);
  }
  return sum / (static_cast<double>(nb) * o);
}

template <class ExecSpace>
TeacherStudentData<ExecSpace>::TeacherStudentData(const ExecSpace& space, const TwoLayerShape& teacher_shape,
                                                  std::uint64_t teacher_seed, std::uint64_t data_seed, int batch,
                                                  float noise)
    : m_teacher(teacher_shape, batch),
      m_data_seed(data_seed),
      m_batch(batch),
      m_noise(noise),
      m_x("wbaudit::sim::TeacherStudentData::x", std::size_t(batch) * teacher_shape.input_dim),
      m_y("wbaudit::sim::TeacherStudentData::y", std::size_t(batch) * teacher_shape.output_dim),
      m_hidden("wbaudit::sim::TeacherStudentData::hidden", std::size_t(batch) * teacher_shape.hidden) {
  m_teacher.initialize(space, GaussianStream{teacher_seed, StreamDomain::teacher}, 1.0f);
}

template <class ExecSpace>
void TeacherStudentData<ExecSpace>::generate(const ExecSpace& space, std::int64_t step) {
  // One work item per sample: its inputs, the teacher's hidden layer (in this sample's row of m_hidden) and
  // outputs, and the label noise -- one parallel region per step instead of four.
  const TwoLayerShape shape = m_teacher.shape();
  const int d = shape.input_dim, h = shape.hidden, o = shape.output_dim;
  const Activation act = shape.activation;
  const auto x = m_x, y = m_y, hidden = m_hidden;
  const auto w1 = m_teacher.parameter(0), b1 = m_teacher.parameter(1), w2 = m_teacher.parameter(2),
             b2 = m_teacher.parameter(3);
  const GaussianStream inputs{m_data_seed, StreamDomain::input};
  const GaussianStream noise_stream{m_data_seed, StreamDomain::label_noise};
  const std::uint64_t t = static_cast<std::uint64_t>(step);
  const float noise = m_noise;
  Kokkos::parallel_for(
      "wbaudit::sim::TeacherStudentData::generate", Kokkos::RangePolicy<ExecSpace>(space, 0, m_batch),
      KOKKOS_LAMBDA(const int b) {
        for (int i = 0; i < d; ++i) {
          x(b * d + i) = inputs(t, b, i);
        }
        for (int j = 0; j < h; ++j) {
          const float z = b1(j) + fixed_order_sum(d, [&](int i) { return w1(j * d + i) * x(b * d + i); });
          hidden(b * h + j) = activate(act, z);
        }
        for (int k = 0; k < o; ++k) {
          float out = b2(k) + fixed_order_sum(h, [&](int j) { return w2(k * h + j) * hidden(b * h + j); });
          if (noise != 0.0f) {
            out += noise * noise_stream(t, b, k);
          }
          y(b * o + k) = out;
        }
      });
  space.fence();
}

template class TwoLayerModel<Kokkos::Serial>;
template class TeacherStudentData<Kokkos::Serial>;
#if defined(KOKKOS_ENABLE_OPENMP)
template class TwoLayerModel<Kokkos::OpenMP>;
template class TeacherStudentData<Kokkos::OpenMP>;
#endif

}  // namespace wbaudit::sim
