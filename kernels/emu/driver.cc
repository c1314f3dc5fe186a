// driver.cc runs goccl's kernels, compiled from their own CUDA sources as
// host C++, on the CPU: every thread of every block of a launch, with
// __syncthreads and the warp shuffle and ballot emulated. Build (from the
// repository root):
//
//   clang++ -std=c++17 -O2 -ffp-contract=off -include kernels/emu/cuda_host.h \
//       kernels/emu/driver.cc -o driver
//
// `driver -list` prints the kernel names, one a line. Otherwise the driver
// reads launches from stdin and answers each on stdout, until EOF; README.md
// gives the format.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "../goccl.cu"

namespace {

// ---- Fibers: one per thread of the block being run. ----

// A fiber switch saves the callee-saved registers and the stack pointer of
// one fiber and restores another's. On x86-64 that is the few instructions
// of emu_switch; elsewhere swapcontext does it, slower (it also saves the
// signal mask, a system call each time).
#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
asm(R"(
	.text
	.p2align 4
	.type emu_switch,@function
emu_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size emu_switch, .-emu_switch
)");
extern "C" void emu_switch(void **save, void *to);

struct Context {
  void *sp;
};
#else
struct Context {
  ucontext_t uc;
};
#endif

enum State { kRun, kBarrier, kWarp, kDone };
enum WarpOp { kShfl, kBallot };

struct Fiber {
  Context ctx;
  emu_dim3 idx;
  State state;
  WarpOp op;
  u32 in, delta, out;
};

// Each fiber's stack, with a page below it that faults on overflow.
const int kStack = 64 << 10, kPage = 4096;

Fiber fibers[GOCCL_BLOCK];
char *stacks;
Context sched;
Fiber *cur;
void (*cur_thunk)(const u64 *);
const u64 *cur_args;

void switch_to(Context *save, Context *to) {
#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
  emu_switch(&save->sp, to->sp);
#else
  swapcontext(&save->uc, &to->uc);
#endif
}

// yield gives control back to the scheduler until it resumes this fiber.
void yield() {
  Fiber *me = cur;
  switch_to(&me->ctx, &sched);
}

[[noreturn]] void fiber_main() {
  cur_thunk(cur_args);
  cur->state = kDone;
  yield();
  abort(); // a finished fiber is never resumed
}

// start_fiber makes f begin at fiber_main on stack the next time it is
// switched to.
void start_fiber(Fiber &f, char *stack) {
#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
  // emu_switch pops six registers and returns: below the top, a zero
  // return address for fiber_main (so that it starts with the stack
  // aligned as after a call), its own address, and six zero registers.
  void **top = (void **)(stack + kStack);
  top[-1] = nullptr;
  top[-2] = (void *)&fiber_main;
  for (int i = 3; i <= 8; i++) top[-i] = nullptr;
  f.ctx.sp = top - 8;
#else
  getcontext(&f.ctx.uc);
  f.ctx.uc.uc_stack.ss_sp = stack;
  f.ctx.uc.uc_stack.ss_size = kStack;
  f.ctx.uc.uc_link = nullptr;
  makecontext(&f.ctx.uc, (void (*)())fiber_main, 0);
#endif
}

} // namespace

extern "C" {
emu_dim3 emu_block_idx, emu_block_dim, emu_grid_dim;

const emu_dim3 *emu_thread_idx() { return &cur->idx; }

void emu_sync_threads() {
  cur->state = kBarrier;
  yield();
}

u32 emu_shfl_down(u32 v, u32 delta) {
  Fiber *me = cur;
  me->state = kWarp;
  me->op = kShfl;
  me->in = v;
  me->delta = delta;
  yield();
  return me->out;
}

u32 emu_ballot(bool p) {
  Fiber *me = cur;
  me->state = kWarp;
  me->op = kBallot;
  me->in = p;
  me->delta = 0;
  yield();
  return me->out;
}

// The linker defines these around the section that __shared__ puts every
// shared variable in (cuda_host.h).
extern char __start_goccl_shared[], __stop_goccl_shared[];
}

namespace {

// resolve_warp completes warp w's collective when all its lanes wait at
// one: it returns 1 when it did, 0 when some lane is still elsewhere, and
// -1 (with *err set) when the lanes wait at different collectives.
int resolve_warp(int w, std::string *err) {
  Fiber *l = fibers + w * GOCCL_WARP;
  for (int i = 0; i < GOCCL_WARP; i++) {
    if (l[i].state != kWarp) return 0;
  }
  for (int i = 1; i < GOCCL_WARP; i++) {
    if (l[i].op != l[0].op || l[i].delta != l[0].delta) {
      *err = "warp " + std::to_string(w) + ": lanes 0 and " + std::to_string(i) +
             " are at different warp collectives";
      return -1;
    }
  }
  if (l[0].op == kShfl) {
    const u32 d = l[0].delta;
    for (u32 i = 0; i < GOCCL_WARP; i++) l[i].out = i + d < GOCCL_WARP ? l[i + d].in : l[i].in;
  } else {
    u32 mask = 0;
    for (int i = 0; i < GOCCL_WARP; i++) mask |= (l[i].in & 1u) << i;
    for (int i = 0; i < GOCCL_WARP; i++) l[i].out = mask;
  }
  for (int i = 0; i < GOCCL_WARP; i++) l[i].state = kRun;
  return 1;
}

// run_block runs every thread of the current block to its end. Threads run
// in index order until each finishes or waits; then the warps whose 32
// lanes all wait at a shuffle or ballot get their results, and when every
// thread waits at the barrier it opens. Anything else is a deadlock on a
// GPU and an error here.
std::string run_block() {
  for (int t = 0; t < GOCCL_BLOCK; t++) {
    Fiber &f = fibers[t];
    start_fiber(f, stacks + (size_t)t * (kStack + kPage) + kPage);
    f.idx = {(u32)t, 0, 0};
    f.state = kRun;
  }
  for (;;) {
    for (int t = 0; t < GOCCL_BLOCK; t++) {
      if (fibers[t].state == kRun) {
        cur = fibers + t;
        switch_to(&sched, &fibers[t].ctx);
      }
    }
    std::string err;
    bool resumed = false;
    for (int w = 0; w < GOCCL_BLOCK / GOCCL_WARP; w++) {
      const int r = resolve_warp(w, &err);
      if (r < 0) return err;
      resumed |= r > 0;
    }
    if (resumed) continue;
    int done = 0, barrier = 0, warp = 0;
    for (const Fiber &f : fibers) {
      done += f.state == kDone;
      barrier += f.state == kBarrier;
      warp += f.state == kWarp;
    }
    if (done == GOCCL_BLOCK) return "";
    if (barrier == GOCCL_BLOCK) {
      for (Fiber &f : fibers) f.state = kRun;
      continue;
    }
    return "deadlock: " + std::to_string(done) + " threads exited, " + std::to_string(barrier) +
           " wait at __syncthreads, " + std::to_string(warp) +
           " at a warp collective that not all 32 lanes reach";
  }
}

const char *cur_name = "";

// on_fault reports a kernel's bad memory access (or a fiber's stack
// overflow) and ends the driver: a fault in a kernel is a failed test.
void on_fault(int sig) {
  char msg[512];
  const int n = snprintf(msg, sizeof msg, "driver: %s in kernel %s, block %u, thread %u\n",
                         sig == SIGSEGV ? "segmentation fault" : "bus error", cur_name,
                         emu_block_idx.x, cur ? cur->idx.x : 0);
  if (write(2, msg, n > 0 ? (size_t)n : 0) < 0) {
  }
  _exit(3);
}

void setup() {
  const size_t per = kStack + kPage;
  stacks = (char *)mmap(nullptr, per * GOCCL_BLOCK, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (stacks == MAP_FAILED) {
    perror("driver: mmap");
    exit(1);
  }
  for (int t = 0; t < GOCCL_BLOCK; t++) mprotect(stacks + t * per, kPage, PROT_NONE);
  static char alt[64 << 10];
  stack_t ss = {};
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  sigaltstack(&ss, nullptr);
  struct sigaction sa = {};
  sa.sa_handler = on_fault;
  sa.sa_flags = SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

std::string launch(u32 grid, void (*thunk)(const u64 *), const u64 *args) {
  cur_thunk = thunk;
  cur_args = args;
  emu_grid_dim = {grid, 1, 1};
  emu_block_dim = {GOCCL_BLOCK, 1, 1};
  for (u32 b = 0; b < grid; b++) {
    emu_block_idx = {b, 0, 0};
    // Shared memory is undefined at the start of a block: make a kernel
    // that reads it before writing it see NaNs and all-ones words.
    memset(__start_goccl_shared, 0xff, __stop_goccl_shared - __start_goccl_shared);
    std::string err = run_block();
    if (!err.empty()) return "block " + std::to_string(b) + ": " + err;
  }
  return "";
}

// ---- The kernel table. ----

template <class T> T arg(u64 v) {
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<T>(v);
  } else {
    return (T)v;
  }
}

template <class F> struct Sig;
template <class... A> struct Sig<void (*)(A...)> {
  static constexpr size_t n = sizeof...(A);
  template <size_t... I> static void call(void (*f)(A...), const u64 *a, std::index_sequence<I...>) {
    f(arg<A>(a[I])...);
  }
};

template <auto F> void thunk(const u64 *a) {
  using S = Sig<decltype(F)>;
  S::call(F, a, std::make_index_sequence<S::n>{});
}

struct Kernel {
  const char *name;
  void (*thunk)(const u64 *);
  size_t nargs;
};

#define K(f) {#f, &thunk<&f>, Sig<decltype(&f)>::n}
#define ARITH(dt)                                                            \
  K(goccl_reduce_##dt##_sum), K(goccl_reduce_##dt##_prod),                   \
      K(goccl_reduce_##dt##_min), K(goccl_reduce_##dt##_max)
#define INT(dt)                                                              \
  ARITH(dt), K(goccl_reduce_##dt##_band), K(goccl_reduce_##dt##_bor),        \
      K(goccl_reduce_##dt##_bxor)

const Kernel kernels[] = {
    ARITH(f32), ARITH(f64), ARITH(f16), ARITH(bf16), INT(i8), INT(u8), INT(i32), INT(i64),
    K(goccl_scale_f32), K(goccl_scale_f64), K(goccl_scale_f16), K(goccl_scale_bf16),
    K(goccl_onebit_compensate_sumsq), K(goccl_onebit_finish), K(goccl_onebit_pack_update),
    K(goccl_onebit_pack_update_ballot),
    K(goccl_onebit_accumulate_signs), K(goccl_onebit_decompress),
};

const Kernel *find(const std::string &name) {
  for (const Kernel &k : kernels) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

// ---- The stdin/stdout protocol (README.md). ----

const size_t kGuard = 64;
const u8 kGuardByte = 0xa5;

bool read_full(void *p, size_t n) { return fread(p, 1, n, stdin) == n; }

template <class T> bool read_val(T *v) { return read_full(v, sizeof *v); }

void write_full(const void *p, size_t n) {
  if (fwrite(p, 1, n, stdout) != n) {
    perror("driver: write");
    exit(1);
  }
}

void reply_error(const std::string &msg) {
  const u32 status = 1, len = (u32)msg.size();
  write_full(&status, 4);
  write_full(&len, 4);
  write_full(msg.data(), len);
  fflush(stdout);
}

struct Buffer {
  u8 *base;
  u32 off;
  u64 len;
  u8 *data() const { return base + kGuard + off; }
  size_t total() const { return (kGuard + off + len + kGuard + 63) / 64 * 64; }
};

// guard_error names the first guard byte a kernel overwrote, if any.
std::string guard_error(const Buffer &b, int i) {
  for (size_t k = 0; k < b.total(); k++) {
    const bool inside = k >= kGuard + b.off && k < kGuard + b.off + b.len;
    if (!inside && b.base[k] != kGuardByte) {
      const long long at = (long long)k - (long long)(kGuard + b.off);
      return "buffer " + std::to_string(i) + ": byte " + std::to_string(at) +
             " outside [0, " + std::to_string(b.len) + ") was written";
    }
  }
  return "";
}

// serve answers one launch; it returns false at EOF.
bool serve() {
  u32 name_len;
  if (!read_val(&name_len)) return false;
  std::string name(name_len, '\0');
  u32 grid, nbuf, nargs;
  if (!read_full(&name[0], name_len) || !read_val(&grid) || !read_val(&nbuf)) {
    fprintf(stderr, "driver: truncated request\n");
    exit(1);
  }
  std::vector<Buffer> bufs(nbuf);
  for (Buffer &b : bufs) {
    if (!read_val(&b.off) || !read_val(&b.len)) {
      fprintf(stderr, "driver: truncated buffer header\n");
      exit(1);
    }
    if (b.off >= 64) {
      fprintf(stderr, "driver: buffer offset %u is not below 64\n", b.off);
      exit(1);
    }
    b.base = (u8 *)aligned_alloc(64, b.total());
    memset(b.base, kGuardByte, b.total());
    if (!read_full(b.data(), b.len)) {
      fprintf(stderr, "driver: truncated buffer\n");
      exit(1);
    }
  }
  if (!read_val(&nargs)) {
    fprintf(stderr, "driver: truncated request\n");
    exit(1);
  }
  std::vector<u64> args(nargs);
  std::string err;
  for (u64 &a : args) {
    u32 kind;
    u64 v;
    if (!read_val(&kind) || !read_val(&v)) {
      fprintf(stderr, "driver: truncated argument\n");
      exit(1);
    }
    if (kind == 0) {
      if (v >= bufs.size()) {
        err = "argument names buffer " + std::to_string(v) + " of " + std::to_string(bufs.size());
        v = 0;
      } else {
        v = (u64)bufs[v].data();
      }
    }
    a = v;
  }
  const Kernel *k = find(name);
  if (err.empty() && k == nullptr) err = "no kernel " + name;
  if (err.empty() && k->nargs != nargs) {
    err = name + " takes " + std::to_string(k->nargs) + " arguments, not " + std::to_string(nargs);
  }
  if (err.empty()) {
    cur_name = k->name;
    err = launch(grid, k->thunk, args.data());
  }
  for (size_t i = 0; i < bufs.size() && err.empty(); i++) err = guard_error(bufs[i], (int)i);
  if (!err.empty()) {
    reply_error(name + ": " + err);
  } else {
    const u32 status = 0;
    write_full(&status, 4);
    for (const Buffer &b : bufs) write_full(b.data(), b.len);
    fflush(stdout);
  }
  for (Buffer &b : bufs) free(b.base);
  return true;
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "-list") == 0) {
    for (const Kernel &k : kernels) printf("%s\n", k.name);
    return 0;
  }
  if (argc != 1) {
    fprintf(stderr, "usage: driver [-list] < launches > results\n");
    return 2;
  }
  setup();
  while (serve()) {
  }
  return 0;
}
