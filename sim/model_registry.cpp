#include "sim/model_registry.hpp"

#include <map>
#include <mutex>
#include <stdexcept>

namespace wbaudit::sim {

// The built-in models, one line each (their descriptors: sim/model/<kind>_descriptor.cpp).
std::shared_ptr<const ModelDescriptor> two_layer_descriptor();
std::shared_ptr<const ModelDescriptor> decoder_descriptor();

namespace {

std::vector<std::shared_ptr<const ModelDescriptor>> builtin_models() {
  return {two_layer_descriptor(), decoder_descriptor()};
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const ModelDescriptor>> by_kind;
};

void add(Registry& registry, std::shared_ptr<const ModelDescriptor> descriptor) {
  if (!descriptor) {
    throw std::invalid_argument("register_model: no descriptor");
  }
  const std::string kind = descriptor->kind();
  if (kind.empty()) {
    throw std::invalid_argument("register_model: a model with an empty kind");
  }
  if (!registry.by_kind.emplace(kind, std::move(descriptor)).second) {
    throw std::invalid_argument("register_model: model.kind \"" + kind + "\" is already registered");
  }
}

// "decoder, two_layer": the registered kinds in order (the caller holds the mutex).
std::string kinds_of(const Registry& registry) {
  std::string known;
  for (const auto& [kind, descriptor] : registry.by_kind) {
    known += (known.empty() ? "" : ", ") + kind;
  }
  return known;
}

Registry& registry() {
  static Registry* const instance = [] {
    auto* r = new Registry;  // never destroyed: descriptors stay valid while static destructors run
    for (auto& d : builtin_models()) {
      add(*r, std::move(d));
    }
    return r;
  }();
  return *instance;
}

}  // namespace

std::set<std::string> ModelDescriptor::model_table() const {
  std::set<std::string> keys = model_keys();
  keys.insert("kind");
  return keys;
}

const ModelDescriptor& find_model(const std::string& kind) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.by_kind.find(kind);
  if (it == r.by_kind.end()) {
    throw ConfigError("model.kind: unknown model \"" + kind + "\" (known: " + kinds_of(r) + ")");
  }
  return *it->second;
}

std::vector<const ModelDescriptor*> registered_models() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<const ModelDescriptor*> out;
  for (const auto& [name, descriptor] : r.by_kind) {
    out.push_back(descriptor.get());
  }
  return out;
}

std::string known_model_kinds() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return kinds_of(r);
}

void register_model(std::shared_ptr<const ModelDescriptor> descriptor) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  add(r, std::move(descriptor));
}

}  // namespace wbaudit::sim
