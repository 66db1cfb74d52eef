// <helper_timer.h>: a vendor library header kernels do not need (toolchain/include/stubs/README.md). The parser (RT_PARSE)
// and the CPU emulator (RT_CPU_EMULATOR) get the types, enumerators and macros host code around kernels names,
// so that a file (or a local header) using the library parses and its device code builds; NVRTC gets nothing;
// any other compiler gets the real header.
#pragma once
#if defined(RT_PARSE) || defined(RT_CPU_EMULATOR)
// cuda-samples Common/helper_timer.h: host timers
struct StopWatchInterface { virtual ~StopWatchInterface() {} virtual void start() {} virtual void stop() {}
                            virtual void reset() {} virtual float getTime() { return 0.0f; }
                            virtual float getAverageTime() { return 0.0f; } };
inline bool sdkCreateTimer(StopWatchInterface** t) { *t = new StopWatchInterface(); return true; }
inline bool sdkDeleteTimer(StopWatchInterface** t) { delete *t; *t = nullptr; return true; }
inline bool sdkStartTimer(StopWatchInterface** t) { (*t)->start(); return true; }
inline bool sdkStopTimer(StopWatchInterface** t) { (*t)->stop(); return true; }
inline bool sdkResetTimer(StopWatchInterface** t) { (*t)->reset(); return true; }
inline float sdkGetTimerValue(StopWatchInterface** t) { return (*t)->getTime(); }
inline float sdkGetAverageTimerValue(StopWatchInterface** t) { return (*t)->getAverageTime(); }
#elif !defined(__CUDACC_RTC__)
#include_next <helper_timer.h>
#endif
