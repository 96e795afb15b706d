include_guard(GLOBAL)
# Warnings on for our targets only; the precision layer is never built with fast-math or FP contraction, since
# a fused multiply-add or reassociation changes which updates are erased.
function(wbaudit_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unknown-pragmas -ffp-contract=off
                                           -fno-fast-math)
  if(WBAUDIT_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer)
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
  endif()
endfunction()
