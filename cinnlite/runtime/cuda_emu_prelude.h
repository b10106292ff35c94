// cinnlite CUDA host emulation: the CUDA built-ins that generated kernels use, defined for a
// host C++ compiler, so that the same CUDA C runs on the CPU.
//
// Blocks and threads run one after another (block 0 thread 0, block 0 thread 1, ...), so the
// atomics are plain read-modify-writes and no kernel may rely on __syncthreads or shared memory
// (cinnlite's kernels use neither). The built-in index variables are plain globals of this
// library (thread-local ones cost more than a small kernel's body); the runtime lets one host
// thread at a time into a library.
//
// No standard headers: they would cost more to compile than the kernels themselves.

#define fmodf(a, b) __builtin_fmodf((a), (b))
#define fmod(a, b) __builtin_fmod((a), (b))
#define fabsf(a) __builtin_fabsf((a))
#define fabs(a) __builtin_fabs((a))
// The math functions of loop-nest Math expressions: the compiler's builtins, which call libm.
#define expf(a) __builtin_expf((a))
#define exp(a) __builtin_exp((a))
#define logf(a) __builtin_logf((a))
#define log(a) __builtin_log((a))
#define sqrtf(a) __builtin_sqrtf((a))
#define sqrt(a) __builtin_sqrt((a))
#define tanhf(a) __builtin_tanhf((a))
#define tanh(a) __builtin_tanh((a))

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct cl_emu_dim3 {
    unsigned int x, y, z;
};

static cl_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

// -- bit casts ------------------------------------------------------------------------------------

static inline unsigned int __float_as_uint(float f) { unsigned int u; __builtin_memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int i; __builtin_memcpy(&i, &f, 4); return i; }
static inline float __int_as_float(int i) { float f; __builtin_memcpy(&f, &i, 4); return f; }
static inline long long __double_as_longlong(double d) { long long i; __builtin_memcpy(&i, &d, 8); return i; }
static inline double __longlong_as_double(long long i) { double d; __builtin_memcpy(&d, &i, 8); return d; }

// -- atomics: sequential threads make every read-modify-write atomic ---------------------------------

static inline float atomicAdd(float* p, float v) { float old = *p; *p = old + v; return old; }
static inline double atomicAdd(double* p, double v) { double old = *p; *p = old + v; return old; }
static inline int atomicAdd(int* p, int v) {
    int old = *p; *p = (int)((unsigned int)old + (unsigned int)v); return old;
}
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    unsigned long long old = *p; *p = old + v; return old;
}
static inline unsigned int atomicAdd(unsigned int* p, unsigned int v) { unsigned int old = *p; *p = old + v; return old; }
static inline int atomicMax(int* p, int v) { int old = *p; if (v > old) *p = v; return old; }
static inline int atomicMin(int* p, int v) { int old = *p; if (v < old) *p = v; return old; }
static inline long long atomicMax(long long* p, long long v) { long long old = *p; if (v > old) *p = v; return old; }
static inline long long atomicMin(long long* p, long long v) { long long old = *p; if (v < old) *p = v; return old; }
static inline unsigned int atomicMax(unsigned int* p, unsigned int v) {
    unsigned int old = *p; if (v > old) *p = v; return old;
}
static inline unsigned int atomicMin(unsigned int* p, unsigned int v) {
    unsigned int old = *p; if (v < old) *p = v; return old;
}
static inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
    unsigned long long old = *p; if (v > old) *p = v; return old;
}
static inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
    unsigned long long old = *p; if (v < old) *p = v; return old;
}
static inline unsigned short atomicCAS(unsigned short* p, unsigned short expected, unsigned short desired) {
    unsigned short old = *p; if (old == expected) *p = desired; return old;
}
static inline unsigned int atomicCAS(unsigned int* p, unsigned int expected, unsigned int desired) {
    unsigned int old = *p; if (old == expected) *p = desired; return old;
}
static inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long expected,
                                           unsigned long long desired) {
    unsigned long long old = *p; if (old == expected) *p = desired; return old;
}

static inline unsigned long long atomicExch(unsigned long long* p, unsigned long long v) {
    unsigned long long old = *p; *p = v; return old;
}
static inline void __threadfence() {}

// -- the launcher ---------------------------------------------------------------------------------

// Launches over more items than this run, when the runtime leaves the grid to the launcher, as
// one block of one thread: its grid-stride loop then walks memory in order, where thousands of
// threads run one after another would each stride across the whole tensor.
static const long long cl_emu_serial_above = 1LL << 22;

// Runs ``body`` once per thread of a grid of ``blocks`` blocks of ``block`` threads, in order.
template <typename Body>
static void cl_emu_run_grid(long long blocks, unsigned int block, Body&& body) {
    gridDim = {(unsigned int)blocks, 1u, 1u};
    blockDim = {block, 1u, 1u};
    for (long long b = 0; b < blocks; ++b) {
        blockIdx = {(unsigned int)b, 0u, 0u};
        for (unsigned int t = 0; t < block; ++t) {
            threadIdx = {t, 0u, 0u};
            body();
        }
    }
}

// Runs ``body`` once per thread of the grid, as the GPU runtime sizes it: min(ceil(items / block),
// max_blocks) blocks of ``block`` threads when max_blocks > 0; every block the work needs when
// max_blocks == 0; and when max_blocks < 0 (the default), that, or one thread for big launches.
template <typename Body>
static void cl_emu_launch(long long items, unsigned int block, long long max_blocks, Body&& body) {
    long long blocks = (items + block - 1) / block;
    if (blocks < 1) blocks = 1;
    if (max_blocks > 0 && blocks > max_blocks) blocks = max_blocks;
    if (max_blocks < 0 && items > cl_emu_serial_above) blocks = block = 1;
    cl_emu_run_grid(blocks, block, body);
}
