// Dumps one decoder's weights, a fixed token batch, the loss and every gradient to HDF5 for the PyTorch comparison
// (tests/sim/model/test_decoder_torch.py); in fp32 the weights are a wbaudit checkpoint's (OUT.checkpoint.h5, written
// by the engine after 3 Adam steps). Usage:
//   wbaudit_decoder_torch_dump OUT.h5 [--parallel] [--rotary-fraction F] [--double]
// Layout: root attribute "config" (JSON: shape, batch, seed, init_std, scalar), root attribute "loss" (double),
// /tokens [batch, seq_len + 1] int32, /weights/<name> and /gradients/<name> with the tensor's shape, in the model's
// scalar type (float or double).
#include <hdf5.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "sim/checkpoint.hpp"
#include "sim/engine.hpp"
#include "sim/model/decoder.hpp"
#include "sim/run.hpp"

namespace {

using namespace wbaudit::sim;
using Host = Kokkos::DefaultHostExecutionSpace;

void check(herr_t status, const std::string& what) {
  if (status < 0) {
    throw std::runtime_error("HDF5: " + what + " failed");
  }
}

template <class T>
hid_t native_type();
template <>
hid_t native_type<float>() {
  return H5T_NATIVE_FLOAT;
}
template <>
hid_t native_type<double>() {
  return H5T_NATIVE_DOUBLE;
}
template <>
hid_t native_type<std::int32_t>() {
  return H5T_NATIVE_INT32;
}

template <class T>
void write_dataset(hid_t parent, const std::string& name, const std::vector<std::int64_t>& shape, const T* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t set = H5Dcreate2(parent, name.c_str(), native_type<T>(), space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (set < 0) {
    throw std::runtime_error("HDF5: cannot create dataset " + name);
  }
  check(H5Dwrite(set, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "writing " + name);
  H5Dclose(set);
  H5Sclose(space);
}

void write_string_attribute(hid_t object, const std::string& name, const std::string& value) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size());
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  check(H5Awrite(attr, type, value.data()), "writing attribute " + name);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

void write_double_attribute(hid_t object, const std::string& name, double value) {
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(object, name.c_str(), H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT);
  check(H5Awrite(attr, H5T_NATIVE_DOUBLE, &value), "writing attribute " + name);
  H5Aclose(attr);
  H5Sclose(space);
}

template <class Scalar>
void run(const std::string& out, const DecoderShape& shape, int batch) {
  const std::uint64_t seed = 20261203;
  const double init_std = 0.2;  // larger than training's 0.02 so every path carries signal
  DecoderModel<Host, Scalar> model(shape, batch);
  model.initialize(Host(), seed, init_std);
  // Norm gains 1 + 0.3 N(0, 1) so the gains matter in the forward pass and their gradients are not trivial.
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int t = 0; t < model.tensor_count(); ++t) {
    if (model.tensor_shape(t).size() == 1) {
      auto p = model.parameter(t);
      for (std::size_t i = 0; i < p.extent(0); ++i) {
        p(i) = static_cast<Scalar>(1.0 + 0.3 * normal(rng));
      }
    }
  }
  if constexpr (std::is_same_v<Scalar, float>) {
    // The fp32 weights come from a real wbaudit checkpoint: the same decoder trained 3 Adam steps by the engine
    // (so the norm gains have moved off 1), written by write_checkpoint to OUT.checkpoint.h5 and read back here; the
    // test reads the weights from that file with h5py, not from this dump.
    RunConfig c;
    c.mode = RunMode::reference;
    c.seed = seed;
    c.steps = 3;
    c.model.kind = "decoder";
    c.model.decoder =
        DecoderConfig{shape.vocab,   shape.width,           shape.heads,       shape.layers,   shape.mlp_hidden,
                      shape.seq_len, shape.rotary_fraction, shape.rotary_base, shape.norm_eps, shape.parallel_residual,
                      init_std};
    c.data.batch = batch;
    c.data.source = "markov";
    c.optimizer.kind = OptimizerKind::adam;
    c.optimizer.lr = 0.05;
    c.record.kind = RecordKind::every_k;
    c.record.k = 3;
    Training<Host> training(Host(), c);
    training.run(c.steps);
    const std::string path = out + ".checkpoint.h5";
    write_checkpoint(path, training.checkpoint());
    const Checkpoint back = read_checkpoint(path);
    for (int t = 0; t < model.tensor_count(); ++t) {
      const auto found = std::find_if(back.tensors.begin(), back.tensors.end(),
                                      [&](const TensorState& s) { return s.name == model.tensor_name(t); });
      if (found == back.tensors.end()) throw std::runtime_error("checkpoint lacks tensor " + model.tensor_name(t));
      auto p = model.parameter(t);
      if (found->weight.size() != p.extent(0)) throw std::runtime_error("checkpoint tensor " + found->name + " size");
      for (std::size_t i = 0; i < p.extent(0); ++i) p(i) = found->weight[i];
    }
  }
  Kokkos::View<std::int32_t*, Kokkos::HostSpace> tokens("tokens", std::size_t(batch) * (shape.seq_len + 1));
  std::uniform_int_distribution<int> pick(0, shape.vocab - 1);
  for (std::size_t i = 0; i < tokens.extent(0); ++i) {
    tokens(i) = pick(rng);
  }
  const double loss = model.loss_and_gradient(Host(), tokens);
  Kokkos::fence();

  nlohmann::json config = {{"vocab", shape.vocab},
                           {"width", shape.width},
                           {"heads", shape.heads},
                           {"layers", shape.layers},
                           {"mlp_hidden", shape.mlp_hidden},
                           {"seq_len", shape.seq_len},
                           {"rotary_fraction", shape.rotary_fraction},
                           {"rotary_base", shape.rotary_base},
                           {"norm_eps", shape.norm_eps},
                           {"parallel_residual", shape.parallel_residual},
                           {"batch", batch},
                           {"seed", seed},
                           {"init_std", init_std},
                           {"scalar", sizeof(Scalar) == 4 ? "float32" : "float64"}};
  const std::string tmp = out + ".tmp";
  const hid_t file = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) {
    throw std::runtime_error("cannot create " + tmp);
  }
  write_string_attribute(file, "config", config.dump());
  write_double_attribute(file, "loss", loss);
  write_dataset(file, "tokens", {batch, shape.seq_len + 1}, tokens.data());
  const hid_t weights = H5Gcreate2(file, "weights", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t grads = H5Gcreate2(file, "gradients", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  for (int t = 0; t < model.tensor_count(); ++t) {
    write_dataset(weights, model.tensor_name(t), model.tensor_shape(t), model.parameter(t).data());
    write_dataset(grads, model.tensor_name(t), model.tensor_shape(t), model.gradient(t).data());
  }
  H5Gclose(grads);
  H5Gclose(weights);
  check(H5Fclose(file), "closing " + tmp);
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + tmp + " to " + out);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  try {
    std::string out;
    bool use_double = false;
    DecoderShape shape;
    shape.vocab = 37;
    shape.width = 32;
    shape.heads = 4;
    shape.layers = 2;
    shape.mlp_hidden = 48;
    shape.seq_len = 12;
    const int batch = 3;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--parallel") {
        shape.parallel_residual = true;
      } else if (arg == "--double") {
        use_double = true;
      } else if (arg == "--rotary-fraction" && i + 1 < argc) {
        shape.rotary_fraction = std::stod(argv[++i]);
      } else if (!arg.empty() && arg[0] != '-' && out.empty()) {
        out = arg;
      } else {
        throw std::invalid_argument("unknown argument '" + arg + "'");
      }
    }
    if (out.empty()) {
      throw std::invalid_argument(
          "usage: wbaudit_decoder_torch_dump OUT.h5 [--parallel] [--rotary-fraction F] [--double]");
    }
    validate(shape);
    if (use_double) {
      run<double>(out, shape, batch);
    } else {
      run<float>(out, shape, batch);
    }
  } catch (const std::exception& e) {
    std::cerr << "wbaudit_decoder_torch_dump: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
