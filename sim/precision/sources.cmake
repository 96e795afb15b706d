# Sources of the precision layer (formats, rounding, write-back, events, RNG).
list(APPEND WBAUDIT_SIM_SOURCES precision/format.cpp precision/policy.cpp precision/writeback.cpp precision/audit.cpp)
