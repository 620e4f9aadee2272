// Helpers for timing, not ops.

// Keeps the stream busy for `nanoseconds` of device time, by the global nanosecond timer.
//
// Why: a benchmark that waits for each repetition before queueing the next starts every one on
// an idle GPU, so the start event fires at once and the measured time includes however long
// the host takes to queue the work behind it (microseconds: as long as a batch-1 GEMM). Queued
// after a spin that outlasts that, the start event fires when the spin ends, with the work
// already waiting behind it. One thread of the block of THREADS spins; the rest of the GPU
// stays free.
template <int THREADS>
__device__ __forceinline__ void spin_program(unsigned long long nanoseconds) {
    if (threadIdx.x != 0) return;
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < nanoseconds);
}
