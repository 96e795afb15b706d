# Sources of models, optimizers, data, traces and the cell runner (list them relative to sim/).
list(APPEND WBAUDIT_SIM_SOURCES model/two_layer.cpp optim/optimizer.cpp optim/schedule.cpp trace/record_schedule.cpp
     trace/trace.cpp run.cpp engine.cpp checkpoint.cpp)
# The decoder (docs/decoder.md).
list(APPEND WBAUDIT_SIM_SOURCES model/decoder.cpp)
# The token sources of language models (docs/data.md).
list(APPEND WBAUDIT_SIM_SOURCES data/markov_language.cpp data/byte_text.cpp)
