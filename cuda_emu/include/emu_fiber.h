// emu_fiber.h — execution contexts of the emulator's fibers: a small x86-64 switch (callee-saved registers,
// MXCSR, x87 control word) or, elsewhere or with -DEMU_USE_UCONTEXT, ucontext. Part of cuda_emu.h.
#pragma once

namespace emu {

// ---- execution contexts ----------------------------------------------------------------------------------
#if defined(__x86_64__) && !defined(EMU_USE_UCONTEXT)
// Saves the callee-saved registers, MXCSR and the x87 control word on the current stack, stores the stack
// pointer in *save_sp, and resumes the context whose stack pointer is load_sp.
extern "C" void emu_ctx_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .p2align 4
  .weak emu_ctx_switch
  .hidden emu_ctx_switch
  .type emu_ctx_switch, @function
emu_ctx_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_ctx_switch, .-emu_ctx_switch
)");
struct Ctx { void* sp = nullptr; };
inline void ctx_switch(Ctx& from, Ctx& to) { emu_ctx_switch(&from.sp, to.sp); }
// A fresh context "returns" into entry with the stack aligned as after a call; entry must never return.
inline void ctx_make(Ctx& c, char* lo, size_t size, void (*entry)()) {
  uint64_t* sp = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(lo) + size) & ~uintptr_t(15));
  *--sp = 0;                                        // return address of entry: none
  *--sp = reinterpret_cast<uint64_t>(entry);        // popped by ret
  for (int i = 0; i < 6; ++i) *--sp = 0;            // rbp rbx r12 r13 r14 r15
  *--sp = 0x0000037F00001F80ull;                    // MXCSR 0x1F80, x87 control word 0x037F
  c.sp = sp;
}
#else
struct Ctx { ucontext_t uc; };
inline void ctx_switch(Ctx& from, Ctx& to) { swapcontext(&from.uc, &to.uc); }
inline void ctx_make(Ctx& c, char* lo, size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = lo;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

}  // namespace emu
