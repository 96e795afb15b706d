# CLI checks of `wbaudit formats` and `wbaudit round`: hand-computed outputs, and bad input (clear error naming the
# line and value, non-zero exit, no partial output). Run with -DWBAUDIT=<exe> -DWORK=<dir>.
file(MAKE_DIRECTORY ${WORK})

function(run_wbaudit out_rc out_stdout out_stderr input)
  file(WRITE ${WORK}/input.txt "${input}")
  execute_process(COMMAND ${WBAUDIT} ${ARGN} ${WORK}/input.txt RESULT_VARIABLE rc OUTPUT_VARIABLE so ERROR_VARIABLE se)
  set(${out_rc} "${rc}" PARENT_SCOPE)
  set(${out_stdout} "${so}" PARENT_SCOPE)
  set(${out_stderr} "${se}" PARENT_SCOPE)
endfunction()

function(expect_match text regex what)
  if(NOT "${text}" MATCHES "${regex}")
    message(FATAL_ERROR "${what}: expected /${regex}/ in:\n${text}")
  endif()
endfunction()

# formats: the table holds the OCP E4M3 maximum 448 and the FP4 maximum 6
execute_process(COMMAND ${WBAUDIT} formats RESULT_VARIABLE rc OUTPUT_VARIABLE so)
expect_match("${so}" "e4m3 +floating +8 +4 +3 +7 +448 " "formats e4m3 row")
expect_match("${so}" "e2m1 +floating +4 +2 +1 +1 +6 " "formats e2m1 row")
execute_process(COMMAND ${WBAUDIT} formats --json RESULT_VARIABLE rc OUTPUT_VARIABLE so)
expect_match("${so}" "\"max_finite\": 448" "formats --json")

# round: 464 saturates to 448 (code 0x7e), 1.3 -> 1.25 with neighbours 1.125 / 1.375, hex-float input
run_wbaudit(rc so se "1.3\n464\n0x1.8p-9\n" round --format e4m3)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "round failed: ${se}")
endif()
expect_match("${so}" "1.3 +1.25 +0x1.4p\\+0 +0x3a +1.125 +1.375" "round 1.3")
expect_match("${so}" "464 +448 +0x1.cp\\+8 +0x7e +416 +none +saturated" "round 464")
expect_match("${so}" "0x1.8p-9 +0.00390625 +0x1p-8 +0x02" "round hex input (tie to even)")

# write-back events at w = 1 in bf16: +2^-8 is erased (tie, 1 is even), just above it is applied
run_wbaudit(rc so se "1\n" round --format bf16 --update 0x1p-8)
expect_match("${so}" "w = 1: 1 erased" "erased tie")
run_wbaudit(rc so se "1\n" round --format bf16 --update 0x1.000002p-8)
expect_match("${so}" "w = 1: 1.0078125 applied" "applied")
run_wbaudit(rc so se "448\n" round --format e4m3 --update 32)
expect_match("${so}" "erased,saturated" "saturated")

# bad input: non-zero exit, message names the line and the value, nothing on stdout
run_wbaudit(rc so se "1\n2\nabc\n" round --format e4m3)
if(rc EQUAL 0 OR NOT so STREQUAL "")
  message(FATAL_ERROR "bad line: rc=${rc} stdout='${so}'")
endif()
expect_match("${se}" "input.txt:3: not a number: \"abc\"" "bad line message")
run_wbaudit(rc so se "1\ninf\n" round --format bf16)
if(rc EQUAL 0 OR NOT so STREQUAL "")
  message(FATAL_ERROR "non-finite: rc=${rc} stdout='${so}'")
endif()
expect_match("${se}" ":2: non-finite value \"inf\"" "non-finite message")
run_wbaudit(rc so se "1\n" round --format e4m4)
expect_match("${se}" "unknown format \"e4m4\" \\(did you mean \"e4m3\"\\?\\) \\(known: fp32" "unknown format")
run_wbaudit(rc so se "1\n" round --format int9)
expect_match("${se}" "int9" "bad K")
run_wbaudit(rc so se "1\n" round --format bf16 --policy stochastic --sr-bits 33)
expect_match("${se}" "sr_bits = 33" "sr_bits range")
run_wbaudit(rc so se "1\n" round --format bf16 --policy stochastic --sr-bits 8 --sr-stream mersenne)
expect_match("${se}" "unknown SR stream \"mersenne\" \\(known: philox, philox-packed\\)" "unknown SR stream")
run_wbaudit(rc so se "1\n" round --format bf16 --policy stochastic --sr-bits 17 --sr-stream philox-packed)
expect_match("${se}" "SR stream \"philox-packed\" needs stochastic or deadzone-sr with sr_bits 0 or 1..16" "packed r=17")
run_wbaudit(rc so se "1.001\n" round --format bf16 --policy stochastic --sr-bits 8 --sr-stream philox-packed --json)
expect_match("${so}" "\"sr_stream\": \"philox-packed\"" "round --json names a non-default stream")
run_wbaudit(rc so se "1.001\n" round --format bf16 --policy stochastic --sr-bits 8 --json)
if("${so}" MATCHES "sr_stream")
  message(FATAL_ERROR "round --json names the default stream: ${so}")
endif()
run_wbaudit(rc so se "1\n" round --format bf16 --policy stochastik)
expect_match("${se}" "unknown write-back policy \"stochastik\"" "unknown policy")
if(rc EQUAL 0 OR NOT so STREQUAL "")
  message(FATAL_ERROR "unknown policy: rc=${rc} stdout='${so}'")
endif()

# Refused, never wrapped or silently changed (issue 16): seeds outside [0, 2^64) or not decimal integers, proposals
# that underflow fp32, inputs that underflow double, non-fp32 integer scales (the message offers the fp32 value and
# --absmax).
function(expect_refused input regex what)
  run_wbaudit(rc so se "${input}" ${ARGN})
  if(rc EQUAL 0 OR NOT so STREQUAL "")
    message(FATAL_ERROR "${what}: accepted (rc=${rc}) stdout='${so}'")
  endif()
  expect_match("${se}" "${regex}" "${what}")
endfunction()
foreach(seed -1 -5 18446744073709551616 1e23)
  expect_refused("1\n" "--seed: \"${seed}\" is not a decimal integer" "seed ${seed}" round --format e4m3 --policy
                 stochastic --seed=${seed})
endforeach()
run_wbaudit(rc so se "1\n" round --format e4m3 --policy stochastic --seed 18446744073709551615)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "seed 2^64-1 refused: ${se}")
endif()
expect_refused("1\n" "--update 1e-50 underflows to 0 in fp32" "update underflow" round --format bf16 --update 1e-50)
expect_refused("1e-400\n" "input.txt:1: \"1e-400\" underflows to 0 in double" "input underflow" round --format e4m3)
# 0.1 / 1 rounded up to 16 significant bits: ceil(0.1 * 2^19) / 2^19 = 52429 / 524288 = 0.10000038146972656.
expect_refused("1\n" "--scale 0.10000000000000001 is not a usable scale for int4 .* use --scale 0.10000038146972656"
               "scale" round --format int4 --scale 0.1)
# A proposal that is not an fp32 value is said to be rounded; --absmax gives the simulator's scale (0.7 / 7 rounded
# up to 16 significant bits, as above).
run_wbaudit(rc so se "1\n" round --format bf16 --update 0.1)
expect_match("${so}" "\\[--update 0.1 rounded to fp32\\]" "update rounding reported")
run_wbaudit(rc so se "1\n" round --format int4 --absmax 0.7 --json)
expect_match("${so}" "\"scale\": 0.10000038146972656" "absmax scale")
# Saturated inputs are not exact; a long input row is printed whole.
run_wbaudit(rc so se "449\n" round --format e4m3 --json)
expect_match("${so}" "\"exact\": false" "saturated not exact")
string(REPEAT "0" 600 zeros)
run_wbaudit(rc so se "0x1.${zeros}p0\n" round --format e4m3)
expect_match("${so}" "0x1.${zeros}p0 +1 " "long row printed whole")
